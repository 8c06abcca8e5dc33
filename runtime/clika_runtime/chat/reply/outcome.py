"""How one chat reply ended: its text, reasoning, tool calls and the engine's report."""

from __future__ import annotations

from dataclasses import dataclass

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.engine.report import GenerationReport
from clika_runtime.forwarded import Forwarded


@dataclass(frozen=True)
class ChatOutcome:
    """How one chat reply ended: its text, reasoning, tool calls and the engine's report.

    ``finish`` is "tool_calls" when the reply called tools, else the report's
    finish reason.
    """

    text: str
    report: GenerationReport
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def finish(self) -> str:
        return "tool_calls" if self.tool_calls else self.report.finish_reason

    @property
    def finish_reason(self) -> str:
        return self.finish

    # The report's figures, read off the outcome as off a report.
    prompt_tokens = Forwarded[int]("report")
    completion_tokens = Forwarded[int]("report")
    cached_tokens = Forwarded[int]("report")
    time_to_first_token_s = Forwarded[float | None]("report")
    decode_tokens_per_s = Forwarded[float | None]("report")
    draft_tokens = Forwarded[int]("report")
    accepted_draft_tokens = Forwarded[int]("report")
