"""The typed streams of ``GenerativeModel``: ``stream_tokens`` (the ids ``stream_generate(decode=False)``
gives) and ``stream_responses`` (one ``GenerationResponse`` a chunk, the last one ending the reply)."""

from __future__ import annotations

import dataclasses

import pytest
from pacing import paced_steps

from clika_runtime.modelverse import GenerationResponse

GREEDY = {"temperature": 0.0, "max_new_tokens": 12, "ignore_eos": True}


def ids_of(batches) -> list[int]:
    return [token for batch in batches for token in batch]


def test_stream_tokens_gives_the_ids_of_stream_generate_undecoded(tiny_model):
    tokens = list(tiny_model.stream_tokens("hello", **GREEDY))
    assert all(isinstance(batch, list) and batch for batch in tokens)
    assert ids_of(tokens) == ids_of(tiny_model.stream_generate("hello", decode=False, **GREEDY))
    assert len(ids_of(tokens)) == GREEDY["max_new_tokens"]
    assert tiny_model.report.completion_tokens == GREEDY["max_new_tokens"]


def test_joined_response_text_is_the_greedy_reply(tiny_model):
    text = tiny_model.generate("hello", **GREEDY)
    chunks = list(tiny_model.stream_responses("hello", **GREEDY))
    assert "".join(chunk.text for chunk in chunks) == text
    assert [chunk.text for chunk in chunks if chunk.text] == list(
        tiny_model.stream_generate("hello", **GREEDY)
    )
    assert ids_of(chunk.token_ids for chunk in chunks) == ids_of(tiny_model.stream_tokens("hello", **GREEDY))


def test_a_stop_string_ends_the_responses_where_it_ends_generate(tiny_model):
    whole = tiny_model.generate("hello", **GREEDY)
    stop = whole[len(whole) // 2 :][:2]  # a string the greedy reply meets half way
    assert stop
    cut = tiny_model.generate("hello", stop=[stop], **GREEDY)
    assert tiny_model.report.stop_string == stop
    chunks = list(tiny_model.stream_responses("hello", stop=[stop], **GREEDY))
    assert "".join(chunk.text for chunk in chunks) == cut
    last = chunks[-1]
    assert last.finish_reason == "stop" and last.report.stop_string == stop
    assert last.report.completion_tokens == len(ids_of(chunk.token_ids for chunk in chunks))


def test_every_chunk_is_a_response_and_only_the_last_ends_the_reply(tiny_model):
    stream = tiny_model.stream_responses("hello", **GREEDY)
    chunks = list(stream)
    assert chunks and all(isinstance(chunk, GenerationResponse) for chunk in chunks)
    assert all(chunk.finish_reason is None and chunk.report is None for chunk in chunks[:-1])
    last = chunks[-1]
    assert last.finish_reason == "length" and last.report is stream.report
    assert last.report.finish_reason == last.finish_reason
    assert last.report.completion_tokens == len(ids_of(chunk.token_ids for chunk in chunks))
    assert all(isinstance(chunk.token_ids, tuple) for chunk in chunks)
    assert tiny_model.report is last.report
    with pytest.raises(dataclasses.FrozenInstanceError):
        last.text = "changed"  # type: ignore[misc]


def test_closing_the_responses_early_stops_delivery_the_generation_runs_on(tiny_model):
    long = {**GREEDY, "max_new_tokens": 24}
    with paced_steps(tiny_model):  # the close lands while the reply is still being made
        stream = tiny_model.stream_responses("go on", **long)
        first = next(stream)
        stream.close()
        assert list(stream) == []  # delivery stopped
    assert first.report is None
    report = stream.wait(60)
    assert report.finish_reason == "length" and report.completion_tokens == long["max_new_tokens"]
    assert tiny_model.report is report


def test_cancelling_the_responses_stops_the_generation(tiny_model):
    with paced_steps(tiny_model):
        stream = tiny_model.stream_responses("go on", temperature=0.0, max_new_tokens=200, ignore_eos=True)
        next(stream)
        stream.cancel()
    rest = list(stream)  # what was made before the cancel, then the chunk that ends it
    assert rest[-1].finish_reason == "cancelled" and rest[-1].report is stream.report
    assert stream.report.completion_tokens < 200
    assert not tiny_model.engine.scheduler.has_work
