"""A cancelled model turn of ``ChatSession.run`` (Ctrl-C, a caller's timeout) stops its reply.

The engine is held between two steps (its observer waits), so the reply can
end neither by itself nor by its budget before the cancel lands, however
loaded the machine. ``asyncio.run`` must come back while the engine is still
held, and the reply must then end at its next step, not run on to its budget.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from clika_runtime.chat.tools.turns import ChatConversation

BUDGET = 60
HELD_AT_STEP = 2


class HoldAtStep:
    """An engine observer: waits at step ``HELD_AT_STEP`` until released; keeps how many tokens the
    reply had when it ended."""

    def __init__(self) -> None:
        self.steps = 0
        self.completion_tokens = -1
        self.reached = threading.Event()
        self.released = threading.Event()
        self.ended = threading.Event()

    def __call__(self, event: object) -> None:
        stage = getattr(event, "stage", "")
        if stage == "detokenize":  # the request ended
            self.completion_tokens = getattr(event, "tokens", -1)
            self.ended.set()
        elif stage == "step":
            self.steps += 1
            if self.steps == HELD_AT_STEP:
                self.reached.set()
                assert self.released.wait(timeout=300), "the test never released the engine"


@pytest.fixture
def held_model(tiny_llama_model):
    from clika_runtime import modelverse

    model = modelverse.load(tiny_llama_model, threads=1)
    hold = HoldAtStep()
    model.engine.observer = hold
    yield model, hold
    hold.released.set()
    model.close()


def test_a_cancelled_model_turn_returns_at_once_and_its_reply_stops(held_model):
    model, hold = held_model
    session = model.chat_session()
    conversation = ChatConversation(session, {"max_new_tokens": BUDGET, "ignore_eos": True})

    async def interrupted() -> None:
        turn = asyncio.ensure_future(conversation.ask("hello", []))
        await asyncio.to_thread(hold.reached.wait, 300)  # the reply is live, the engine held
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn

    came_back = threading.Event()
    runner = threading.Thread(target=lambda: (asyncio.run(interrupted()), came_back.set()), daemon=True)
    runner.start()
    runner.join(timeout=300)  # a bound for the wait: it comes back at once, or waits for the engine
    assert hold.reached.is_set() and not hold.released.is_set()
    assert came_back.is_set(), "asyncio.run waited for the held reply"
    hold.released.set()
    assert hold.ended.wait(timeout=300)
    assert 0 < hold.completion_tokens < BUDGET  # the cancel stopped the reply short of its budget
