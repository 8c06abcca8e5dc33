"""The tool-running loop's decisions, on a scripted conversation (no model).

The conversation plays back planned model turns and records what the loop adds,
so each test pins one rule: calls run and answer in the history, one reply's
calls run concurrently, ``max_turns`` bounds model calls, hooks veto and
rewrite, and a cancel between steps leaves every call answered.
"""

from __future__ import annotations

import asyncio

import pytest

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.loop import LoopCancelled, LoopHooks, ModelTurn, Veto, run_tool_loop
from clika_runtime.chat.tools.toolkit import Toolkit, tool


class ScriptedConversation:
    """Plays back model turns; keeps the transcript the loop builds."""

    def __init__(self, turns: list[ModelTurn]) -> None:
        self.turns = list(turns)
        self.messages: list[dict] = []
        self.cancel = False
        self.asked = 0

    async def ask(self, prompt, tools):
        self.messages.append({"role": "user", "content": prompt})
        return self._next(tools)

    async def resume(self, tools):
        return self._next(tools)

    def _next(self, tools) -> ModelTurn:
        assert tools, "every model turn is offered the toolkit"
        self.asked += 1
        turn = self.turns.pop(0)
        reply = {"role": "assistant", "content": turn.text}
        if turn.tool_calls:
            reply["tool_calls"] = [call.to_message() for call in turn.tool_calls]
        self.messages.append(reply)
        return turn

    def add_tool_output(self, output):
        self.messages.append({"role": "tool", "tool_call_id": output.call.id, "content": output.content})

    def cancelled(self):
        return self.cancel


def calls(*pairs) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(f"call_{i}", name, args) for i, (name, args) in enumerate(pairs))


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


USAGE = {"input_tokens": 10, "output_tokens": 2}


def test_calls_run_their_outputs_join_the_history_and_the_answer_ends_the_loop():
    convo = ScriptedConversation(
        [
            ModelTurn("", calls(("add", {"a": 2, "b": 3}), ("shout", {"text": "hi"})), USAGE),
            ModelTurn("", calls(("add", {"a": 5, "b": 1})), USAGE),
            ModelTurn("The sum is 6.", (), USAGE),
        ]
    )
    result = asyncio.run(run_tool_loop(convo, "go", Toolkit([add, shout])))
    assert result.status == "completed" and result.text == "The sum is 6."
    assert result.model_calls == 3 and result.num_tool_calls == 3
    assert result.tool_counts == {"add": 2, "shout": 1}
    assert result.usage == {"input_tokens": 30, "output_tokens": 6}
    tool_turns = [m["content"] for m in convo.messages if m["role"] == "tool"]
    assert tool_turns == ["5", "HI", "6"]


def test_one_replys_calls_run_concurrently():
    # Each call waits for the other to have started: run one after another they would never finish.
    started = {"left": asyncio.Event, "right": asyncio.Event}

    async def main():
        events = {name: factory() for name, factory in started.items()}

        @tool
        async def meet(side: str) -> str:
            """Wait for the other side."""
            events[side].set()
            other = "right" if side == "left" else "left"
            await asyncio.wait_for(events[other].wait(), timeout=60)
            return side

        convo = ScriptedConversation(
            [ModelTurn("", calls(("meet", {"side": "left"}), ("meet", {"side": "right"}))), ModelTurn("met")]
        )
        return await run_tool_loop(convo, "go", Toolkit([meet]))

    result = asyncio.run(main())
    assert result.status == "completed" and [o.content for o in result.outputs] == ["left", "right"]


def test_max_turns_bounds_the_model_calls():
    looping = [ModelTurn("", calls(("add", {"a": 1, "b": 1}))) for _ in range(5)]
    convo = ScriptedConversation(looping)
    result = asyncio.run(run_tool_loop(convo, "go", Toolkit([add]), max_turns=2))
    assert result.status == "max_turns" and result.model_calls == 2 and result.num_tool_calls == 1
    assert "stopped after 2 model call(s)" in result.reason
    with pytest.raises(ValueError, match="max_turns must be an integer >= 1"):
        asyncio.run(run_tool_loop(convo, "go", Toolkit([add]), max_turns=0))


def test_a_vetoed_call_does_not_run_and_the_model_reads_why():
    ran = []

    @tool
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    hooks = LoopHooks(
        before_tool=lambda call: Veto("deleting is not allowed") if call.name == "delete" else None
    )
    convo = ScriptedConversation([ModelTurn("", calls(("delete", {"path": "/etc"}))), ModelTurn("I cannot.")])
    result = asyncio.run(run_tool_loop(convo, "go", Toolkit([delete]), hooks=hooks))
    assert ran == [] and result.status == "completed"
    assert result.outputs[0].vetoed and result.failed_tool_calls == 1
    assert convo.messages[2]["content"] == "error: the call was refused: deleting is not allowed"


def test_hooks_rewrite_calls_and_outputs_and_a_model_hook_ends_the_loop():
    async def after_tool(output):
        return output.content + "!"

    hooks = LoopHooks(
        before_tool=lambda call: ToolCall(call.id, "add", {"a": 40, "b": 2}),
        after_tool=after_tool,
        after_model=lambda turn: Veto("budget spent") if turn.text == "stop" else None,
    )
    convo = ScriptedConversation([ModelTurn("", calls(("add", {"a": 1, "b": 1}))), ModelTurn("stop")])
    result = asyncio.run(run_tool_loop(convo, "go", Toolkit([add]), hooks=hooks))
    assert [m["content"] for m in convo.messages if m["role"] == "tool"] == ["42!"]
    assert result.status == "vetoed" and result.reason == "budget spent"

    seen = []
    audit = LoopHooks(before_model=lambda messages: seen.append(len(messages)) or Veto("no model calls"))
    blocked = ScriptedConversation([ModelTurn("never")])
    result = asyncio.run(run_tool_loop(blocked, "go", Toolkit([add]), hooks=audit))
    assert result.status == "vetoed" and result.model_calls == 0 and blocked.asked == 0 and seen == [1]


def test_an_engine_failure_ends_the_loop_as_an_error():
    convo = ScriptedConversation([ModelTurn("", (), USAGE, error="the engine failed")])
    result = asyncio.run(run_tool_loop(convo, "go", Toolkit([add])))
    assert result.status == "error" and result.reason == "the engine failed"


def test_a_cancel_during_the_calls_answers_every_call_and_raises():
    async def main():
        release = asyncio.Event()
        convo = ScriptedConversation([ModelTurn("", calls(("slow", {}), ("add", {"a": 1, "b": 2})))])

        @tool
        async def slow() -> str:
            """Never finishes on its own."""
            await release.wait()
            return "late"

        task = asyncio.ensure_future(run_tool_loop(convo, "go", Toolkit([slow, add])))
        while len(convo.messages) < 2:  # the model turn has been made
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return convo

    convo = asyncio.run(main())
    answers = {m["tool_call_id"]: m["content"] for m in convo.messages if m["role"] == "tool"}
    assert set(answers) == {"call_0", "call_1"} and answers["call_0"] == "error: cancelled"


def test_a_cancel_between_steps_raises_loop_cancelled():
    convo = ScriptedConversation([ModelTurn("", calls(("add", {"a": 1, "b": 2}))), ModelTurn("done")])

    def cancel_after_the_call(output):
        convo.cancel = True

    hooks = LoopHooks(after_tool=cancel_after_the_call)
    with pytest.raises(LoopCancelled):
        asyncio.run(run_tool_loop(convo, "go", Toolkit([add]), hooks=hooks))
    assert convo.asked == 1
