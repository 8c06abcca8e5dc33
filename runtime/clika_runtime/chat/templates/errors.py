"""The error a chat template raises, whatever went wrong in it."""

from __future__ import annotations


class TemplateError(ValueError):
    """A chat template that does not compile or fails while rendering.

    ``lineno`` is the template line (None when unknown) and ``reason`` what went wrong.
    """

    def __init__(self, reason: str, lineno: int | None = None, name: str = "chat template") -> None:
        where = f"{name} line {lineno}" if lineno else name
        super().__init__(f"{where}: {reason}")
        self.reason = reason
        self.lineno = lineno


class TemplateLimitError(TemplateError):
    """A template that went past a render limit (time, output length or memory)."""
