"""One request's place in its grammar: which tokens may come next, and what it has read.

A matcher follows the reply token by token. When the grammar is complete
(``finished``) the request ends with finish reason ``stop``; a token the
grammar refuses (only possible when a caller forces one) leaves it in error,
which ends the request with finish reason ``grammar`` and the engine's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clika_runtime.grammar.constraint import Constraint, parser_limits
from clika_runtime.grammar.constraint import _engine as grammar_engine


class GrammarMatcher:
    """The grammar state of one reply."""

    def __init__(self, constraint: Constraint, vocabulary: Any) -> None:
        self.constraint = constraint
        self._matcher = grammar_engine().LLMatcher(
            vocabulary, constraint.grammar, log_level=0, limits=parser_limits()
        )
        if self._matcher.is_error():
            raise ValueError(f"the grammar failed to start: {self._matcher.get_error()}")

    @property
    def inner(self) -> Any:
        return self._matcher

    @property
    def finished(self) -> bool:
        """The grammar allows nothing more (the reply is complete), or it is in error."""
        return self._matcher.is_stopped() or self._matcher.is_error()

    @property
    def error(self) -> str:
        return self._matcher.get_error() if self._matcher.is_error() else ""

    def accept(self, token: int) -> bool:
        """Advance past ``token``; False (and in error) when the grammar refuses it."""
        return bool(self._matcher.consume_token(int(token)))

    def accepted_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` (a draft) the grammar allows from here, without advancing."""
        return int(self._matcher.validate_tokens([int(token) for token in tokens]))

    def is_accepting(self) -> bool:
        return bool(self._matcher.is_accepting())
