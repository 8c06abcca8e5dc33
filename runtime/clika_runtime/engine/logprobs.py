"""Log-probabilities of the tokens a step picked, and of their most likely alternatives.

Read from the model's raw logits (before temperature, penalties or a grammar's mask), the way
OpenAI's and vLLM's logprobs are: what the model itself thought of the token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenLogprob:
    """One picked token's log-probability, and ``top`` alternatives as ``(token id, logprob)``."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def log_softmax(row: np.ndarray) -> np.ndarray:
    """``row`` (one position's logits) as log-probabilities, in float64 for the small ones."""
    values = row.astype(np.float64)
    shifted = values - values.max()
    return shifted - np.log(np.exp(shifted).sum())


def token_logprob(logprobs: np.ndarray, token: int, top: int) -> TokenLogprob:
    """The entry of ``token`` under ``logprobs`` (one position), with its ``top`` alternatives."""
    alternatives: tuple[tuple[int, float], ...] = ()
    if top:
        best = np.argpartition(-logprobs, top - 1)[:top]
        best = best[np.argsort(-logprobs[best], kind="stable")]
        alternatives = tuple((int(i), float(logprobs[i])) for i in best)
    return TokenLogprob(int(token), float(logprobs[token]), alternatives)
