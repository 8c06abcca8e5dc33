"""Differential checks of the paged KV mode on the real SmolLM2-135M-Instruct (fp32, exported once, cached).

Paged attention must not change a greedy reply: 16 chat prompts decoded 8 at
a time by a paged engine equal the continuous engine's replies; and a chat's
next turn computed on its cached prefix equals the same prompt from scratch.
"""

from __future__ import annotations

import pytest

from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig

pytestmark = pytest.mark.slow


def chat_ids(model, messages) -> list[int]:
    return model.tokenizer.encode(model.render(messages))


def replies(engine, prompts, n=16) -> list[list[int]]:
    streams = [engine.submit(p, GenerationConfig(max_new_tokens=n)) for p in prompts]
    return [[t for d in s for t in d.token_ids] for s in streams]


def test_paged_greedy_equals_continuous_at_batch_8(smollm2_fp32, chat_prompts):
    continuous = modelverse.load(smollm2_fp32, threads=1, max_active=8)
    paged = modelverse.load(smollm2_fp32, threads=1, kv_cache_mode="paged", max_active=8)
    try:
        ids = [chat_ids(continuous, [{"role": "user", "content": p}]) for p in chat_prompts]
        expected = replies(continuous.engine, ids)
        got = replies(paged.engine, ids)
        assert got == expected
        assert "Paris" in paged.tokenizer.decode(got[1])
        paged.engine.check_integrity()
        assert paged.engine.cache.pool.num_owned == 0
    finally:
        continuous.close()
        paged.close()


@pytest.mark.parametrize("mode", ["paged", "continuous"])
def test_a_turn_on_a_cached_prefix_equals_it_from_scratch(smollm2_fp32, chat_prompts, mode):
    model = modelverse.load(smollm2_fp32, threads=1, kv_cache_mode=mode)
    scratch = modelverse.load(smollm2_fp32, threads=1, kv_cache_mode=mode, prefix_reuse=False)
    try:
        messages = [
            {"role": "system", "content": "You are a concise assistant. " * 8},
            {"role": "user", "content": chat_prompts[11]},
        ]
        first = replies(model.engine, [chat_ids(model, messages)], n=24)[0]
        messages += [
            {"role": "assistant", "content": model.tokenizer.decode(first, skip_special_tokens=True)},
            {"role": "user", "content": chat_prompts[9]},
        ]
        turn = chat_ids(model, messages)
        stream = model.engine.submit(turn, GenerationConfig(max_new_tokens=24))
        got = [t for d in stream for t in d.token_ids]
        assert stream.report.cached_tokens > 100
        assert got == replies(scratch.engine, [turn], n=24)[0]
    finally:
        model.close()
        scratch.close()
