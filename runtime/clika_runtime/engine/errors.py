"""The engine's refusals: a full queue, a closed engine (capacity results, not bugs), a refused turn."""

from __future__ import annotations

import functools


class QueueFullError(RuntimeError):
    """The engine's waiting queue is full; the request was not accepted (nothing else changed)."""


class EngineClosedError(RuntimeError):
    """The engine was closed; it takes no more requests."""


class GenerationError(RuntimeError):
    """The model failed while it made a reply (an engine step raised): no caller should read the
    text made until then as the whole reply. ``report`` says what it made and the error."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


# A prompt longer than the context window allows (OpenAI's error code for it).
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


class TurnError(ValueError):
    """A turn refused for its input, typed so that no front end reads the message to classify it.

    ``field`` names the part at fault (a decode option's name, "messages", "tools",
    "tool_choice"; None: the prompt as a whole), ``code`` a machine-readable reason
    (``CONTEXT_LENGTH_EXCEEDED``) or None, and ``context`` what the turn was doing when it
    failed ("the images cannot be used"), for a front end that words the whole request;
    the message itself stays the problem's own words.
    """

    def __init__(
        self, message: str, *, field: str | None = None, code: str | None = None, context: str | None = None
    ) -> None:
        Exception.__init__(self, message)  # not the next class's own: a TemplateError's adds a prefix
        self.field = field
        self.code = code
        self.context = context


def as_turn_error(cause: ValueError, *, field: str | None, context: str | None = None) -> TurnError:
    """``cause`` as a :class:`TurnError` naming ``field`` (its code kept when it had one) that is
    still an instance of its own class, with its attributes: a caller catching a TemplateError
    or a ManifestError around a turn still catches it, with the same message."""
    error = _turn_kind(type(cause))(
        str(cause), field=field, code=getattr(cause, "code", None), context=context
    )
    error.__dict__.update({k: v for k, v in vars(cause).items() if k not in ("field", "code", "context")})
    return error


@functools.cache
def _turn_kind(kind: type[ValueError]) -> type[TurnError]:
    if issubclass(kind, TurnError):
        return kind
    return type(f"Turn{kind.__name__}", (TurnError, kind), {"__module__": kind.__module__})
