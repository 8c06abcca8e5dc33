"""Scheduler and continuous KV cache, driven by a small deterministic executor.

The executor here stands in for the graph only in these bookkeeping tests: it
writes each computed token into the real cache buffer at its slot and
position, and its "logits" pick a next token from everything the slot holds up
to that position. A scheduling mistake (a wrong slot, position, chunk or a
stale reused prefix) changes the tokens, so every test compares against the
same rule applied to each request alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_fakes import CacheWritingExecutor, alone, prompt_of

from clika_runtime.engine.kv_cache import CacheShape, ContinuousKVCache
from clika_runtime.engine.scheduler import Scheduler
from clika_runtime.engine.types import (
    GenerationConfig,
    QueueFullError,
    Request,
    Sequence,
    SequenceStatus,
)

EOS = 0


def make(max_active=4, max_step_tokens=16, max_seq=512, max_queued=64, prefix_reuse=True):
    cache = ContinuousKVCache(
        CacheShape(1, 1, 1), num_slots=max_active, max_seq=max_seq, prefix_reuse=prefix_reuse
    )
    sched = Scheduler(
        cache, max_seq=max_seq, max_active=max_active, max_queued=max_queued, max_step_tokens=max_step_tokens
    )
    return sched, CacheWritingExecutor(cache)


_ids = iter(range(1, 10**9))


def seq_of(prompt, max_new=8, **config) -> Sequence:
    return Sequence(Request(next(_ids), tuple(prompt), GenerationConfig(max_new_tokens=max_new, **config)))


def run_all(sched: Scheduler, ex: CacheWritingExecutor, limit: int = 10_000) -> int:
    steps = 0
    while sched.has_work:
        plan = sched.schedule()
        assert plan is not None
        sched.update(plan, ex.run(plan))
        sched.check_integrity()
        steps += 1
        assert steps < limit
    return steps


def test_many_requests_with_chunks_match_each_alone():
    sched, ex = make(max_active=4, max_step_tokens=16)
    seqs = [seq_of(prompt_of(n, i), max_new=5 + i % 4) for i, n in enumerate([3, 40, 1, 17, 64, 9, 2, 33])]
    for s in seqs:
        sched.add(s)
    run_all(sched, ex)
    for s in seqs:
        assert s.status == SequenceStatus.FINISHED_LENGTH
        assert s.completion_ids == alone(list(s.request.prompt_ids), s.config.max_new_tokens)
    assert all(p.num_tokens <= 16 or len(p.rows) > 16 for p in ex.plans)


def test_long_prompt_is_chunked_and_decode_rows_keep_running():
    sched, ex = make(max_active=2, max_step_tokens=8)
    talker = seq_of(prompt_of(2, 1), max_new=30)
    sched.add(talker)
    for _ in range(3):  # the talker is decoding before the long prompt arrives
        plan = sched.schedule()
        sched.update(plan, ex.run(plan))
    long = seq_of(prompt_of(100, 2), max_new=3)
    sched.add(long)
    before = talker.num_completion_tokens
    prefill_steps = 0
    while long.num_computed_tokens < long.num_prompt_tokens:
        plan = sched.schedule()
        assert plan.num_tokens <= 8
        assert any(r.seq is talker and r.num_new == 1 for r in plan.rows), "decode row skipped"
        sched.update(plan, ex.run(plan))
        prefill_steps += 1
    assert prefill_steps >= 100 // 7
    assert talker.num_completion_tokens == before + prefill_steps
    run_all(sched, ex)
    assert long.completion_ids == alone(list(long.request.prompt_ids), 3)
    assert talker.completion_ids == alone(list(talker.request.prompt_ids), 30)


def test_admission_waits_for_a_slot_without_error():
    sched, ex = make(max_active=2, max_step_tokens=64)
    seqs = [seq_of(prompt_of(4, i), max_new=3) for i in range(5)]
    for s in seqs:
        sched.add(s)
    plan = sched.schedule()
    assert {r.seq.request_id for r in plan.rows} == {seqs[0].request_id, seqs[1].request_id}
    assert [s.status for s in seqs[2:]] == [SequenceStatus.WAITING] * 3
    sched.update(plan, ex.run(plan))
    run_all(sched, ex)
    assert all(s.completion_ids == alone(list(s.request.prompt_ids), 3) for s in seqs)


def test_queue_full_refuses_only_the_new_request():
    sched, _ = make(max_active=1, max_queued=2)
    a, b, c, d = seq_of([1, 2]), seq_of([3, 4]), seq_of([5, 6]), seq_of([7, 8])
    for s in (a, b, c):  # a takes the free slot at the next step; b and c wait
        sched.add(s)
    with pytest.raises(QueueFullError, match="queue is full"):
        sched.add(d)
    assert list(sched.waiting) == [a, b, c] and d.status == SequenceStatus.WAITING
    sched.check_integrity()
    sched.schedule()
    with pytest.raises(QueueFullError):
        sched.add(d)
    assert [s.status for s in (a, b, c)] == [
        SequenceStatus.RUNNING,
        SequenceStatus.WAITING,
        SequenceStatus.WAITING,
    ]


def test_stop_id_and_context_window_end_sequences():
    prompt = prompt_of(5, 3)
    expected = alone(prompt, 50)
    stop = expected[3]
    sched, ex = make()
    stopped = seq_of(prompt, max_new=50, stop_token_ids=(stop,))
    sched.add(stopped)
    run_all(sched, ex)
    assert stopped.status == SequenceStatus.FINISHED_STOPPED
    assert stopped.completion_ids == expected[: expected.index(stop) + 1]

    sched, ex = make(max_seq=12)
    full = seq_of(prompt, max_new=50)
    sched.add(full)
    run_all(sched, ex)
    assert full.status == SequenceStatus.FINISHED_LENGTH and full.num_tokens == 12


def test_eos_ends_unless_ignored():
    # Find a prompt whose reply produces some token t early; call t the EOS.
    prompt = prompt_of(6, 5)
    expected = alone(prompt, 10)
    eos = expected[2]
    sched, ex = make()
    s1 = Sequence(Request(1001, tuple(prompt), GenerationConfig(max_new_tokens=10), frozenset({eos})))
    s2 = Sequence(
        Request(1002, tuple(prompt), GenerationConfig(max_new_tokens=10, ignore_eos=True), frozenset({eos}))
    )
    sched.add(s1)
    sched.add(s2)
    run_all(sched, ex)
    assert s1.completion_ids == expected[:3] and s1.status == SequenceStatus.FINISHED_STOPPED
    assert s2.completion_ids == expected and s2.status == SequenceStatus.FINISHED_LENGTH


def test_cancel_frees_the_slot_and_leaves_others_unchanged():
    sched, ex = make(max_active=2, max_step_tokens=32)
    a, b, c = (seq_of(prompt_of(6, i), max_new=12) for i in range(3))
    for s in (a, b, c):
        sched.add(s)
    for _ in range(4):
        plan = sched.schedule()
        sched.update(plan, ex.run(plan))
    assert c.status == SequenceStatus.WAITING
    assert sched.cancel(a.request_id) is a
    assert a.status == SequenceStatus.FINISHED_CANCELLED and a.slot not in {b.slot}
    sched.check_integrity()
    plan = sched.schedule()
    assert any(r.seq is c for r in plan.rows), "the freed slot admits the waiting request"
    sched.update(plan, ex.run(plan))
    run_all(sched, ex)
    assert b.completion_ids == alone(list(b.request.prompt_ids), 12)
    assert c.completion_ids == alone(list(c.request.prompt_ids), 12)
    assert sched.cancel(a.request_id) is None  # already gone
    waiting = seq_of([1, 2, 3])
    sched.add(waiting)
    assert sched.cancel(waiting.request_id) is waiting
    assert waiting.status == SequenceStatus.FINISHED_CANCELLED and not sched.has_work


def test_freed_slot_serves_a_shared_prefix():
    sched, ex = make(max_active=2, max_step_tokens=64)
    first = seq_of(prompt_of(30, 9), max_new=4)
    sched.add(first)
    run_all(sched, ex)
    follow_prompt = list(first.token_ids[:-1]) + prompt_of(5, 11)  # the next turn of a chat
    follow = seq_of(follow_prompt, max_new=6)
    sched.add(follow)
    plan = sched.schedule()
    assert follow.num_cached_tokens == first.num_computed_tokens == 33
    assert plan.rows[0].start == 33 and plan.rows[0].slot == first.slot
    sched.update(plan, ex.run(plan))
    run_all(sched, ex)
    assert follow.completion_ids == alone(follow_prompt, 6)
    # A prompt that diverges at once takes the other (empty) slot and computes everything.
    other = seq_of(prompt_of(10, 50), max_new=2)
    sched.add(other)
    sched.schedule()
    assert other.num_cached_tokens == 0 and other.slot != follow.slot


def test_identical_prompt_recomputes_its_last_token():
    sched, ex = make(max_active=1)
    prompt = prompt_of(20, 4)
    a = seq_of(prompt, max_new=3)
    sched.add(a)
    run_all(sched, ex)
    b = seq_of(prompt, max_new=3)
    sched.add(b)
    plan = sched.schedule()
    assert b.num_cached_tokens == 19 and plan.rows[0].num_new == 1 and plan.rows[0].sample
    sched.update(plan, ex.run(plan))
    run_all(sched, ex)
    assert b.completion_ids == a.completion_ids


def test_prefix_reuse_off_computes_everything():
    sched, ex = make(max_active=1, prefix_reuse=False)
    prompt = prompt_of(20, 4)
    sched.add(seq_of(prompt, max_new=2))
    run_all(sched, ex)
    b = seq_of(prompt, max_new=2)
    sched.add(b)
    sched.schedule()
    assert b.num_cached_tokens == 0


def test_cache_grows_and_keeps_content():
    sched, ex = make(max_active=1, max_seq=2048, max_step_tokens=512)
    short = seq_of(prompt_of(10, 1), max_new=4)
    sched.add(short)
    run_all(sched, ex)
    cap = sched.cache.capacity
    long = seq_of(list(short.token_ids[:-1]) + prompt_of(600, 2), max_new=4)
    sched.add(long)
    run_all(sched, ex)
    assert sched.cache.capacity > cap and long.num_cached_tokens == 13
    assert long.completion_ids == alone(list(long.request.prompt_ids), 4)
    sched.cache.ensure_slots(3)
    assert sched.cache.num_rows == 3 and sched.cache.num_free == 3
    sched.check_integrity()


def test_step_rows_are_packed_in_slot_order():
    sched, ex = make(max_active=3, max_step_tokens=64)
    for i in range(3):
        sched.add(seq_of(prompt_of(3 + i, i), max_new=5))
    run_all(sched, ex)
    for plan in ex.plans:
        slots = [r.slot for r in plan.rows]
        assert slots == sorted(slots)


def test_integrity_check_catches_drift():
    sched, ex = make()
    s = seq_of([1, 2, 3])
    sched.add(s)
    plan = sched.schedule()
    sched.update(plan, ex.run(plan))
    s.num_computed_tokens = s.num_tokens + 1
    with pytest.raises(AssertionError, match="computed"):
        sched.check_integrity()


def test_bad_limits_are_refused():
    cache = ContinuousKVCache(CacheShape(1, 1, 1), num_slots=1, max_seq=8)
    with pytest.raises(ValueError, match="max_active"):
        Scheduler(cache, max_seq=8, max_active=0)
    with pytest.raises(ValueError, match="max_step_tokens"):
        Scheduler(cache, max_seq=8, max_step_tokens=0)


def vm_flags(address: int) -> list[str]:
    """The kernel's VmFlags of the mapping holding ``address`` (Linux /proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_kv_buffers_commit_memory_page_by_page():
    """No transparent huge pages: a KV buffer's RSS follows the rows written, not its size."""
    cache = ContinuousKVCache(CacheShape(2, 3, 64), num_slots=8, max_seq=4096)
    seq = seq_of(list(range(1, 7)))
    seq.slot = cache.allocate(seq).slot
    keys, values = cache.buffers()
    for array in (*keys, *values):
        assert array.shape == (8, 3, cache.capacity, 64) and not array.any()
        assert "nh" in vm_flags(array.ctypes.data), "the KV buffer may be backed by huge pages"
    keys[0][seq.slot, 2, :6] = 1.0  # writable in place, as the graph writes a step's rows
    seq.num_computed_tokens = 6
    cache.ensure_slots(9)  # growing keeps the rows the slots hold
    grown = cache.buffers()[0][0]
    assert (grown[seq.slot, 2, :6] == 1.0).all() and "nh" in vm_flags(grown.ctypes.data)
