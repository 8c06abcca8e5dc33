"""The tool-running loop on an async session, and what it hands back.

``await session.run(prompt, toolkit=kit)`` runs the loop of
:mod:`clika_runtime.chat.tool_loop` on an :class:`AsyncSession`: each model
turn is a turn of the session (so it is saved, cancellable and shares the
model's engine), each tool output a tool turn. ``AsyncChat.conversation(kit,
cancel=event)`` gives a :class:`ToolConversation`, the shape agent clients know
(``messages``, ``await send(prompt)``, ``reset()``), whose every send runs the loop.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from clika_runtime.chat.tool_loop import LoopCancelled, LoopHooks, LoopResult, ModelTurn, run_tool_loop
from clika_runtime.chat.toolkit import Toolkit, ToolOutput
from clika_runtime.sessions.results import Event, RunCancelled, TurnResult
from clika_runtime.sessions.turn import TurnStream


class AsyncSession(Protocol):
    """What the loop needs of an async session (``clika_runtime.sessions.session.AsyncSession``)."""

    @property
    def session_id(self) -> str: ...

    @property
    def messages(self) -> list[dict[str, Any]]: ...

    @property
    def closed(self) -> bool: ...

    @property
    def cancel_event(self) -> asyncio.Event | None: ...

    async def send(self, content: str, **options: Any) -> TurnResult: ...

    async def respond(self, **options: Any) -> TurnResult: ...

    def stream(self, content: str, **options: Any) -> TurnStream: ...

    def respond_stream(self, **options: Any) -> TurnStream: ...

    def add_tool_result(self, call_id: str, content: str, *, name: str = "") -> None: ...

    def reset(self, *, keep_system: bool = True) -> None: ...

    async def run(self, prompt: str, **options: Any) -> RunResult: ...


RESULT_SUBTYPES = {
    "completed": "success",
    "max_turns": "error_max_turns",
    "vetoed": "error_vetoed",
    "error": "error",
}


@dataclass(frozen=True)
class RunResult:
    """How a tool-running loop on a session ended (see :class:`~clika_runtime.chat.tool_loop.LoopResult`).

    Read like a result message: ``result`` (the final text), ``subtype``
    (``success``, ``error_max_turns``, ``error_vetoed``, ``error``),
    ``num_turns`` (model calls), ``usage`` (tokens summed over them),
    ``tool_calls`` (calls run), ``tool_counts`` (per tool).
    """

    loop: LoopResult
    session_id: str
    messages: tuple[Mapping[str, Any], ...]

    @property
    def text(self) -> str:
        return self.loop.text

    @property
    def result(self) -> str:
        return self.loop.reason if self.loop.status == "error" else self.loop.text

    @property
    def status(self) -> str:
        return self.loop.status

    @property
    def subtype(self) -> str:
        return RESULT_SUBTYPES[self.loop.status]

    @property
    def is_error(self) -> bool:
        return self.subtype != "success"

    @property
    def num_turns(self) -> int:
        return self.loop.model_calls

    @property
    def tool_calls(self) -> int:
        return self.loop.num_tool_calls

    @property
    def tool_counts(self) -> dict[str, int]:
        return self.loop.tool_counts

    @property
    def outputs(self) -> tuple[ToolOutput, ...]:
        return self.loop.outputs

    @property
    def usage(self) -> dict[str, int]:
        return dict(self.loop.usage)

    @property
    def last(self) -> TurnResult | None:
        """The last model turn's own result."""
        return None if self.loop.last is None else self.loop.last.detail

    def to_message(self) -> dict[str, Any]:
        """The loop's result message (type, subtype, result, session_id, total_cost_usd,
        duration_ms, num_turns, usage, tool_calls)."""
        return {
            "type": "result",
            "subtype": self.subtype,
            "result": self.result,
            "session_id": self.session_id,
            "total_cost_usd": 0.0,
            "duration_ms": self.loop.duration_ms,
            "num_turns": self.num_turns,
            "usage": self.usage,
            "tool_calls": self.tool_calls,
        }

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_message().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.to_message()[key]


