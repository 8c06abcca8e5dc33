"""The paged KV cache under the scheduler, with exact block ids, driven by a pool-writing executor.

The executor stands in for the graph only in these bookkeeping tests: it
packs each step with the cache's own ``pack`` (block tables, slot mapping),
writes every new token id into its pool slot, and predicts a row's next token
from the history it reads back through the row's block table. A wrong table,
a shared block written by its second owner, a stale prefix or a lost block
changes the tokens, so every test also compares with each request alone.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_fakes import Collected, alone, engine_core, next_token, one_hot, prompt_of, run_all

from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.core import EngineCore
from clika_runtime.engine.executor import StepTiming
from clika_runtime.engine.kv.kv_cache import CacheShape
from clika_runtime.engine.kv.paged_cache import PagedKVCache
from clika_runtime.engine.sequence import Request, Sequence, SequenceStatus
from clika_runtime.engine.step_plan import StepPlan

BS = 4
SHAPE = CacheShape(num_layers=1, num_kv_heads=1, head_dim=1)
BLOCK_BYTES = 2 * BS * 4  # K and V, one layer, one head of one float32


class PoolWritingExecutor:
    """Writes token ids into layer 0's key pool at their slots; predicts from what the block table reads."""

    timing = StepTiming()

    def __init__(self, cache: PagedKVCache) -> None:
        self.cache = cache
        self.plans: list[StepPlan] = []

    def run(self, plan: StepPlan, before_call: object = None) -> np.ndarray:
        self.plans.append(plan)
        packed = self.cache.pack(plan, None)
        flat = self.cache.buffers()[0][0].reshape(-1)  # [blocks * BS]: index = slot
        flat[packed.feeds["slot_mapping"]] = packed.feeds["input_ids"]
        out = []
        for row in plan.sample_rows:
            table = self.cache.table(row.seq)
            end = row.start + row.num_new
            out.append(next_token([flat[table[p // BS] * BS + p % BS] for p in range(end)]))
        return one_hot(out)


def make(blocks=64, max_active=4, max_step_tokens=64, max_seq=512, prefix_reuse=True):
    cache = PagedKVCache(
        SHAPE,
        block_size=BS,
        max_bytes=blocks * BLOCK_BYTES,
        num_slots=max_active,
        max_seq=max_seq,
        prefix_reuse=prefix_reuse,
    )
    ex = PoolWritingExecutor(cache)
    return (
        engine_core(cache, ex, max_seq=max_seq, max_active=max_active, max_step_tokens=max_step_tokens),
        cache,
        ex,
    )


_ids = iter(range(1, 10**9))


def seq_of(prompt, max_new=4) -> Sequence:
    return Sequence(Request(next(_ids), tuple(prompt), GenerationConfig(max_new_tokens=max_new)))


def step(core: EngineCore) -> StepPlan | None:
    plan = core.step()
    core.check_integrity()
    return plan


def test_blocks_are_taken_step_by_step():
    core, cache, ex = make(max_step_tokens=4)
    a = seq_of(prompt_of(10, 1), max_new=3)
    core.add(a, Collected())
    tables = []
    while not a.finished:
        step(core)
        if not a.finished:
            tables.append(cache.table(a))
    # chunks of 4, 4, 2 tokens (the third samples), decode position 10; position 11 ends it
    assert tables == [[0], [0, 1], [0, 1, 2], [0, 1, 2]]
    assert a.completion_ids == alone(a.request.prompt_ids, 3)
    # Finished: full blocks 0 and 1 and the 4-token block 2 stay cached (tail first), nothing owned.
    assert cache.pool.eviction_order == [2, 1, 0] and cache.pool.num_owned == 0
    assert cache.nbytes == 16 * BLOCK_BYTES  # the pools grew once, to their first size


def test_a_running_prefix_is_shared_block_by_block():
    core, cache, ex = make()
    system = prompt_of(8, 2)
    a = seq_of(system + prompt_of(4, 3), max_new=6)
    core.add(a, Collected())
    step(core)
    assert cache.table(a) == [0, 1, 2]
    b = seq_of(system + prompt_of(5, 4), max_new=6)
    core.add(b, Collected())
    step(core)
    # a's decode row took block 3 for position 12 before b was admitted
    assert b.num_cached_tokens == 8 and cache.table(a) == [0, 1, 2, 3] and cache.table(b) == [0, 1, 4, 5]
    assert cache.pool.refcount[:6] == [2, 2, 1, 1, 1, 1]
    run_all(core)
    assert a.completion_ids == alone(a.request.prompt_ids, 6)
    assert b.completion_ids == alone(b.request.prompt_ids, 6)


def test_a_partly_shared_block_is_copied_before_it_is_written():
    core, cache, ex = make()
    a = seq_of(prompt_of(12, 5), max_new=8)
    core.add(a, Collected())
    step(core)
    held = cache.buffers()[0][0][:, 2].copy()
    b = seq_of(prompt_of(10, 5) + prompt_of(6, 6), max_new=8)  # diverges inside a's third block
    core.add(b, Collected())
    step(core)
    assert b.num_cached_tokens == 10
    assert cache.table(b)[:2] == [0, 1] and cache.table(b)[2] not in cache.table(a)
    np.testing.assert_array_equal(cache.buffers()[0][0][:, 2], held)  # a's block untouched
    run_all(core)
    assert a.completion_ids == alone(a.request.prompt_ids, 8)
    assert b.completion_ids == alone(b.request.prompt_ids, 8)


def test_a_chat_turn_continues_from_the_last_token_it_left():
    core, cache, ex = make()
    first = seq_of(prompt_of(9, 7), max_new=4)
    core.add(first, Collected())
    run_all(core)
    assert first.num_computed_tokens == 12  # the last sampled token is never computed
    turn = first.token_ids[:-1] + prompt_of(5, 8)
    second = seq_of(turn, max_new=4)
    core.add(second, Collected())
    plan = step(core)
    assert second.num_cached_tokens == 12 and plan.rows[0].start == 12
    assert cache.table(second)[:3] == [0, 1, 2]  # the full blocks shared, the 13th token's block copied
    run_all(core)
    assert second.completion_ids == alone(turn, 4)


def test_eviction_takes_free_blocks_first_then_the_least_recently_cached():
    core, cache, ex = make(blocks=6)
    a, b = seq_of(prompt_of(8, 9), max_new=1), seq_of(prompt_of(8, 10), max_new=1)
    for s in (a, b):
        core.add(s, Collected())
        run_all(core)
    assert cache.pool.eviction_order == [1, 0, 3, 2] and cache.pool.num_free == 2
    c = seq_of(prompt_of(15, 11), max_new=2)
    core.add(c, Collected())
    step(core)
    assert cache.table(c) == [4, 5, 1, 0]
    assert cache.pool.eviction_order == [3, 2] and cache.pool.num_evictions == 2
    run_all(core)
    assert c.completion_ids == alone(c.request.prompt_ids, 2)


def test_the_same_block_computed_twice_in_one_step_is_merged():
    core, cache, ex = make()
    prompt = prompt_of(9, 12)
    a, b = seq_of(prompt, max_new=2), seq_of(prompt, max_new=2)
    core.add(a, Collected())
    core.add(b, Collected())
    step(core)  # both admitted together: neither could reuse the other's blocks yet
    assert cache.table(a)[:2] == cache.table(b)[:2] == [0, 1] and cache.num_merged == 2
    assert cache.pool.refcount[:2] == [2, 2] and cache.pool.num_free == 16 - 4
    run_all(core)
    assert a.completion_ids == b.completion_ids == alone(prompt, 2)


def test_memory_pressure_preempts_the_last_admitted_and_it_recomputes():
    core, cache, ex = make(blocks=5, max_active=2)
    a, b = seq_of(prompt_of(4, 13), max_new=10), seq_of(prompt_of(4, 14), max_new=10)
    core.add(a, Collected())
    core.add(b, Collected())
    statuses = []
    while core.has_work:
        step(core)
        statuses.append(b.status)
    assert core.scheduler.num_preemptions >= 1 and SequenceStatus.WAITING in statuses[1:]
    assert a.completion_ids == alone(a.request.prompt_ids, 10)
    assert b.completion_ids == alone(b.request.prompt_ids, 10)
    assert cache.pool.num_owned == 0


def test_a_sequence_that_outgrows_the_whole_budget_ends_with_length():
    core, cache, ex = make(blocks=2, max_active=1)
    a = seq_of(prompt_of(4, 15), max_new=20)
    core.add(a, Collected())
    run_all(core)
    assert a.status == SequenceStatus.FINISHED_LENGTH and "KV cache budget (8 tokens)" in a.error
    assert a.num_computed_tokens == 8
    assert a.completion_ids == alone(a.request.prompt_ids, 5)


def test_admission_waits_until_the_whole_prompt_fits():
    core, cache, ex = make(blocks=4, max_active=2)
    a, b = seq_of(prompt_of(8, 16), max_new=3), seq_of(prompt_of(9, 17), max_new=2)
    core.add(a, Collected())
    core.add(b, Collected())
    step(core)
    assert a.status == SequenceStatus.RUNNING and b.status == SequenceStatus.WAITING
    run_all(core)
    assert b.completion_ids == alone(b.request.prompt_ids, 2) and core.scheduler.num_preemptions == 0


def test_prefix_reuse_off_shares_nothing():
    core, cache, ex = make(prefix_reuse=False)
    prompt = prompt_of(9, 18)
    core.add(seq_of(prompt, max_new=2), Collected())
    run_all(core)
    b = seq_of(prompt, max_new=2)
    core.add(b, Collected())
    step(core)
    assert b.num_cached_tokens == 0 and cache.pool.num_cached == 0 and len(cache.index) == 0


def test_integrity_check_catches_a_lost_reference():
    core, cache, ex = make()
    a = seq_of(prompt_of(6, 19))
    core.add(a, Collected())
    step(core)
    cache.pool.refcount[cache.table(a)[0]] += 1
    with pytest.raises(AssertionError, match="refcount 2 but 1 holders"):
        core.check_integrity()


def test_a_budget_below_one_block_is_refused():
    with pytest.raises(ValueError, match="holds no block"):
        PagedKVCache(SHAPE, block_size=BS, max_bytes=BLOCK_BYTES - 1, num_slots=1, max_seq=64)


@pytest.mark.parametrize(("blocks", "cached"), [(3, 5), (2, 4)])  # the last 2 are always computed
def test_a_partial_match_is_copied_when_it_fits_and_dropped_when_not(blocks, cached):
    core, cache, ex = make(blocks=blocks, max_active=1)
    first = seq_of(prompt_of(6, 20), max_new=1)  # leaves block 0 full and block 1 partial, both cached
    core.add(first, Collected())
    run_all(core)
    assert cache.pool.eviction_order == [1, 0]
    follow = seq_of(prompt_of(6, 20) + prompt_of(1, 21), max_new=1)
    core.add(follow, Collected())
    # With 2 blocks the copy would need a third: the request computes 2 more tokens instead of waiting forever.
    run_all(core)
    assert follow.num_cached_tokens == cached
    assert follow.completion_ids == alone(follow.request.prompt_ids, 1)


@pytest.mark.parametrize("seed", range(6))
def test_random_load_on_tight_budgets_always_finishes_with_the_alone_replies(seed):
    rng = np.random.default_rng(seed)
    blocks = int(rng.integers(3, 12))
    core, cache, ex = make(
        blocks=blocks, max_active=int(rng.integers(1, 6)), max_step_tokens=int(rng.integers(2, 20))
    )
    prefixes = [prompt_of(int(n), 30 + i) for i, n in enumerate(rng.integers(0, 3 * BS, 4))]
    seqs = []
    for i in range(60):
        prefix = prefixes[int(rng.integers(len(prefixes)))]
        prompt = (prefix + prompt_of(int(rng.integers(1, 9)), 100 + i))[: blocks * BS - 1]
        seqs.append(seq_of(prompt, max_new=int(rng.integers(1, 6 * BS))))
    for seq in seqs:
        core.add(seq, Collected())
    run_all(core)
    for seq in seqs:
        expected = alone(seq.request.prompt_ids, seq.config.max_new_tokens)
        if seq.status == SequenceStatus.FINISHED_LENGTH and seq.error:  # outgrew the whole budget
            expected = expected[: seq.num_completion_tokens]
        assert seq.completion_ids == expected
    assert cache.pool.num_owned == 0
