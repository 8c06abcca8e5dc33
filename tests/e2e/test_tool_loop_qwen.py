"""The tool-running loop on a real model, Qwen2.5-Coder-0.5B-Instruct int4 (slow).

The model is shown the worked exchange of ``weather_exchange`` so that
it calls ``get_weather``; what the tests assert is what the loop guarantees,
whatever the model says next: every call it made ran with the arguments it
made, every call is answered by a tool turn in the history, model calls stay
within ``max_turns``, a vetoed call never runs, and the sync and async
sessions drive the same loop.
"""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest
from weather_exchange import QUESTION, SYSTEM

from clika_runtime import modelverse
from clika_runtime.chat.session import ChatSession
from clika_runtime.chat.tools.loop import LoopHooks, Veto
from clika_runtime.chat.tools.toolkit import Toolkit, tool
from clika_runtime.sessions import AsyncChat, RunResult, ToolConversation

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0.0, "max_new_tokens": 64}


def weather_toolkit(ran: list[dict]) -> Toolkit:
    @tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """Get the current weather in a city.

        Args:
            city: The city name
            unit: Temperature unit
        """
        ran.append({"city": city, "unit": unit})
        return json.dumps({"temperature": 18, "unit": unit, "condition": "light rain"})

    return Toolkit([get_weather])


@pytest.fixture(scope="module")
def qwen(qwen05_gguf):
    from clika_export.api import cached_export

    model = modelverse.load(cached_export(qwen05_gguf, precision="int4", progress=False))
    yield model
    model.close()


def assert_every_call_ran_and_is_answered(messages: list[dict], ran: list[dict], outputs) -> None:
    made = [call for m in messages if m["role"] == "assistant" for call in m.get("tool_calls", ())]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert made, "the worked example makes the model call the tool"
    assert answered == [call["id"] for call in made]
    assert ran == [json.loads(call["function"]["arguments"]) for call in made]
    assert [output.call.id for output in outputs] == answered


def test_an_async_session_runs_the_tools_until_the_model_answers(qwen):
    ran: list[dict] = []

    async def main() -> RunResult:
        chat = AsyncChat(qwen, system=SYSTEM)
        session = chat.create_session()
        return await session.run(QUESTION, toolkit=weather_toolkit(ran), max_turns=3, **GREEDY)

    result = asyncio.run(main())
    assert_every_call_ran_and_is_answered(list(result.messages), ran, result.outputs)
    assert 2 <= result.num_turns <= 3
    assert result.status in ("completed", "max_turns")
    last_reply = [m for m in result.messages if m["role"] == "assistant"][-1]
    assert bool(last_reply.get("tool_calls")) == (result.status == "max_turns")
    message = result.to_message()
    assert message["type"] == "result" and message["tool_calls"] == len(ran)
    assert message["usage"]["output_tokens"] > 0 and message["num_turns"] == result.num_turns


def test_a_vetoing_hook_keeps_the_tool_from_running(qwen):
    ran: list[dict] = []
    vetoed = []

    def refuse(call):
        vetoed.append(call.name)
        return Veto("weather lookups are switched off")

    async def main() -> tuple[RunResult, list[dict]]:
        chat = AsyncChat(qwen, system=SYSTEM)
        convo = chat.conversation(weather_toolkit(ran), max_turns=2, hooks=LoopHooks(before_tool=refuse))
        assert isinstance(convo, ToolConversation)
        result = await convo.send(QUESTION, **GREEDY)
        return result, convo.messages

    result, messages = asyncio.run(main())
    assert ran == [] and vetoed and result.loop.failed_tool_calls == len(vetoed)
    refusals = [m["content"] for m in messages if m["role"] == "tool"]
    assert refusals and all("weather lookups are switched off" in text for text in refusals)


def test_a_chat_session_drives_the_same_loop(qwen):
    ran: list[dict] = []
    with ChatSession(qwen, system=SYSTEM, default_budget=64) as chat:
        result = chat.run(QUESTION, toolkit=weather_toolkit(ran), max_turns=3, temperature=0.0)
        assert_every_call_ran_and_is_answered(chat.messages, ran, result.outputs)
        assert result.model_calls <= 3 and result.status in ("completed", "max_turns")
