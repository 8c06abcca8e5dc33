"""How one chat reply ended: its text, reasoning, tool calls and the engine's report."""

from __future__ import annotations

from dataclasses import dataclass

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.engine.report import GenerationReport


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

    @property
    def prompt_tokens(self) -> int:
        return self.report.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self.report.completion_tokens

    @property
    def cached_tokens(self) -> int:
        return self.report.cached_tokens

    @property
    def time_to_first_token_s(self) -> float | None:
        return self.report.time_to_first_token_s

    @property
    def decode_tokens_per_s(self) -> float | None:
        return self.report.decode_tokens_per_s

    @property
    def draft_tokens(self) -> int:
        return self.report.draft_tokens

    @property
    def accepted_draft_tokens(self) -> int:
        return self.report.accepted_draft_tokens
