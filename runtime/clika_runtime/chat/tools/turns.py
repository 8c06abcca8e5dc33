"""The tool loop's driver over a synchronous ChatSession: each model turn runs on a thread of its
own so the loop's event loop stays free to run one reply's tool calls concurrently, and a Ctrl-C
during the turn cancels the reply and returns without waiting for it to end."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from clika_runtime.chat.tools.loop import LoopCancelled, ModelTurn
from clika_runtime.chat.tools.own_thread import on_own_thread
from clika_runtime.chat.tools.toolkit import ToolOutput


class ToolTurnHost(Protocol):
    """What the loop needs of the synchronous session whose turns it drives
    (:class:`~clika_runtime.chat.session.ChatSession` is one)."""

    @property
    def messages(self) -> list[dict[str, Any]]: ...

    @property
    def closed(self) -> bool: ...

    @property
    def report(self) -> Any: ...

    def send(self, content: str, **options: Any) -> Any: ...

    def respond(self, **options: Any) -> Any: ...

    def add_tool_result(self, call_id: str, content: str, *, name: str = "") -> None: ...

    def cancel(self) -> None: ...


class ChatConversation:
    """One ChatSession as the loop's conversation (see :mod:`clika_runtime.chat.tools.loop`)."""

    def __init__(self, chat: ToolTurnHost, turn_options: Mapping[str, Any]) -> None:
        self._chat = chat
        self._options = dict(turn_options)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._chat.messages

    async def ask(self, prompt: str, tools: list[dict[str, Any]]) -> ModelTurn:
        return await self._turn(self._chat.send, prompt, tools=tools, **self._options)

    async def resume(self, tools: list[dict[str, Any]]) -> ModelTurn:
        return await self._turn(self._chat.respond, tools=tools, **self._options)

    def add_tool_output(self, output: ToolOutput) -> None:
        if not self._chat.closed:
            self._chat.add_tool_result(output.call.id, output.content, name=output.call.name)

    def cancelled(self) -> bool:
        return self._chat.closed

    async def _turn(self, method: Any, *args: Any, **kwargs: Any) -> ModelTurn:
        try:
            text = await on_own_thread(method, *args, **kwargs)
        except asyncio.CancelledError:  # Ctrl-C, a caller's timeout: the reply stops at its next step
            self._chat.cancel()
            raise
        except ValueError:
            if self._chat.closed:  # closed from another thread while the turn ran
                raise LoopCancelled("the chat session was closed") from None
            raise
        if self._chat.closed:
            raise LoopCancelled("the chat session was closed")
        outcome = self._chat.report
        assert outcome is not None
        report = outcome.report
        failed = report.finish_reason == "error"
        return ModelTurn(
            text="" if failed else text,
            tool_calls=tuple(outcome.tool_calls),
            usage={
                "input_tokens": report.prompt_tokens,
                "output_tokens": report.completion_tokens,
                "cache_read_input_tokens": report.cached_tokens,
            },
            error=(report.error or "the engine failed this request") if failed else None,
            detail=outcome,
        )
