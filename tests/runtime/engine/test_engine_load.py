"""The engine's load snapshot: one immutable value, published after every step and command."""

from __future__ import annotations

import dataclasses

import pytest
from engine_fakes import VOCAB, CacheWritingExecutor, alone, prompt_of

from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.core import EngineCore
from clika_runtime.engine.engine import Engine, EngineLoad
from clika_runtime.engine.kv.continuous_cache import ContinuousKVCache
from clika_runtime.engine.kv.kv_cache import CacheShape
from clika_runtime.engine.options import EngineOptions


@pytest.fixture
def engine():
    cache = ContinuousKVCache(CacheShape(1, 1, 1), num_slots=2, max_seq=256)
    options = EngineOptions(max_active=2, max_queued=8, max_step_tokens=64)
    engine = Engine(
        EngineCore(CacheWritingExecutor(cache), cache, None, max_seq=256, vocab_size=VOCAB, options=options)
    )
    yield engine
    engine.close()


def test_a_new_engine_publishes_an_idle_load(engine):
    load = engine.load
    assert (load.running, load.waiting, load.steps, load.step_tokens) == (0, 0, 0, 0)
    assert load.free_slots == 2 and load.kv_slots_used == 0 and load.tokens_per_step == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        load.running = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        load.kv["slots"] = 9  # type: ignore[index]


def test_the_load_after_replies_counts_their_steps_and_tokens(engine):
    prompts = [prompt_of(12, salt) for salt in range(3)]
    streams = [
        engine.submit(prompt, GenerationConfig(max_new_tokens=4), detokenize=False) for prompt in prompts
    ]
    replies = [[t for delta in stream for t in delta.token_ids] for stream in streams]
    assert replies == [alone(prompt, 4) for prompt in prompts]
    engine.check_integrity()  # a command: the engine publishes its load once it ran
    load = engine.load
    stats = engine.stats
    assert isinstance(load, EngineLoad)
    assert (load.running, load.waiting) == (0, 0)
    assert (load.steps, load.step_tokens) == (stats.steps, stats.tokens) and load.steps > 0
    assert load.step_seconds == pytest.approx(stats.model_s + stats.host_s)
    assert load.tokens_per_step == pytest.approx(stats.tokens / stats.steps)
    assert load.kv["slots"] == 2 and load.kv_slots_free == 2 and load.kv["kv_cache_bytes"] > 0
