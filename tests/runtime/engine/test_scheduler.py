"""Scheduler and continuous KV cache, driven through the engine core's ``step()`` by a small
deterministic executor.

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
from engine_fakes import (
    VOCAB,
    CacheWritingExecutor,
    OracleDrafter,
    add,
    alone,
    engine_core,
    prompt_of,
    run_all,
)

from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.core import EngineCore
from clika_runtime.engine.errors import QueueFullError
from clika_runtime.engine.kv.continuous_cache import ContinuousKVCache
from clika_runtime.engine.kv.kv_cache import CacheShape
from clika_runtime.engine.options import EngineOptions
from clika_runtime.engine.scheduler import Scheduler
from clika_runtime.engine.sequence import Request, Sequence, SequenceStatus

EOS = 0


def make(max_active=4, max_step_tokens=16, max_seq=512, max_queued=64, prefix_reuse=True):
    cache = ContinuousKVCache(
        CacheShape(1, 1, 1), num_slots=max_active, max_seq=max_seq, prefix_reuse=prefix_reuse
    )
    ex = CacheWritingExecutor(cache)
    core = engine_core(
        cache,
        ex,
        max_seq=max_seq,
        max_active=max_active,
        max_queued=max_queued,
        max_step_tokens=max_step_tokens,
    )
    return core, ex


_ids = iter(range(1, 10**9))


def seq_of(prompt, max_new=8, **config) -> Sequence:
    return Sequence(Request(next(_ids), tuple(prompt), GenerationConfig(max_new_tokens=max_new, **config)))


def test_many_requests_with_chunks_match_each_alone():
    core, ex = make(max_active=4, max_step_tokens=16)
    seqs = [add(core, prompt_of(n, i), max_new=5 + i % 4) for i, n in enumerate([3, 40, 1, 17, 64, 9, 2, 33])]
    run_all(core)
    for s in seqs:
        assert s.status == SequenceStatus.FINISHED_LENGTH
        assert s.completion_ids == alone(list(s.request.prompt_ids), s.config.max_new_tokens)
    assert all(p.num_tokens <= 16 or len(p.rows) > 16 for p in ex.plans)


def test_long_prompt_is_chunked_and_decode_rows_keep_running():
    core, ex = make(max_active=2, max_step_tokens=8)
    talker = add(core, prompt_of(2, 1), max_new=30)
    for _ in range(3):  # the talker is decoding before the long prompt arrives
        core.step()
    long = add(core, prompt_of(100, 2), max_new=3)
    before = talker.num_completion_tokens
    prefill_steps = 0
    while long.num_computed_tokens < long.num_prompt_tokens:
        plan = core.step()
        assert plan.num_tokens <= 8
        assert any(r.seq is talker and r.num_new == 1 for r in plan.rows), "decode row skipped"
        prefill_steps += 1
    assert prefill_steps >= 100 // 7
    assert talker.num_completion_tokens == before + prefill_steps
    run_all(core)
    assert long.completion_ids == alone(list(long.request.prompt_ids), 3)
    assert talker.completion_ids == alone(list(talker.request.prompt_ids), 30)


def test_admission_waits_for_a_slot_without_error():
    core, ex = make(max_active=2, max_step_tokens=64)
    seqs = [add(core, prompt_of(4, i), max_new=3) for i in range(5)]
    plan = core.step()
    assert {r.seq.request_id for r in plan.rows} == {seqs[0].request_id, seqs[1].request_id}
    assert [s.status for s in seqs[2:]] == [SequenceStatus.WAITING] * 3
    run_all(core)
    assert all(s.completion_ids == alone(list(s.request.prompt_ids), 3) for s in seqs)


def test_queue_full_refuses_only_the_new_request():
    core, _ = make(max_active=1, max_queued=2)
    sched = core.scheduler
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
    core, _ = make()
    stopped = add(core, prompt, max_new=50, stop_token_ids=(stop,))
    run_all(core)
    assert stopped.status == SequenceStatus.FINISHED_STOPPED
    assert stopped.completion_ids == expected[: expected.index(stop) + 1]

    core, _ = make(max_seq=12)
    full = add(core, prompt, max_new=50)
    run_all(core)
    assert full.status == SequenceStatus.FINISHED_LENGTH and full.num_tokens == 12


def test_eos_ends_unless_ignored():
    # Find a prompt whose reply produces some token t early; call t the EOS.
    prompt = prompt_of(6, 5)
    expected = alone(prompt, 10)
    eos = expected[2]
    core, _ = make()
    s1 = add(core, prompt, max_new=10, eos=frozenset({eos}))
    s2 = add(core, prompt, max_new=10, eos=frozenset({eos}), ignore_eos=True)
    run_all(core)
    assert s1.completion_ids == expected[:3] and s1.status == SequenceStatus.FINISHED_STOPPED
    assert s2.completion_ids == expected and s2.status == SequenceStatus.FINISHED_LENGTH


def test_cancel_frees_the_slot_and_leaves_others_unchanged():
    core, _ = make(max_active=2, max_step_tokens=32)
    sched = core.scheduler
    a, b, c = (add(core, prompt_of(6, i), max_new=12) for i in range(3))
    for _ in range(4):
        core.step()
    assert c.status == SequenceStatus.WAITING
    core.cancel(a.request_id)
    assert a.status == SequenceStatus.FINISHED_CANCELLED and a.slot not in {b.slot}
    core.check_integrity()
    plan = core.step()
    assert any(r.seq is c for r in plan.rows), "the freed slot admits the waiting request"
    run_all(core)
    assert b.completion_ids == alone(list(b.request.prompt_ids), 12)
    assert c.completion_ids == alone(list(c.request.prompt_ids), 12)
    assert sched.cancel(a.request_id) is None  # already gone
    waiting = add(core, [1, 2, 3])
    core.cancel(waiting.request_id)
    assert waiting.status == SequenceStatus.FINISHED_CANCELLED and not core.has_work
    core.check_integrity()


def test_freed_slot_serves_a_shared_prefix():
    core, _ = make(max_active=2, max_step_tokens=64)
    first = add(core, prompt_of(30, 9), max_new=4)
    run_all(core)
    follow_prompt = list(first.token_ids[:-1]) + prompt_of(5, 11)  # the next turn of a chat
    follow = add(core, follow_prompt, max_new=6)
    plan = core.step()
    assert follow.num_cached_tokens == first.num_computed_tokens == 33
    assert plan.rows[0].start == 33 and plan.rows[0].slot == first.slot
    run_all(core)
    assert follow.completion_ids == alone(follow_prompt, 6)
    # A prompt that diverges at once takes the other (empty) slot and computes everything.
    other = add(core, prompt_of(10, 50), max_new=2)
    core.step()
    assert other.num_cached_tokens == 0 and other.slot != follow.slot


def test_identical_prompt_recomputes_its_last_two_tokens():
    core, _ = make(max_active=1)
    prompt = prompt_of(20, 4)
    a = add(core, prompt, max_new=3)
    run_all(core)
    b = add(core, prompt, max_new=3)
    plan = core.step()
    # Two, not one: a step of one token rounds differently (kv_cache.RECOMPUTED_TAIL).
    assert b.num_cached_tokens == 18 and plan.rows[0].num_new == 2 and plan.rows[0].sample
    run_all(core)
    assert b.completion_ids == a.completion_ids


def test_prefix_reuse_off_computes_everything():
    core, _ = make(max_active=1, prefix_reuse=False)
    prompt = prompt_of(20, 4)
    add(core, prompt, max_new=2)
    run_all(core)
    b = add(core, prompt, max_new=2)
    core.step()
    assert b.num_cached_tokens == 0


def test_cache_grows_and_keeps_content():
    core, _ = make(max_active=1, max_seq=2048, max_step_tokens=512)
    sched = core.scheduler
    short = add(core, prompt_of(10, 1), max_new=4)
    run_all(core)
    cap = sched.cache.capacity
    long = add(core, list(short.token_ids[:-1]) + prompt_of(600, 2), max_new=4)
    run_all(core)
    assert sched.cache.capacity > cap and long.num_cached_tokens == 13
    assert long.completion_ids == alone(list(long.request.prompt_ids), 4)
    sched.cache.ensure_slots(3)
    assert sched.cache.num_rows == 3 and sched.cache.num_free == 3
    sched.check_integrity()


def test_step_rows_are_packed_in_slot_order():
    core, ex = make(max_active=3, max_step_tokens=64)
    for i in range(3):
        add(core, prompt_of(3 + i, i), max_new=5)
    run_all(core)
    for plan in ex.plans:
        slots = [r.slot for r in plan.rows]
        assert slots == sorted(slots)


def test_integrity_check_catches_drift():
    core, _ = make()
    s = add(core, [1, 2, 3])
    core.step()
    s.num_computed_tokens = s.num_tokens + 1
    with pytest.raises(AssertionError, match="computed"):
        core.check_integrity()


@pytest.mark.parametrize("wrong", [False, True])
def test_drafts_kept_or_refused_take_one_update_path_and_replies_match_alone(wrong):
    cache = ContinuousKVCache(CacheShape(1, 1, 1), num_slots=2, max_seq=512)
    ex = CacheWritingExecutor(cache)
    drafter = OracleDrafter(wrong)
    core = EngineCore(
        ex,
        cache,
        None,
        max_seq=512,
        vocab_size=VOCAB,
        options=EngineOptions(max_active=2, max_step_tokens=64),
        drafters={"assistant": drafter},
    )
    drafting = add(core, prompt_of(5, 1), max_new=20, num_assistant_tokens=4)
    plain = add(core, prompt_of(7, 2), max_new=9)  # decodes in the same steps, never drafts
    steps = run_all(core)
    assert drafting.completion_ids == alone(list(drafting.request.prompt_ids), 20)
    assert plain.completion_ids == alone(list(plain.request.prompt_ids), 9)
    assert drafter.calls > 0 and drafting.num_draft_tokens > 0 and plain.num_draft_tokens == 0
    if wrong:
        assert drafting.num_accepted_draft_tokens == 0 and steps >= 20
    else:
        assert drafting.num_accepted_draft_tokens == drafting.num_draft_tokens and steps < 20
    assert drafting.num_computed_tokens == drafting.num_tokens - 1  # the last pick is never computed


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
