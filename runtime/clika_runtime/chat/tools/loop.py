"""The tool-running loop: the model calls tools, the toolkit runs them, the model reads the
results and goes on, until it answers without a call or ``max_turns`` model calls have run.

One loop serves every session kind through a small :class:`Conversation` driver
(an async session, a synchronous ChatSession): the driver runs a model turn,
the loop decides what comes next. Calls of one reply run concurrently. Hooks
audit, veto or rewrite each model call and each tool call::

    hooks = LoopHooks(
        before_tool=lambda call: Veto("no deletes") if call.name == "delete" else None,
        after_tool=lambda output: output.content[:2000],       # truncate what the model reads
    )

A hook may be a plain function or a coroutine function. ``before_model`` sees
the messages the model is about to read and may return :class:`Veto` to end
the loop; ``after_model`` sees each :class:`ModelTurn` and may veto;
``before_tool`` may return a :class:`Veto` (the call does not run; the model
reads the refusal) or a replacement :class:`~clika_runtime.chat.tools.definitions.ToolCall`;
``after_tool`` may return new content for the model to read.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.toolkit import Toolkit, ToolOutput

DEFAULT_MAX_TURNS = 8
LOOP_STATUSES = ("completed", "max_turns", "vetoed", "error")


@dataclass(frozen=True)
class Veto:
    """A hook's refusal: the reason the model (or the caller) reads."""

    reason: str = "refused by a hook"


@dataclass(frozen=True)
class ModelTurn:
    """One model call of the loop, whatever the session kind: its visible text, the calls it
    made, its token usage, and an error message when the engine failed."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    detail: Any = None  # the session's own result object for this turn


@dataclass
class LoopHooks:
    """Callbacks around model and tool calls (see the module docstring)."""

    before_model: Callable[[list[dict[str, Any]]], Any] | None = None
    after_model: Callable[[ModelTurn], Any] | None = None
    before_tool: Callable[[ToolCall], Any] | None = None
    after_tool: Callable[[ToolOutput], Any] | None = None


@dataclass(frozen=True)
class LoopResult:
    """How a tool-running loop ended.

    ``status`` is ``completed`` (the model answered without a call),
    ``max_turns`` (the bound stopped it with calls still pending), ``vetoed`` (a
    model hook refused) or ``error`` (the engine failed); ``outputs`` are every
    tool call's output in the order they ran; ``model_calls`` counts the
    model's turns; ``usage`` sums their tokens.
    """

    text: str
    status: str
    outputs: tuple[ToolOutput, ...]
    model_calls: int
    usage: Mapping[str, int]
    duration_ms: int
    last: ModelTurn | None
    reason: str = ""

    @property
    def num_tool_calls(self) -> int:
        return len(self.outputs)

    @property
    def tool_counts(self) -> dict[str, int]:
        """How many times each tool was called."""
        return dict(Counter(output.call.name for output in self.outputs))

    @property
    def failed_tool_calls(self) -> int:
        return sum(1 for output in self.outputs if output.is_error or output.vetoed)


class Conversation(Protocol):
    """What the loop needs of a session."""

    @property
    def messages(self) -> list[dict[str, Any]]: ...

    async def ask(self, prompt: str, tools: list[dict[str, Any]]) -> ModelTurn: ...

    async def resume(self, tools: list[dict[str, Any]]) -> ModelTurn: ...

    def add_tool_output(self, output: ToolOutput) -> None: ...

    def cancelled(self) -> bool: ...


class LoopCancelled(Exception):
    """The loop's cancel condition fired between its steps."""


async def run_tool_loop(
    conversation: Conversation,
    prompt: str,
    toolkit: Toolkit,
    *,
    max_turns: int | None = None,
    hooks: LoopHooks | None = None,
) -> LoopResult:
    """Run ``prompt`` through the model and its tools until it answers (see the module docstring)."""
    bound = checked_max_turns(max_turns)
    if not isinstance(toolkit, Toolkit):
        raise ValueError(f"toolkit must be a Toolkit, got {type(toolkit).__name__}")
    return await _Loop(conversation, toolkit, bound, hooks or LoopHooks()).run(prompt)


def checked_max_turns(max_turns: int | None) -> int:
    """``max_turns`` as a bound on model calls (None: the default); ValueError when not >= 1."""
    if max_turns is None:
        return DEFAULT_MAX_TURNS
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
    return max_turns


