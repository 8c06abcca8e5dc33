"""Rotary position tables (cos/sin caches) for GroupQueryAttention's ``do_rotary``.

The tables hold ``cos(p * inv_freq)`` and ``sin(p * inv_freq)`` for every
position ``p`` of the context window, ``[context_window, head_dim / 2]``, in
the non-interleaved (``rotate_half``) layout Hugging Face llama/qwen2 use.
Frequencies follow transformers' rope types: ``default``, ``linear`` and
``llama3``; other types are refused by name rather than approximated.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from clika_export.checkpoint import CheckpointError

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def rope_type(scaling: dict[str, Any] | None) -> str:
    if not scaling:
        return "default"
    return str(scaling.get("rope_type") or scaling.get("type") or "default")


def inverse_frequencies(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> np.ndarray:
    """``inv_freq[i] = theta ** (-2i / head_dim)``, adjusted by the rope scaling."""
    # float32 like transformers, so positions far into the window round the same way.
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim
    inv_freq = (1.0 / (np.float32(theta) ** exponent)).astype(np.float32)
    kind = rope_type(scaling)
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return (inv_freq / np.float32(scaling["factor"])).astype(np.float32)
    if kind == "llama3":
        return _llama3(inv_freq, scaling)
    raise CheckpointError(
        f"rope scaling type {kind!r} is not supported (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
    )


def _llama3(inv_freq: np.ndarray, scaling: dict[str, Any]) -> np.ndarray:
    """Llama 3.1's band-wise scaling: long wavelengths divided, short kept, blended between."""
    factor = float(scaling["factor"])
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    original = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return np.where(medium, blended, scaled).astype(np.float32)


def cos_sin_caches(
    positions: int, head_dim: int, theta: float, scaling: dict[str, Any] | None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``[positions, head_dim / 2]`` float32 cos and sin tables."""
    inv_freq = inverse_frequencies(head_dim, theta, scaling)
    angles = np.outer(np.arange(positions, dtype=np.float32), inv_freq)
    cos = np.cos(angles)
    return cos, np.sin(angles, out=angles)  # in place: two tables of memory, not five