class SessionConversation:
    """The loop's driver over one async session (its turns honour ``cancel`` too)."""

    def __init__(
        self,
        session: AsyncSession,
        cancel: asyncio.Event | None,
        turn_options: Mapping[str, Any],
        on_event: Callable[[Event], Any] | None = None,
    ) -> None:
        self._session = session
        self._cancel = cancel
        self._options = dict(turn_options)
        self._on_event = on_event

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._session.messages

    async def ask(self, prompt: str, tools: list[dict[str, Any]]) -> ModelTurn:
        options = {"tools": tools, "cancel": self._cancel, **self._options}
        if self._on_event is None:
            return model_turn(await self._session.send(prompt, **options))
        return await self._streamed(self._session.stream(prompt, **options))

    async def resume(self, tools: list[dict[str, Any]]) -> ModelTurn:
        options = {"tools": tools, "cancel": self._cancel, **self._options}
        if self._on_event is None:
            return model_turn(await self._session.respond(**options))
        return await self._streamed(self._session.respond_stream(**options))

    async def _streamed(self, stream: TurnStream) -> ModelTurn:
        async with stream:
            async for event in stream:
                if event.type not in ("result", "error"):
                    outcome = self._on_event(event)  # type: ignore[misc]
                    if inspect.isawaitable(outcome):
                        await outcome
        assert stream.result is not None
        return model_turn(stream.result)

    def add_tool_output(self, output: ToolOutput) -> None:
        self._session.add_tool_result(output.call.id, output.content, name=output.call.name)

    def cancelled(self) -> bool:
        return self._session.closed or any(event.is_set() for event in self._cancels())

    def _cancels(self) -> list[asyncio.Event]:
        return [event for event in (self._session.cancel_event, self._cancel) if event is not None]


async def run_on_session(
    session: AsyncSession,
    prompt: str,
    toolkit: Toolkit,
    *,
    max_turns: int | None,
    hooks: LoopHooks | None,
    cancel: asyncio.Event | None,
    turn_options: Mapping[str, Any],
    on_event: Callable[[Event], Any] | None = None,
) -> RunResult:
    """Run the loop on ``session``; a fired cancel event raises RunCancelled."""
    driver = SessionConversation(session, cancel, turn_options, on_event)
    try:
        loop = await run_tool_loop(driver, prompt, toolkit, max_turns=max_turns, hooks=hooks)
    except LoopCancelled as error:
        raise RunCancelled(str(error)) from None
    return RunResult(loop, session.session_id, tuple(session.messages))


def model_turn(result: TurnResult) -> ModelTurn:
    """A session turn's result as one model call of the loop."""
    return ModelTurn(
        text=result.result if not result.is_error else "",
        tool_calls=tuple(result.tool_calls),
        usage=dict(result.usage),
        error=result.result if result.is_error else None,
        detail=result,
    )


class ToolConversation:
    """One conversation whose every :meth:`send` runs the tool loop with the same toolkit.

    ``messages`` is the running transcript (assign to it to continue another
    one); :meth:`reset` clears it; the cancel event given at creation is
    honoured by every send (a fired one raises RunCancelled)."""

    def __init__(
        self,
        session: AsyncSession,
        toolkit: Toolkit,
        *,
        cancel: asyncio.Event | None = None,
        max_turns: int | None = None,
        hooks: LoopHooks | None = None,
    ) -> None:
        self._session = session
        self._toolkit = toolkit
        self._cancel = cancel
        self._max_turns = max_turns
        self._hooks = hooks

    @property
    def session(self) -> AsyncSession:
        return self._session

    @property
    def toolkit(self) -> Toolkit:
        return self._toolkit

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._session.messages

    @messages.setter
    def messages(self, messages: list[dict[str, Any]]) -> None:
        self._session.messages = messages

    async def send(self, prompt: str, **turn_options: Any) -> RunResult:
        """The next user turn, tools run until the model answers."""
        if self._cancel is not None and self._cancel.is_set():
            raise RunCancelled("the conversation's cancel event is set")
        return await self._session.run(
            prompt,
            toolkit=self._toolkit,
            max_turns=self._max_turns,
            hooks=self._hooks,
            cancel=self._cancel,
            **turn_options,
        )

    def reset(self) -> None:
        """Clear the transcript: the next send starts a fresh conversation."""
        self._session.reset(keep_system=False)
