"""Differential checks on the real SmolLM2-135M-Instruct (exported once, cached).

Batching, chunking, cancellation and seeds must not change a reply: each check
compares the engine's output under one of them with the same request run
alone. The engines share one loaded model (one ORT session).
"""

from __future__ import annotations

import pytest

from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(smollm2_fp32):
    model = modelverse.load(smollm2_fp32, threads=1)
    yield model
    model.close()


def greedy(engine, prompt_ids, n=16, **config):
    stream = engine.submit(prompt_ids, GenerationConfig(max_new_tokens=n, **config))
    return [t for d in stream for t in d.token_ids]


def chat_ids(model, text):
    return model.tokenizer.encode(model.render([{"role": "user", "content": text}]))


def test_batch_of_16_equals_each_alone(smollm2, chat_prompts):
    alone_engine = smollm2.create_engine(max_active=1)
    ids = [chat_ids(smollm2, p) for p in chat_prompts]
    assert len({len(i) for i in ids}) > 8  # prompts of many lengths
    alone = [greedy(alone_engine, p) for p in ids]
    alone_engine.close()
    replies = smollm2.generate_batch(chat_prompts, max_new_tokens=16)
    assert replies == [smollm2.tokenizer.decode(a) for a in alone]
    assert [r.completion_tokens for r in smollm2.reports] == [len(a) for a in alone]
    assert "Paris" in replies[1]


def test_chunked_prefill_equals_one_shot(smollm2, chat_prompts):
    text = " ".join(chat_prompts) * 2
    prompt = chat_ids(smollm2, "Read this and answer the second question: " + text)
    assert len(prompt) > 300
    outputs = []
    for step_tokens in (32, 512):
        engine = smollm2.create_engine(max_active=1, max_step_tokens=step_tokens)
        outputs.append(greedy(engine, prompt, n=12))
        engine.close()
    assert outputs[0] == outputs[1]


def test_cancelled_request_frees_its_slot_and_others_are_unchanged(smollm2, chat_prompts):
    engine = smollm2.create_engine(max_active=2)
    ids = [chat_ids(smollm2, p) for p in chat_prompts[:3]]
    expected = [greedy(engine, p, n=64, ignore_eos=True) for p in ids[1:]]
    streams = [engine.submit(p, GenerationConfig(max_new_tokens=64, ignore_eos=True)) for p in ids]
    first = iter(streams[0])
    next(first)
    next(first)
    first.close()  # closing the stream cancels the request
    got = [[t for d in s for t in d.token_ids] for s in streams[1:]]
    assert got == expected
    assert streams[0].report.finish_reason == "cancelled"
    assert engine.cache.num_free == engine.cache.num_rows
    engine.check_integrity()
    engine.close()


def test_seeded_sample_is_the_same_alone_and_in_a_batch(smollm2, chat_prompts):
    sampled = dict(max_new_tokens=20, temperature=0.9, top_p=0.95, top_k=50, seed=7)
    alone = smollm2.generate(chat_prompts[2], **sampled)
    again = smollm2.generate(chat_prompts[2], **sampled)
    assert alone == again
    replies = smollm2.generate_batch([chat_prompts[0], chat_prompts[2], chat_prompts[5]], **sampled)
    assert replies[1] == alone
    assert smollm2.generate(chat_prompts[2], **{**sampled, "seed": 8}) != alone
