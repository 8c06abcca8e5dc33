"""Foundry Local's one error type, ``FoundryLocalError``, over the runtime's Python exceptions.

Every failure of the Foundry adapter is a :class:`FoundryLocalError`, so code written for Foundry
Local catches one type; each kind is also the Python exception the runtime raised for it, so
``except ValueError`` (bad input) or ``except RunCancelled`` (a stopped request) still works.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from clika_runtime.engine.errors import GenerationError
from clika_runtime.sessions.results import RunCancelled


class FoundryLocalError(Exception):
    """Any failure of a Foundry Local session."""


class InvalidRequestError(FoundryLocalError, ValueError):
    """A request, item or option the model cannot take (named in the message)."""


class RequestCancelledError(FoundryLocalError, RunCancelled):
    """A request stopped before its end (its session closed, its queue aborted, a newer request)."""


class GenerationFailedError(FoundryLocalError, RuntimeError):
    """The model failed while generating."""


@contextlib.contextmanager
def foundry_errors() -> Iterator[None]:
    """Raise the runtime's exceptions raised inside as their :class:`FoundryLocalError` kinds."""
    try:
        yield
    except FoundryLocalError:
        raise
    except RunCancelled as error:
        raise RequestCancelledError(str(error)) from error
    except (ValueError, TypeError) as error:
        raise InvalidRequestError(str(error)) from error
    except GenerationError as error:
        raise GenerationFailedError(str(error)) from error
