"""Draft tokens for speculative decoding, looked up in the sequence's own history.

Prompt lookup (n-gram) decoding: when the last few tokens already occurred
earlier in the prompt or the reply, the tokens that followed them then are a
cheap guess at what follows now. One step runs the sequence's pending token
plus the guess and keeps the longest prefix the model itself would have
picked greedily, plus the model's own next token; a reply is the one plain
greedy decoding gives, only fewer steps long when guesses hold (code edits,
quoting, summaries, structured output). Up to rounding: a step of several
tokens runs ONNX Runtime's batched kernels, and with int4/int8 weights their
logits differ from the one-token path's by ~1% of the logit range (SmolLM2
int4), enough to flip a near-tie now and then, as in other runtimes.
"""

from __future__ import annotations

import numpy as np

# Longest and shortest n-gram matched: a single repeated token guesses too often wrong.
MAX_NGRAM = 3
MIN_NGRAM = 2


def propose_draft(history: list[int], max_tokens: int) -> list[int]:
    """Up to ``max_tokens`` tokens that followed the latest earlier occurrence of ``history``'s tail.

    Longer tails are tried first; no earlier occurrence gives no draft.
    """
    if max_tokens < 1 or len(history) <= MIN_NGRAM:
        return []
    tokens = np.asarray(history, dtype=np.int64)
    for n in range(min(MAX_NGRAM, len(tokens) - 1), MIN_NGRAM - 1, -1):
        tail = tokens[-n:]
        # Windows starting before the tail itself, each followed by at least one token.
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start : start + max_tokens].tolist()
    return []
