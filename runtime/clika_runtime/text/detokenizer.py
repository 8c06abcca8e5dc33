"""Turn a growing list of token ids into text pieces, never splitting a character.

The incremental decode keeps two offsets into the ids: text before
``read_offset`` has been emitted, and decoding restarts from ``prefix_offset``
(a few tokens back) so decoders that look at neighbouring tokens (a
SentencePiece leading space, a byte-level merge) see the same context a whole
decode would. A piece is emitted only once the new text no longer ends in an
incomplete UTF-8 sequence (decoded as U+FFFD); ``flush`` emits what is left at
the end of a reply.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

# Prompt tokens kept as context for the first reply tokens (a leading space, a merge).
PROMPT_CONTEXT_TOKENS = 5
_INCOMPLETE = "\ufffd"


class _Decodes(Protocol):
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...


class StreamingDetokenizer:
    """Incremental decode of one reply; ``push`` returns the text a token completes ("" if none yet)."""

    __slots__ = ("_tokenizer", "_skip", "_ids", "_prefix_offset", "_read_offset", "_prefix_text", "text")

    def __init__(
        self, tokenizer: _Decodes, *, skip_special_tokens: bool = True, prompt_ids: Iterable[int] = ()
    ) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        context = list(prompt_ids)[-PROMPT_CONTEXT_TOKENS:]
        self._ids: list[int] = context
        self._prefix_offset = 0
        self._read_offset = len(context)
        self._prefix_text = self._decode(context)
        self.text = ""  # everything emitted so far

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes."""
        self._ids.append(token_id)
        new_text = self._decode(self._ids[self._prefix_offset :])
        if len(new_text) <= len(self._prefix_text) or new_text.endswith(_INCOMPLETE):
            return ""
        piece = new_text[len(self._prefix_text) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        self._prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        self.text += piece
        return piece

    def push_many(self, token_ids: Iterable[int]) -> str:
        return "".join(self.push(t) for t in token_ids)

    def flush(self) -> str:
        """The text still held back (an incomplete character at the end becomes U+FFFD)."""
        if self._read_offset == len(self._ids):
            return ""
        new_text = self._decode(self._ids[self._prefix_offset :])
        piece = new_text[len(self._prefix_text) :] if len(new_text) > len(self._prefix_text) else ""
        self._prefix_offset = self._read_offset = len(self._ids)
        self._prefix_text = ""
        self.text += piece
        return piece
