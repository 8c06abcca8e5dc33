"""Rotary position tables for the export: ``clika_runtime.contract.rope``'s, with checkpoint errors.

The math lives in the runtime (``clika_runtime.contract.rope``, NumPy only), because a
model folder's graphs hold the tables as empty placeholders that the runtime
computes when it opens a session (``clika_runtime.contract.rope_tables``); this module is
the exporter's single entry point to it and turns a bad rope into a
``CheckpointError`` naming it.

Stored, they were 1.0-1.5% of a llama or qwen2 folder at the default context
cap (SmolLM2-135M int4: 2.1 of 141 MB; Qwen2.5-Coder-0.5B: 8.4 of 562 MB; 1.5B:
16.8 of 1,758 MB) and 17.7% of gemma-3-270m int4 (two ropes of 128 frequencies
at 32,768 positions: 67 of 379 MB). ``benchmarks/features/rope_tables.py``
measures both layouts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clika_export.checkpoint import CheckpointError
from clika_runtime.contract import rope
from clika_runtime.contract.rope import SUPPORTED_ROPE_TYPES, rope_type

__all__ = ["SUPPORTED_ROPE_TYPES", "check_rope_type", "cos_sin_caches", "inverse_frequencies", "rope_type"]


def check_rope_type(scaling: dict[str, Any] | None) -> None:
    """Refuse a rope type without a table, naming the ones there are."""
    try:
        rope.check_rope_type(scaling)
    except rope.RopeError as exc:
        raise CheckpointError(str(exc)) from None


def inverse_frequencies(
    rotary_dim: int, theta: float, scaling: dict[str, Any] | None, context_window: int = 0
) -> tuple[np.ndarray, float]:
    """``clika_runtime.contract.rope.inverse_frequencies``: the frequencies and the attention factor."""
    try:
        return rope.inverse_frequencies(rotary_dim, theta, scaling, context_window)
    except rope.RopeError as exc:
        raise CheckpointError(str(exc)) from None


def cos_sin_caches(
    positions: int, rotary_dim: int, theta: float, scaling: dict[str, Any] | None
) -> tuple[np.ndarray, np.ndarray]:
    """``clika_runtime.contract.rope.cos_sin_caches``: the ``[positions, rotary_dim / 2]`` float32 tables."""
    try:
        return rope.cos_sin_caches(positions, rotary_dim, theta, scaling)
    except rope.RopeError as exc:
        raise CheckpointError(str(exc)) from None
