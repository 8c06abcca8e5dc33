"""Bounded work before admission: refuse a prompt that cannot fit by its length alone, tokenize the rest in few threads.

No token of a vocabulary spans more bytes than its longest entry, so a
prompt of B UTF-8 bytes has at least ``B / longest`` tokens; when that
already exceeds the context window the prompt is refused without
tokenizing it (a multi-megabyte body costs a length check, not seconds of
tokenizer time). The bound holds only when the tokenizer's normalizer never
shortens the text's UTF-8 (none at all, or only prepending and replacing fixed
strings by ones at least as long, as sentencepiece models replacing a space by U+2581
does); any other normalizer skips it.

Prompts that pass are tokenized at most ``MAX_TOKENIZING`` at a time (each
on the caller's worker thread, which releases the GIL while the tokenizer
runs), so a burst of large bodies queues here instead of taking every core
from the event loop and the engine.
"""

from __future__ import annotations

import json
import threading
from functools import cached_property

from clika_runtime.server.errors import bad_request
from clika_runtime.text.tokenizer import Tokenizer

MAX_TOKENIZING = 2


class PromptBound:
    """The length check and the tokenizing gate for one model (``window``: its context in tokens)."""

    def __init__(self, tokenizer: Tokenizer, window: int) -> None:
        self.tokenizer = tokenizer
        self.window = window
        self._gate = threading.BoundedSemaphore(MAX_TOKENIZING)

    @cached_property
    def longest_token_bytes(self) -> int | None:
        """The most UTF-8 bytes one vocabulary entry spells (None: the bound does not apply)."""
        inner = self.tokenizer.inner
        if inner.normalizer is not None and not _never_shortens(_normalizer_json(inner.normalizer)):
            return None
        return max((len(token.encode("utf-8", "replace")) for token in inner.get_vocab(True)), default=1)

    def encode(self, text: str, param: str) -> list[int]:
        """The ids of ``text`` (400 context_length_exceeded when its length alone rules it out)."""
        self.check(text, param)
        with self._gate:
            return self.tokenizer.encode(text)

    def check(self, text: str, param: str) -> None:
        longest = self.longest_token_bytes
        if longest is None or 4 * len(text) <= self.window * longest:  # a character is at most 4 bytes
            return
        size = len(text.encode("utf-8"))
        at_least = -(-size // longest)
        if at_least > self.window:
            raise bad_request(
                f"the prompt has at least {at_least} tokens ({size} bytes, and no token of this model spans "
                f"more than {longest}); the context window is {self.window} tokens",
                param,
                "context_length_exceeded",
            )


def _normalizer_json(normalizer: object) -> dict | None:
    """The normalizer's tokenizer.json form, from its pickled state: serializing the whole tokenizer
    instead holds the GIL for seconds on a large vocabulary (gemma's: 3.7 s)."""
    try:
        state = json.loads(normalizer.__getstate__())  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return {"type": "unknown"}  # unreadable: treated as one that may shorten the text
    return state if isinstance(state, dict) else {"type": "unknown"}


def _never_shortens(normalizer: dict | None) -> bool:
    """Whether ``normalizer`` (its tokenizer.json form) leaves B bytes of text at least B bytes long."""
    if normalizer is None:
        return True
    kind = normalizer.get("type")
    if kind == "Sequence":
        return all(_never_shortens(part) for part in normalizer.get("normalizers") or ())
    if kind == "Prepend":
        return True
    if kind == "Replace":
        pattern = (normalizer.get("pattern") or {}).get("String")  # a regex may match any length
        content = normalizer.get("content")
        return (
            isinstance(pattern, str)
            and isinstance(content, str)
            and 0 < len(pattern.encode("utf-8")) <= len(content.encode("utf-8"))
        )
    return False  # NFC, NFKC, Lowercase, Strip ... can shorten the text
