"""What a tool-running loop on a session hands back: :class:`RunResult`, read like a result message."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.loop import LoopResult
from clika_runtime.chat.tools.toolkit import ToolOutput
from clika_runtime.forwarded import Forwarded
from clika_runtime.sessions.results import TurnResult

RESULT_SUBTYPES = {
    "completed": "success",
    "max_turns": "error_max_turns",
    "vetoed": "error_vetoed",
    "error": "error",
}


@dataclass(frozen=True)
class RunResult:
    """How a tool-running loop on a session ended (see :class:`~clika_runtime.chat.tools.loop.LoopResult`).

    Read like a result message: ``result`` (the final text), ``subtype``
    (``success``, ``error_max_turns``, ``error_vetoed``, ``error``),
    ``num_turns`` (model calls), ``usage`` (tokens summed over them),
    ``tool_calls`` (calls run), ``tool_counts`` (per tool). The names agent
    clients read are there too: ``turns``, ``tool_call_count``, ``model``,
    ``run_status`` (``done``, ``pending``, ``incomplete``), ``limit``
    (``"maxTurns"`` when the bound stopped it), ``pending`` (the request a
    suspended tool made) and, in ``usage``, ``prompt_tokens`` /
    ``completion_tokens`` / ``total_tokens`` beside the runtime's own keys.
    """

    loop: LoopResult
    session_id: str
    messages: tuple[Mapping[str, Any], ...]
    model: str = ""
    pending: Any = None

    @property
    def result(self) -> str:
        return self.loop.reason if self.loop.status == "error" else self.loop.text

    @property
    def run_status(self) -> str:
        if self.pending is not None:
            return "pending"
        return "incomplete" if self.loop.status == "max_turns" else "done"

    @property
    def limit(self) -> str | None:
        return "maxTurns" if self.loop.status == "max_turns" else None

    @property
    def subtype(self) -> str:
        return RESULT_SUBTYPES[self.loop.status]

    @property
    def is_error(self) -> bool:
        return self.subtype != "success"

    # The loop's text, status and counts, under the runtime's names and the ones agent clients read.
    text = Forwarded[str]("loop")
    status = Forwarded[str]("loop")
    num_turns = Forwarded[int]("loop", "model_calls")
    turns = Forwarded[int]("loop", "model_calls")
    tool_calls = Forwarded[int]("loop", "num_tool_calls")
    tool_call_count = Forwarded[int]("loop", "num_tool_calls")
    tool_counts = Forwarded[dict[str, int]]("loop")
    outputs = Forwarded[tuple[ToolOutput, ...]]("loop")

    @property
    def usage(self) -> dict[str, int]:
        usage = {key: int(value) for key, value in self.loop.usage.items()}
        read, made = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
        return {**usage, "prompt_tokens": read, "completion_tokens": made, "total_tokens": read + made}

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
