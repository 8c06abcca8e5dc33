"""Differential checks on the real SmolLM2-135M-Instruct (exported once, cached).

Batching, chunking, cancellation and seeds must not change a reply: each check
compares the engine's output under one of them with the same request run
alone. The engines share one loaded model (one ORT session).
"""

from __future__ import annotations

import statistics

import pytest

from clika_export.api import cached_export
from clika_runtime import modelverse
from clika_runtime.engine.types import GenerationConfig, StageEvent

pytestmark = pytest.mark.slow

PRECISION = "fp32"
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
def smollm2(smollm2_gguf):
    folder = cached_export(smollm2_gguf, PRECISION, progress=False)
    model = modelverse.load(folder, threads=1)
    yield model
    model.close()


def greedy(engine, prompt_ids, n=16, **config):
    stream = engine.submit(prompt_ids, GenerationConfig(max_new_tokens=n, **config))
    return [t for d in stream for t in d.token_ids]


def chat_ids(model, text):
    return model.tokenizer.encode(model.render([{"role": "user", "content": text}]))


def test_batch_of_16_equals_each_alone(smollm2):
    alone_engine = smollm2.create_engine(max_active=1)
    ids = [chat_ids(smollm2, p) for p in PROMPTS]
    assert len({len(i) for i in ids}) > 8  # prompts of many lengths
    alone = [greedy(alone_engine, p) for p in ids]
    alone_engine.close()
    replies = smollm2.generate_batch(PROMPTS, max_new_tokens=16)
    assert replies == [smollm2.tokenizer.decode(a) for a in alone]
    assert [r.completion_tokens for r in smollm2.reports] == [len(a) for a in alone]
    assert "Paris" in replies[1]


def test_chunked_prefill_equals_one_shot(smollm2):
    text = " ".join(PROMPTS) * 2
    prompt = chat_ids(smollm2, "Read this and answer the second question: " + text)
    assert len(prompt) > 300
    outputs = []
    for step_tokens in (32, 512):
        engine = smollm2.create_engine(max_active=1, max_step_tokens=step_tokens)
        outputs.append(greedy(engine, prompt, n=12))
        engine.close()
    assert outputs[0] == outputs[1]


def test_cancelled_request_frees_its_slot_and_others_are_unchanged(smollm2):
    engine = smollm2.create_engine(max_active=2)
    ids = [chat_ids(smollm2, p) for p in PROMPTS[:3]]
    expected = [greedy(engine, p, n=24, ignore_eos=True) for p in ids[1:]]
    streams = [engine.submit(p, GenerationConfig(max_new_tokens=24, ignore_eos=True)) for p in ids]
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


def test_seeded_sample_is_the_same_alone_and_in_a_batch(smollm2):
    sampled = dict(max_new_tokens=20, temperature=0.9, top_p=0.95, top_k=50, seed=7)
    alone = smollm2.generate(PROMPTS[2], **sampled)
    again = smollm2.generate(PROMPTS[2], **sampled)
    assert alone == again
    replies = smollm2.generate_batch([PROMPTS[0], PROMPTS[2], PROMPTS[5]], **sampled)
    assert replies[1] == alone
    assert smollm2.generate(PROMPTS[2], **{**sampled, "seed": 8}) != alone


def test_python_time_stays_under_a_tenth_of_a_decode_step(smollm2):
    events: list[StageEvent] = []
    engine = smollm2.create_engine(max_active=4, observer=events.append)
    streams = [engine.submit(chat_ids(smollm2, p), GenerationConfig(max_new_tokens=24)) for p in PROMPTS[:4]]
    for s in streams:
        s.result()
    engine.close()
    decode_steps = [e for e in events if e.stage == "step" and e.tokens <= 4]
    assert len(decode_steps) > 10
    host = statistics.median(e.detail["host_s"] for e in decode_steps)
    step = statistics.median(e.seconds for e in decode_steps)
    assert host < 0.1 * step, f"Python took {host * 1e3:.2f} ms of a {step * 1e3:.1f} ms decode step"
