"""What an async turn hands back: a result per turn and the events of a streamed turn.

A :class:`TurnResult` is one turn's outcome; :meth:`TurnResult.to_message`
gives it in the result-message shape SDK clients read::

    {"type": "result", "subtype": "success", "result": "...", "session_id": "...",
     "total_cost_usd": 0.0, "duration_ms": 412, "num_turns": 2,
     "usage": {"input_tokens": 57, "output_tokens": 12, "cache_read_input_tokens": 40}}

A streamed turn yields :class:`Event` objects typed ``text``, ``thinking``,
``tool_use``, ``error`` and, last, ``result``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall

EVENT_TYPES = ("text", "thinking", "tool_use", "result", "error")


class RunCancelled(Exception):
    """A turn stopped before its end: its cancel event was set, a newer turn on the same
    session closed its stream, or the engine closed. The turn never joins the history."""


@dataclass(frozen=True)
class TurnResult:
    """One turn's outcome.

    ``result`` is the reply's visible text (on ``subtype == "error"`` the error
    message); ``num_turns`` counts the assistant replies in the conversation
    after this turn; ``usage`` counts tokens (``input_tokens`` read, of which
    ``cache_read_input_tokens`` came from the KV cache, ``output_tokens``
    generated); a local model costs nothing, so ``total_cost_usd`` is 0.0.
    ``messages`` is the conversation after the turn and ``prompt_text`` the
    text the model read for it.
    """

    result: str
    session_id: str
    subtype: str = "success"
    duration_ms: int = 0
    num_turns: int = 0
    usage: Mapping[str, int] = field(default_factory=dict)
    total_cost_usd: float = 0.0
    finish_reason: str = "stop"
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    error: str | None = None
    messages: tuple[Mapping[str, Any], ...] = ()
    prompt_text: str = ""

    @property
    def text(self) -> str:
        """The reply's visible text (the same as ``result``)."""
        return self.result

    @property
    def is_error(self) -> bool:
        return self.subtype == "error"

    def to_message(self) -> dict[str, Any]:
        """The result message: type, subtype, result, session_id, total_cost_usd, duration_ms,
        num_turns and usage."""
        return {
            "type": "result",
            "subtype": self.subtype,
            "result": self.result,
            "session_id": self.session_id,
            "total_cost_usd": self.total_cost_usd,
            "duration_ms": self.duration_ms,
            "num_turns": self.num_turns,
            "usage": dict(self.usage),
        }

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the result message, read like a dict (``result.get("result")``)."""
        return self.to_message().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.to_message()[key]


@dataclass(frozen=True)
class Event:
    """One event of a streamed turn.

    ``text`` and ``thinking`` carry a piece of the visible reply or of the
    reasoning in ``text``; ``tool_use`` a :class:`ToolCall`; ``error`` the
    message in ``text``; ``result`` the turn's :class:`TurnResult`.
    """

    type: str
    text: str = ""
    tool_call: ToolCall | None = None
    result: TurnResult | None = None

    def __post_init__(self) -> None:
        if self.type not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {EVENT_TYPES}, got {self.type!r}")

    def to_message(self) -> dict[str, Any]:
        """The event as a message dict (``{"type": "text", "text": ...}``, ``{"type": "tool_use",
        "id", "name", "input"}``, ``{"type": "error", "error": {"message": ...}}``, the result message)."""
        if self.type == "result":
            assert self.result is not None
            return self.result.to_message()
        if self.type == "tool_use":
            assert self.tool_call is not None
            call = self.tool_call
            return {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        if self.type == "error":
            return {"type": "error", "error": {"message": self.text}}
        return {"type": self.type, self.type: self.text}

    def get(self, key: str, default: Any = None) -> Any:
        """A field of :meth:`to_message`, read like a dict (``event.get("type")``)."""
        return self.to_message().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.to_message()[key]
