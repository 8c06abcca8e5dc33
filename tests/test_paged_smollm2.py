"""Differential checks of the paged KV mode on the real SmolLM2-135M-Instruct (fp32, exported once, cached).

Paged attention must not change a greedy reply: 16 chat prompts decoded 8 at
a time by a paged engine equal the continuous engine's replies; and a chat's
next turn computed on its cached prefix equals the same prompt from scratch.
"""

from __future__ import annotations

import pytest

from clika_export.api import cached_export
from clika_runtime import modelverse
from clika_runtime.engine.types import GenerationConfig

pytestmark = pytest.mark.slow

PROMPTS = [
    "Hi!",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "Explain photosynthesis in one sentence.",
    "What is 12 times 7?",
    "Translate 'good morning' into Spanish.",
    "Name a famous physicist and one of their discoveries, and say why it mattered for science.",
    "Why is the sky blue?",
    "Give me a short tip for learning to code.",
    "What does a cat say?",
    "Describe the taste of a lemon to someone who has never had one, using at least two comparisons.",
    "Count from one to five.",
    "What is the boiling point of water at sea level in Celsius?",
    "Suggest a name for a small bakery.",
    "Summarize the plot of Romeo and Juliet in two sentences, then say which character you find most tragic.",
]


@pytest.fixture(scope="module")
def folder(smollm2_gguf):
    return cached_export(smollm2_gguf, "fp32", progress=False)


def chat_ids(model, messages) -> list[int]:
    return model.tokenizer.encode(model.render(messages))


def replies(engine, prompts, n=16) -> list[list[int]]:
    streams = [engine.submit(p, GenerationConfig(max_new_tokens=n)) for p in prompts]
    return [[t for d in s for t in d.token_ids] for s in streams]


def test_paged_greedy_equals_continuous_at_batch_8(folder):
    continuous = modelverse.load(folder, threads=1, max_active=8)
    paged = modelverse.load(folder, threads=1, kv_cache_mode="paged", max_active=8)
    try:
        ids = [chat_ids(continuous, [{"role": "user", "content": p}]) for p in PROMPTS]
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
def test_a_turn_on_a_cached_prefix_equals_it_from_scratch(folder, mode):
    model = modelverse.load(folder, threads=1, kv_cache_mode=mode)
    scratch = modelverse.load(folder, threads=1, kv_cache_mode=mode, prefix_reuse=False)
    try:
        messages = [
            {"role": "system", "content": "You are a concise assistant. " * 8},
            {"role": "user", "content": PROMPTS[11]},
        ]
        first = replies(model.engine, [chat_ids(model, messages)], n=24)[0]
        messages += [
            {"role": "assistant", "content": model.tokenizer.decode(first, skip_special_tokens=True)},
            {"role": "user", "content": PROMPTS[9]},
        ]
        turn = chat_ids(model, messages)
        stream = model.engine.submit(turn, GenerationConfig(max_new_tokens=24))
        got = [t for d in stream for t in d.token_ids]
        assert stream.report.cached_tokens > 100
        assert got == replies(scratch.engine, [turn], n=24)[0]
    finally:
        model.close()
        scratch.close()
