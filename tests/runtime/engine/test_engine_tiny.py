"""The engine and the public API on a tiny random llama, exported and run through the real graph.

Greedy replies are checked against transformers (a plain greedy loop over the
same checkpoint); batching, chunking, queueing, cancellation and seeds are
checked against the same request run alone.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from pacing import paced_steps
from support.lazy import torch

from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.errors import EngineClosedError, QueueFullError
from clika_runtime.engine.stages import StageEvent

CONTEXT = 512


@pytest.fixture(scope="module")
def tiny(make_tiny_hf, tiny_zoo) -> tuple[torch.nn.Module, Path]:
    reference, hf = tiny_zoo.checkpoint(make_tiny_hf, "llama", layers=2, max_position_embeddings=CONTEXT)
    return reference, tiny_zoo.export(hf)


@pytest.fixture(scope="module")
def model(tiny):
    loaded = modelverse.load(tiny[1], threads=1)
    yield loaded
    loaded.close()


def reference_greedy(reference: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = reference(torch.tensor([tokens])).logits[0, -1]
            tokens.append(int(torch.argmax(logits)))
    return tokens[len(prompt) :]


def prompts_of(lengths, seed=0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=n).tolist() for n in lengths]


def run(engine, prompt, **config) -> tuple[list[int], object]:
    stream = engine.submit(prompt, GenerationConfig(**config))
    ids = [t for delta in stream for t in delta.token_ids]
    return ids, stream.report


def test_greedy_reply_matches_transformers(tiny, model):
    reference, _ = tiny
    engine = model.engine
    for prompt in prompts_of([1, 7, 40]):
        ids, report = run(engine, prompt, max_new_tokens=12, ignore_eos=True)
        assert ids == reference_greedy(reference, prompt, 12)
        assert report.finish_reason == "length" and report.completion_tokens == 12


def test_batch_with_chunks_and_queueing_equals_each_alone(tiny):
    prompts = prompts_of([3, 50, 1, 17, 90, 9, 33, 5], seed=1)
    alone_model = modelverse.load(tiny[1], threads=1)
    alone = [run(alone_model.engine, p, max_new_tokens=10, ignore_eos=True)[0] for p in prompts]
    alone_model.close()
    batched = modelverse.load(tiny[1], threads=1, max_active=3, max_step_tokens=16)
    engine = batched.engine
    streams = [engine.submit(p, GenerationConfig(max_new_tokens=10, ignore_eos=True)) for p in prompts]
    got = [[t for d in s for t in d.token_ids] for s in streams]
    assert got == alone
    assert engine.stats.steps > 10
    engine.check_integrity()
    batched.close()


def test_chunked_prefill_equals_one_shot(tiny):
    prompt = prompts_of([200], seed=2)[0]
    outputs = []
    for step_tokens in (7, 256):
        m = modelverse.load(tiny[1], threads=1, max_step_tokens=step_tokens)
        outputs.append(run(m.engine, prompt, max_new_tokens=8, ignore_eos=True)[0])
        m.close()
    assert outputs[0] == outputs[1]


def test_cancel_frees_the_slot_and_leaves_the_others_unchanged(tiny):
    prompts = prompts_of([10, 12, 14], seed=3)
    m = modelverse.load(tiny[1], threads=1, max_active=2)
    engine = m.engine
    expected = [run(engine, p, max_new_tokens=40, ignore_eos=True)[0] for p in prompts]
    with paced_steps(m):  # so the cancel lands mid-request however fast the machine
        streams = [engine.submit(p, GenerationConfig(max_new_tokens=40, ignore_eos=True)) for p in prompts]
        first = iter(streams[0])
        for _ in range(3):
            next(first)
        streams[0].cancel()
    got = [[t for d in s for t in d.token_ids] for s in streams[1:]]
    assert got == expected[1:]
    report = streams[0].report
    assert report.finish_reason == "cancelled" and report.completion_tokens < 40
    # Cancelling a text stream by name cancels too, and the engine stays clean.
    with paced_steps(m):
        pieces = m.stream_generate("a fairly long prompt", max_new_tokens=200, ignore_eos=True)
        next(pieces)
        pieces.cancel()
    assert m.report.finish_reason == "cancelled" and m.report.completion_tokens < 200
    # A stream cancelled before it was read is cancelled too.
    m.stream_generate("never read", max_new_tokens=400, ignore_eos=True).cancel()
    assert run(engine, prompts[0], max_new_tokens=5, ignore_eos=True)[0] == expected[0][:5]
    assert not engine.scheduler.has_work
    engine.check_integrity()
    assert engine.cache.num_free == engine.cache.num_rows
    m.close()


def test_full_queue_refuses_only_the_new_request(tiny):
    m = modelverse.load(tiny[1], threads=1, max_active=1, max_queued=1)
    engine = m.engine
    long = engine.submit([1, 2, 3], GenerationConfig(max_new_tokens=300, ignore_eos=True))
    queued = engine.submit([4, 5, 6], GenerationConfig(max_new_tokens=3, ignore_eos=True))
    with pytest.raises(QueueFullError, match="queue is full"):
        engine.submit([7, 8], GenerationConfig(max_new_tokens=3))
    assert not long.finished  # the refusal disturbed nothing
    long.cancel()
    queued.result()
    assert queued.report.finish_reason == "length" and queued.report.completion_tokens == 3
    assert long.report.finish_reason == "cancelled"
    m.close()


def test_bad_requests_are_refused_clearly(model):
    with pytest.raises(ValueError, match="context window is 512"):
        model.engine.submit([1] * CONTEXT, GenerationConfig())
    with pytest.raises(ValueError, match="empty"):
        model.engine.submit([], GenerationConfig())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.engine.submit([1, 10**6], GenerationConfig())
    with pytest.raises(ValueError, match="temperature"):
        model.generate("hi", temperature=-1)
    with pytest.raises(ValueError, match="'max_tokens'"):
        model.generate("hi", max_tokens=5)
    with pytest.raises(ValueError, match="exactly one"):
        model.generate()
    with pytest.raises(ValueError, match="images"):
        model.generate("hi", images=[np.zeros((2, 2, 3))])
    with pytest.raises(ValueError, match="kv_cache_bytes must be an integer >= 1"):
        modelverse.load(model.local_dir, kv_cache_mode="paged", kv_cache_bytes=0)
    with pytest.raises(ValueError, match="kv_cache_mode"):
        modelverse.load(model.local_dir, kv_cache_mode="blocks")


def test_stop_token_ids_and_stop_strings_end_the_reply(tiny, model):
    prompt = prompts_of([6], seed=4)[0]
    full, _ = run(model.engine, prompt, max_new_tokens=20, ignore_eos=True)
    stop_id = full[5]
    ids, report = run(model.engine, prompt, max_new_tokens=20, ignore_eos=True, stop_token_ids=(stop_id,))
    assert ids == full[: full.index(stop_id) + 1] and report.finish_reason == "stop"
    # A stop string: a printable run of the full reply's text.
    text = model.tokenizer.decode(full)
    start = next(
        i
        for i in range(4, len(text) - 2)
        if text[i : i + 2].isprintable() and "\ufffd" not in text[i : i + 2]
    )
    stop = text[start : start + 2]
    stream = model.engine.submit(prompt, GenerationConfig(max_new_tokens=20, ignore_eos=True, stop=(stop,)))
    shown = stream.result()
    assert shown == text[: text.index(stop)]
    assert stream.report.finish_reason == "stop" and stream.report.stop_string == stop


def test_seed_gives_the_same_sample_alone_and_in_a_batch(tiny):
    m = modelverse.load(tiny[1], threads=1, max_active=4)
    engine = m.engine
    prompt = prompts_of([8], seed=5)[0]
    sampled = dict(max_new_tokens=24, ignore_eos=True, temperature=1.0, top_p=0.95, seed=42)
    alone, _ = run(engine, prompt, **sampled)
    others = [
        engine.submit(p, GenerationConfig(max_new_tokens=30, ignore_eos=True, temperature=0.9, seed=i))
        for i, p in enumerate(prompts_of([5, 30, 2], seed=6))
    ]
    mine = engine.submit(prompt, GenerationConfig(**sampled))
    assert [t for d in mine for t in d.token_ids] == alone
    for s in others:
        s.result()
    other_seed, _ = run(engine, prompt, **{**sampled, "seed": 43})
    assert other_seed != alone
    m.close()


def test_threads_submitting_at_once(tiny):
    m = modelverse.load(tiny[1], threads=1, max_active=4)
    prompts = prompts_of([4, 9, 15, 2, 6, 11], seed=7)
    expected = [run(m.engine, p, max_new_tokens=8, ignore_eos=True)[0] for p in prompts]
    got: dict[int, list[int]] = {}

    def worker(i: int) -> None:
        got[i] = run(m.engine, prompts[i], max_new_tokens=8, ignore_eos=True)[0]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(prompts))] == expected
    m.close()


def test_public_api_generate_stream_batch_and_reports(model):
    text = model.generate("hello", max_new_tokens=6, ignore_eos=True)
    report = model.report
    assert report.completion_tokens == 6 and report.finish_reason == "length"
    assert report.time_to_first_token_s > 0 and report.decode_tokens_per_s > 0
    pieces = list(model.stream_generate("hello", max_new_tokens=6, ignore_eos=True))
    assert "".join(pieces) == text
    ids = [
        t
        for batch in model.stream_generate("hello", max_new_tokens=6, ignore_eos=True, decode=False)
        for t in batch
    ]
    assert len(ids) == 6 and model.tokenizer.decode(ids) == text
    replies = model.generate(["hello", "a different prompt", "x"], max_new_tokens=5, ignore_eos=True)
    assert replies[0] == model.generate("hello", max_new_tokens=5, ignore_eos=True)
    assert [r.completion_tokens for r in model.reports] == [5, 5, 5]
    assert [r.text for r in model.reports] == replies
    capped = model.generate_batch(
        ["hello", "a different prompt", "x"], max_active=1, max_new_tokens=5, ignore_eos=True
    )
    assert capped == replies
    with pytest.raises(ValueError, match="max_active"):
        model.generate_batch(["x"], max_active=0)
    assert model.generate_batch([]) == [] and model.reports == []
    assert model.residency["pipeline"]["kv_cache_bytes"] > 0


def test_chat_template_render_and_messages(model):
    messages = [{"role": "user", "content": "hi"}]
    assert model.has_chat_template
    assert model.render(messages) == model.conversation_text(messages) == "<s>user: hi</s>\n"
    by_messages = model.generate(messages=messages, max_new_tokens=4, ignore_eos=True)
    by_prompt = model.generate("hi", max_new_tokens=4, ignore_eos=True)
    assert by_messages == by_prompt
    reply = model.chat(messages, max_new_tokens=4, ignore_eos=True)
    assert reply == by_prompt and model.report.finish == "length" and model.report.text == reply


def test_next_turn_reuses_the_cached_prefix(tiny):
    m = modelverse.load(tiny[1], threads=1)
    fresh = modelverse.load(tiny[1], threads=1, prefix_reuse=False)
    turn = [{"role": "user", "content": "first question"}]
    first = m.chat(turn, max_new_tokens=8, ignore_eos=True)
    turn += [{"role": "assistant", "content": first}, {"role": "user", "content": "second"}]
    second = m.chat(turn, max_new_tokens=8, ignore_eos=True)
    assert m.report.cached_tokens > 10
    assert second == fresh.chat(turn, max_new_tokens=8, ignore_eos=True) and fresh.report.cached_tokens == 0
    m.close()
    fresh.close()


@pytest.fixture(scope="module")
def flat_tiny(tiny, make_flat_grid_folder, tmp_path_factory) -> Path:
    """The tiny folder with its graph in the flat grid layout of older exports."""
    return make_flat_grid_folder(tiny[1], tmp_path_factory.mktemp("engine-tiny-flat") / "model")


def test_a_folder_of_the_flat_grid_layout_runs_the_same(tiny, flat_tiny):
    """Folders exported before token_cell: the executor feeds grid_index flat and token_index."""
    reference, folder = tiny
    prompts = prompts_of([3, 50, 1, 17, 90, 9], seed=4)
    replies = []
    for path in (folder, flat_tiny):
        m = modelverse.load(path, threads=1, max_active=3, max_step_tokens=16)
        names = {i.name for i in m.engine.executor.session.get_inputs()}
        assert ("token_index" in names) == (path == flat_tiny) and ("token_cell" in names) != (
            path == flat_tiny
        )
        config = GenerationConfig(max_new_tokens=10, ignore_eos=True)
        streams = [m.engine.submit(p, config) for p in prompts]  # chunks, decode rows, idle slots
        replies.append([[t for d in s for t in d.token_ids] for s in streams])
        replies.append(
            [run(m.engine, prompts[1], max_new_tokens=12, ignore_eos=True)[0]]
        )  # decode path alone
        m.engine.check_integrity()
        m.close()
    assert replies[2] == replies[0] and replies[3] == replies[1]
    assert replies[1][0] == reference_greedy(reference, prompts[1], 12)


@pytest.mark.parametrize("layout", ["cells", "flat"])
def test_decode_steps_bind_no_input_again(tiny, flat_tiny, layout):
    """Past the first decode step, a step copies into the arrays bound before and binds nothing."""
    loaded = modelverse.load(tiny[1] if layout == "cells" else flat_tiny, threads=1)
    engine = loaded.create_engine(max_active=1, prefix_reuse=False)
    binding = engine.executor.binding
    bound: list[str] = []
    original = binding.bind_ortvalue_input

    def spy(name, value):
        bound.append(name)
        original(name, value)

    binding.bind_ortvalue_input = spy
    try:
        counts = []
        for prompt, n in zip(prompts_of([6, 6, 6], seed=3), (2, 12, 2), strict=True):
            bound.clear()
            run(engine, prompt, max_new_tokens=n, ignore_eos=True)
            counts.append(len(bound))
        # Each later request rebinds only what changes shape between its prefill and its decode.
        assert counts[1] == counts[2] < counts[0]
    finally:
        engine.close()
        loaded.close()


def test_stage_observer_sees_every_stage(tiny):
    m = modelverse.load(tiny[1], threads=1)
    events: list[StageEvent] = []
    m.set_stage_observer(events.append)
    text = m.generate("observe me", max_new_tokens=5, ignore_eos=True)
    stages = [e.stage for e in events if e.request_id is not None]
    assert stages == ["tokenize", "prefill", "decode", "detokenize"]
    by_stage = {e.stage: e for e in events if e.request_id is not None}
    assert by_stage["detokenize"].text == text and by_stage["decode"].tokens == 5
    steps = [e for e in events if e.stage == "step"]
    assert len(steps) == 5 and all(e.detail["model_s"] > 0 for e in steps)
    m.close()


def test_checkpoint_defaults_and_overrides(model):
    assert model.defaults == GenerationConfig()
    assert model.max_seq == CONTEXT and model.vocab_size == 259 and model.eos_token_ids == (257,)
    model.generate("hi", config={"max_new_tokens": 3}, ignore_eos=True)
    assert model.report.completion_tokens == 3
    model.generate("hi", config=GenerationConfig(max_new_tokens=2, ignore_eos=True))
    assert model.report.completion_tokens == 2


def test_a_failed_step_ends_its_requests_and_the_engine_goes_on(tiny):
    m = modelverse.load(tiny[1], threads=1)
    engine = m.engine
    expected = run(engine, [5, 6, 7], max_new_tokens=4, ignore_eos=True)[0]
    real_run = engine.executor.run
    failures = iter([RuntimeError("injected fault")])

    def failing_once(plan, before_call=None):
        fault = next(failures, None)
        if fault is not None:
            raise fault
        return real_run(plan, before_call)

    engine.executor.run = failing_once
    ids, report = run(engine, [1, 2, 3], max_new_tokens=4)
    assert ids == [] and report.finish_reason == "error" and "injected fault" in report.error
    assert run(engine, [5, 6, 7], max_new_tokens=4, ignore_eos=True)[0] == expected
    engine.check_integrity()
    m.close()


def test_closing_the_engine_cancels_what_runs_and_refuses_more(tiny):
    m = modelverse.load(tiny[1], threads=1, max_active=1)
    engine = m.engine
    running = engine.submit([1, 2, 3], GenerationConfig(max_new_tokens=400, ignore_eos=True))
    waiting = engine.submit([4, 5], GenerationConfig(max_new_tokens=400, ignore_eos=True))
    next(iter(running))
    engine.close()
    assert running.report.finish_reason == "cancelled" and waiting.report.finish_reason == "cancelled"
    with pytest.raises(EngineClosedError):
        engine.submit([1], GenerationConfig())
    m.close()