class _Loop:
    def __init__(self, conversation: Conversation, toolkit: Toolkit, bound: int, hooks: LoopHooks) -> None:
        self.conversation = conversation
        self.toolkit = toolkit
        self.bound = bound
        self.hooks = hooks
        self.tools = toolkit.definitions()
        self.outputs: list[ToolOutput] = []
        self.usage: Counter[str] = Counter()
        self.model_calls = 0
        self.started = time.perf_counter()

    async def run(self, prompt: str) -> LoopResult:
        upcoming = [*self.conversation.messages, {"role": "user", "content": prompt}]
        veto = await self._model_veto(upcoming)
        if veto is not None:
            return self._end("vetoed", None, veto.reason)
        turn = await self._model(lambda: self.conversation.ask(prompt, self.tools))
        while True:
            if turn.error is not None:
                return self._end("error", turn, turn.error)
            veto = _as_veto(await _call(self.hooks.after_model, turn))
            if veto is not None:
                return self._end("vetoed", turn, veto.reason)
            if not turn.tool_calls:
                return self._end("completed", turn)
            if self.model_calls >= self.bound:
                return self._end("max_turns", turn, f"stopped after {self.bound} model call(s)")
            await self._run_calls(turn.tool_calls)
            veto = await self._model_veto(self.conversation.messages)
            if veto is not None:
                return self._end("vetoed", turn, veto.reason)
            turn = await self._model(lambda: self.conversation.resume(self.tools))

    async def _model(self, make_call: Callable[[], Any]) -> ModelTurn:
        self._raise_if_cancelled()
        turn = await make_call()
        self.model_calls += 1
        self.usage.update({key: int(value) for key, value in turn.usage.items()})
        return turn

    async def _model_veto(self, messages: list[dict[str, Any]]) -> Veto | None:
        return _as_veto(await _call(self.hooks.before_model, [dict(message) for message in messages]))

    async def _run_calls(self, calls: Sequence[ToolCall]) -> None:
        self._raise_if_cancelled()
        tasks = [asyncio.ensure_future(self._run_one(call)) for call in calls]
        try:
            outputs = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            self._answer_unfinished(calls, tasks)
            raise
        for output in outputs:
            self.outputs.append(output)
            self.conversation.add_tool_output(output)

    async def _run_one(self, call: ToolCall) -> ToolOutput:
        decision = await _call(self.hooks.before_tool, call)
        if isinstance(decision, Veto):
            return ToolOutput(
                call, f"error: the call was refused: {decision.reason}", is_error=True, vetoed=True
            )
        if isinstance(decision, ToolCall):
            call = ToolCall(call.id, decision.name, dict(decision.arguments), call.raw)
        output = await self.toolkit.run(call)
        rewritten = await _call(self.hooks.after_tool, output)
        if isinstance(rewritten, ToolOutput):
            return rewritten
        if isinstance(rewritten, str):
            return ToolOutput(output.call, rewritten, output.is_error, output.vetoed, output.duration_ms)
        return output

    def _answer_unfinished(self, calls: Sequence[ToolCall], tasks: list[asyncio.Future[ToolOutput]]) -> None:
        # Every call the history holds gets an answer, so the conversation stays one a template
        # can render and the model can continue.
        for call, task in zip(calls, tasks, strict=True):
            done = task.done() and not task.cancelled() and task.exception() is None
            output = task.result() if done else ToolOutput(call, "error: cancelled", is_error=True)
            self.outputs.append(output)
            self.conversation.add_tool_output(output)

    def _raise_if_cancelled(self) -> None:
        if self.conversation.cancelled():
            raise LoopCancelled("the tool loop was cancelled")

    def _end(self, status: str, turn: ModelTurn | None, reason: str = "") -> LoopResult:
        return LoopResult(
            text="" if turn is None else turn.text,
            status=status,
            outputs=tuple(self.outputs),
            model_calls=self.model_calls,
            usage=dict(self.usage),
            duration_ms=int((time.perf_counter() - self.started) * 1000),
            last=turn,
            reason=reason,
        )


async def _call(hook: Callable[..., Any] | None, value: Any) -> Any:
    if hook is None:
        return None
    outcome = hook(value)
    return await outcome if inspect.isawaitable(outcome) else outcome


def _as_veto(value: Any) -> Veto | None:
    return value if isinstance(value, Veto) else None
