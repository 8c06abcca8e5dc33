"""Token log-probabilities in OpenAI's two shapes: chat's ``logprobs.content`` entries and the
legacy completions' parallel lists."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from clika_runtime.engine.logprobs import TokenLogprob

TokenText = Callable[[int], str]


def chat_logprobs(entries: Sequence[TokenLogprob], token_text: TokenText) -> dict[str, Any]:
    """``{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}``."""
    return {"content": [_chat_entry(entry, token_text) for entry in entries], "refusal": None}


def _chat_entry(entry: TokenLogprob, token_text: TokenText) -> dict[str, Any]:
    return {
        **_token(entry.token_id, entry.logprob, token_text),
        "top_logprobs": [_token(token, logprob, token_text) for token, logprob in entry.top],
    }


def _token(token: int, logprob: float, token_text: TokenText) -> dict[str, Any]:
    text = token_text(token)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def completion_logprobs(
    entries: Sequence[TokenLogprob], token_text: TokenText, start: int = 0
) -> dict[str, Any]:
    """``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`` (offsets from ``start``)."""
    tokens = [token_text(entry.token_id) for entry in entries]
    offsets, at = [], start
    for text in tokens:
        offsets.append(at)
        at += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [entry.logprob for entry in entries],
        "top_logprobs": [{token_text(t): lp for t, lp in entry.top} for entry in entries],
        "text_offset": offsets,
    }
