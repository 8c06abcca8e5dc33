"""/health is answered while a request's grammar compiles: compiling runs off the event loop.

The compile is held at a gate the test controls (it announces itself, then
waits), so the check does not depend on how long a hostile pattern takes.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from clika_runtime.server import start_server, structured

CATASTROPHIC = "^(a+)+(b+)+(c+)+(a|aa)*$"


class HeldCompile:
    """``constraint_from`` that says it entered, then waits until released."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, *args, **kwargs):
        self.entered.set()
        assert self.released.wait(timeout=300), "the test never released the compile"
        return self.inner(*args, **kwargs)


def test_health_is_answered_while_a_hostile_schema_compiles(tiny_model, monkeypatch: pytest.MonkeyPatch):
    held = HeldCompile(structured.constraint_from)
    monkeypatch.setattr(structured, "constraint_from", held)
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": CATASTROPHIC}}}
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    }
    with start_server(tiny_model, model_id="tiny") as running:
        answers: list[httpx.Response] = []
        asking = threading.Thread(
            target=lambda: answers.append(
                httpx.post(running.url + "/chat/completions", json=body, timeout=300)
            )
        )
        asking.start()
        try:
            assert held.entered.wait(timeout=300)  # the compile is in progress (held) ...
            health = httpx.get(running.base_url + "/health", timeout=60)  # ... and the loop answers
            assert not held.released.is_set() and not answers  # still compiling while /health was served
        finally:
            held.released.set()
            asking.join()
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert answers[0].status_code == 200


def test_the_grammar_vocabulary_is_built_before_serving(tiny_model):
    """Building it holds the GIL for up to a second (a 150k vocabulary): a first structured request
    that built it would stall /health and every stream for as long."""
    pytest.importorskip("llguidance")
    from clika_runtime.grammar import vocabulary
    from clika_runtime.server import build_backend

    vocabulary._BUILT.pop(tiny_model.tokenizer, None)  # an earlier test's server may have built it
    build_backend(tiny_model, model_id="tiny")
    assert tiny_model.vocab_size in vocabulary._BUILT.get(tiny_model.tokenizer, {})
