"""Seed 001 (``GenerativeModel``), the rows a tiny model settles: the behaviour does not depend on
what the model says. Each test is named after the seed row it proves."""

from __future__ import annotations

import time

import pytest
from pacing import paced_steps

LONG = {"temperature": 0.0, "max_new_tokens": 24, "ignore_eos": True}


def wait_until(condition, timeout: float = 60.0) -> None:
    """Wait for a condition the engine's thread makes true (the deadline only stops a hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the engine never got there"
        time.sleep(0.01)


def test_seed001_generate_refuses_a_prompt_and_messages_together(tiny_model):
    with pytest.raises(ValueError, match="exactly one"):
        tiny_model.generate("a prompt", messages=[{"role": "user", "content": "messages"}])
    with pytest.raises(ValueError, match="exactly one"):
        tiny_model.stream_generate("a prompt", messages=[{"role": "user", "content": "messages"}])


def test_seed001_closing_the_iterator_early_stops_delivery_the_generation_runs_to_completion(tiny_model):
    with paced_steps(tiny_model):  # the close lands while the reply is still being made
        pieces = tiny_model.stream_generate("go on", **LONG)
        next(pieces)
        pieces.close()
        assert list(pieces) == []  # delivery stopped
    report = pieces.wait(60)
    assert report.finish_reason == "length" and report.completion_tokens == LONG["max_new_tokens"]
    assert tiny_model.report is report  # set once the reply is complete


def test_seed001_cancel_by_name_gives_the_compute_back(tiny_model):
    with paced_steps(tiny_model):
        pieces = tiny_model.stream_generate("go on", temperature=0.0, max_new_tokens=200, ignore_eos=True)
        next(pieces)
        pieces.cancel()
    assert pieces.report.finish_reason == "cancelled" and pieces.report.completion_tokens < 200
    assert tiny_model.report is pieces.report
    assert not tiny_model.engine.scheduler.has_work


def test_seed001_a_stream_dropped_without_close_sets_report_to_its_own_request(tiny_model):
    tiny_model.generate("an earlier request", temperature=0.0, max_new_tokens=3)
    earlier = tiny_model.report
    prompt = "a longer prompt, read by the dropped stream only"
    pieces = tiny_model.stream_generate(prompt, **LONG)
    next(pieces)
    del pieces  # neither read to its end nor closed
    wait_until(lambda: tiny_model.report is not earlier)
    report = tiny_model.report
    assert report.completion_tokens == LONG["max_new_tokens"] and report.finish_reason == "length"
    assert report.prompt_tokens == len(
        tiny_model.tokenizer.encode(tiny_model.render([{"role": "user", "content": prompt}]))
    )


def test_seed001_the_stage_observer_reports_tokenize_for_chat_requests(tiny_model):
    seen: list[tuple[str, int | None]] = []
    tiny_model.set_stage_observer(lambda event: seen.append((event.stage, event.request_id)))
    try:
        tiny_model.chat([{"role": "user", "content": "hi"}], temperature=0.0, max_new_tokens=3)
        with tiny_model.chat_session() as chat:
            chat.send("hello", temperature=0.0, max_new_tokens=3)
    finally:
        tiny_model.set_stage_observer(None)
    requests = [rid for stage, rid in seen if stage == "prefill"]
    tokenized = [rid for stage, rid in seen if stage == "tokenize"]
    assert len(requests) == 2 and tokenized == requests
    first = {stage: i for i, (stage, rid) in reversed(list(enumerate(seen))) if rid == requests[1]}
    assert first["tokenize"] < first["prefill"]


def test_seed001_compute_dtype_reads_undefined_for_the_checkpoints_own(tiny_model):
    assert tiny_model.compute_dtype == "Undefined"
