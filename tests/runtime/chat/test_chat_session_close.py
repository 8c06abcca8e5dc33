"""``ChatSession.close()`` from another thread, as seed 000 says: the live turn stops at its
next decode step, streamed or not, and turns queued behind it are dropped (neither runs nor
joins the history). The engine is held after each step until the test has acted, so the close
lands mid-reply whatever the machine's speed."""

from __future__ import annotations

import threading

import pytest

from clika_runtime.chat.session import ChatSession
from clika_runtime.engine.stages import StageEvent

LONG = {"temperature": 0.0, "max_new_tokens": 64, "ignore_eos": True}


class HeldSteps:
    """A stage observer that parks the engine after each step until released."""

    def __init__(self) -> None:
        self.stepped = threading.Event()
        self.release = threading.Event()

    def __call__(self, event: StageEvent) -> None:
        if event.stage == "step":
            self.stepped.set()
            self.release.wait(timeout=60)


def test_close_stops_a_running_send_and_drops_the_queued_turn(tiny_model):
    held = HeldSteps()
    tiny_model.set_stage_observer(held)
    chat = ChatSession(tiny_model, default_budget=64)
    results: dict[str, object] = {}

    def first() -> None:
        results["first"] = chat.send("a long reply", **LONG)

    def queued() -> None:
        try:
            results["queued"] = chat.send("never asked", **LONG)
        except ValueError as exc:
            results["queued"] = exc

    try:
        running = threading.Thread(target=first)
        running.start()
        assert held.stepped.wait(60)  # the first turn is in the engine, parked after a step
        waiting = threading.Thread(target=queued)
        waiting.start()
        chat.close()  # returns at once: it does not wait for the running turn
        held.release.set()
        running.join(60)
        waiting.join(60)
    finally:
        held.release.set()
        tiny_model.set_stage_observer(None)
    assert chat.report.finish == "cancelled" and chat.report.completion_tokens < 64
    assert isinstance(results["queued"], ValueError) and "closed" in str(results["queued"])
    assert chat.messages == []  # neither turn joined the history
    with pytest.raises(ValueError, match="closed"):
        chat.send("after close")


def test_close_stops_a_streamed_reply_being_read_in_another_thread(tiny_model):
    held = HeldSteps()
    tiny_model.set_stage_observer(held)
    chat = ChatSession(tiny_model, default_budget=64)
    read: list[str] = []
    try:
        pieces = chat.send("stream it", stream=True, **LONG)
        reader = threading.Thread(target=lambda: read.extend(p for p in pieces if isinstance(p, str)))
        reader.start()
        assert held.stepped.wait(60)
        chat.close()
        held.release.set()
        reader.join(60)
    finally:
        held.release.set()
        tiny_model.set_stage_observer(None)
    assert not reader.is_alive()
    assert chat.report.finish == "cancelled" and chat.report.completion_tokens < 64
