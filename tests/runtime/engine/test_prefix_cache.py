"""Prefix reuse in both KV modes: copied slot prefixes, and chat turns reused up to the first new token.

The continuous-mode checks step the engine core over a cache-writing executor
(tests/engine_fakes.py, as tests/runtime/engine/test_scheduler.py uses); the chat checks run a
tiny random llama through the real graphs and compare each reply with the same prompt computed
from scratch (prefix reuse off).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from engine_fakes import CacheWritingExecutor, Collected, alone, engine_core, prompt_of, run_all

from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.kv.continuous_cache import ContinuousKVCache
from clika_runtime.engine.kv.kv_cache import CacheShape
from clika_runtime.engine.sequence import Request, Sequence

_ids = iter(range(1, 10**9))


def seq_of(prompt, max_new=6) -> Sequence:
    return Sequence(Request(next(_ids), tuple(prompt), GenerationConfig(max_new_tokens=max_new)))


def test_continuous_copies_a_running_slots_prefix_into_a_new_slot():
    cache = ContinuousKVCache(CacheShape(1, 1, 1), num_slots=3, max_seq=256)
    ex = CacheWritingExecutor(cache)
    core = engine_core(cache, ex, max_seq=256, max_active=3, max_step_tokens=64)
    system = prompt_of(30, 1)
    a = seq_of(system + prompt_of(5, 2), max_new=20)
    core.add(a, Collected())
    core.step()
    b = seq_of(system + prompt_of(7, 3), max_new=6)
    core.add(b, Collected())
    plan = core.step()
    assert b.slot != a.slot and b.num_cached_tokens == 30
    assert [r.start for r in plan.rows if r.seq is b] == [30]
    keys = cache.buffers()[0][0]
    np.testing.assert_array_equal(keys[b.slot, 0, :30, 0], system)
    run_all(core)
    assert a.completion_ids == alone(a.request.prompt_ids, 20)
    assert b.completion_ids == alone(b.request.prompt_ids, 6)


# -- chat turns on the real graphs ------------------------------------------------------

CONTEXT = 512


@pytest.fixture(scope="module")
def tiny(make_tiny_hf, tiny_zoo) -> Path:
    _, hf = tiny_zoo.checkpoint(make_tiny_hf, "llama", layers=2, max_position_embeddings=CONTEXT)
    return tiny_zoo.export(hf)


def reply(engine, prompt, n=8) -> tuple[list[int], object]:
    stream = engine.submit(prompt, GenerationConfig(max_new_tokens=n, ignore_eos=True))
    return [t for d in stream for t in d.token_ids], stream.report


@pytest.mark.parametrize("mode", ["continuous", "paged"])
def test_a_new_turn_reuses_everything_before_its_first_new_token(tiny: Path, mode: str):
    rng = np.random.default_rng(0)
    history = rng.integers(0, 256, 150).tolist()
    model = modelverse.load(tiny, threads=1, kv_cache_mode=mode, max_active=2)
    scratch = modelverse.load(tiny, threads=1, kv_cache_mode=mode, prefix_reuse=False)
    try:
        engine = model.engine
        first, _ = reply(engine, history)
        # The next turn: the whole first exchange (the last sampled token was never computed) and more.
        turn = history + first + rng.integers(0, 256, 30).tolist()
        ids, report = reply(engine, turn)
        assert report.cached_tokens == len(history) + len(first) - 1
        assert ids == reply(scratch.engine, turn)[0]
        # A template that rewrites an earlier turn: reuse stops at the first rewritten token.
        rewritten = history[:97] + [(history[97] + 1) % 256] + history[98:] + rng.integers(0, 256, 5).tolist()
        ids, report = reply(engine, rewritten)
        assert report.cached_tokens == 97
        assert ids == reply(scratch.engine, rewritten)[0]
        engine.check_integrity()
    finally:
        model.close()
        scratch.close()


def test_paged_concurrent_requests_share_a_system_prompt(tiny: Path):
    rng = np.random.default_rng(1)
    system = rng.integers(0, 256, 200).tolist()
    prompts = [system + rng.integers(0, 256, 10).tolist() for _ in range(6)]
    model = modelverse.load(tiny, threads=1, kv_cache_mode="paged", max_active=6, max_step_tokens=64)
    scratch = modelverse.load(tiny, threads=1, kv_cache_mode="paged", prefix_reuse=False, max_active=6)
    try:
        engine = model.engine
        streams = [engine.submit(p, GenerationConfig(max_new_tokens=6, ignore_eos=True)) for p in prompts]
        got = [[t for d in s for t in d.token_ids] for s in streams]
        assert got == [reply(scratch.engine, p, 6)[0] for p in prompts]
        cached = [s.report.cached_tokens for s in streams]
        assert cached[0] == 0 and all(c >= 192 for c in cached[1:])  # three full blocks of 64 shared
        engine.check_integrity()
        assert engine.cache.pool.num_owned == 0
    finally:
        model.close()
        scratch.close()
