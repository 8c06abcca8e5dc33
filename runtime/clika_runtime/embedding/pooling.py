"""Pooling one input's hidden states into one vector, and the vectors' normalization.

``mean`` averages every token's final hidden state; ``last`` takes the last
token's (Qwen3-Embedding and other decoder embedders, whose tokenizer closes
the input with EOS); ``cls`` the first. The vector is then L2-normalized;
``dimensions`` keeps its first components and normalizes again, as OpenAI's
API does for Matryoshka-trained models.
"""

from __future__ import annotations

import numpy as np

POOLING_MODES = ("mean", "last", "cls")
# Below this norm a vector has no direction worth keeping: it stays as it is.
_TINY_NORM = 1e-12


def pool(hidden: np.ndarray, mode: str) -> np.ndarray:
    """One vector ``[H]`` from one input's hidden states ``[tokens, H]``."""
    if mode == "mean":
        return hidden.mean(axis=0, dtype=np.float64).astype(np.float32)
    if mode == "last":
        return hidden[-1].copy()
    if mode == "cls":
        return hidden[0].copy()
    raise ValueError(f"pooling {mode!r} is not one of {', '.join(POOLING_MODES)}")


def normalized(vectors: np.ndarray, dimensions: int | None = None) -> np.ndarray:
    """``vectors [N, H]`` cut to their first ``dimensions`` components (None: all), each of norm 1."""
    if dimensions is not None:
        vectors = vectors[:, :dimensions]
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
    return (vectors / np.maximum(norms, _TINY_NORM)).astype(np.float32)
