"""Rotary position tables (cos/sin caches): the one implementation, NumPy only.

The exporter calls it to build a graph and the runtime to compute the tables a
folder's graphs hold as placeholders (``clika_runtime.contract.rope_tables``), so both
get the same bits.

The tables hold ``a * cos(p * inv_freq)`` and ``a * sin(p * inv_freq)`` for
every position ``p`` of the context window, ``[context_window, rotary_dim / 2]``,
in the non-interleaved (``rotate_half``) layout Hugging Face models use;
``a`` is the rope type's attention factor (1 but for yarn and longrope), and
``rotary_dim < head_dim`` rotates only the leading dims (partial rotary).
Frequencies follow transformers' rope types; other types are refused by name
rather than approximated.

Two types depend on the sequence length in transformers; a static table
fixes them for the export's context window:

* ``dynamic`` (NTK) changes its base only past ``max_position_embeddings``,
  which no context window exceeds: its table is the default one.
* ``longrope`` uses its short factors up to ``original_max_position_embeddings``
  and its long ones beyond; the table takes the long factors when the context
  window exceeds the original one, as llama.cpp does (transformers switches
  per sequence: rows shorter than the original window then differ).

Everything is float32 like transformers, so positions far into the window
round the same way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

SUPPORTED_ROPE_TYPES = ("default", "dynamic", "linear", "llama3", "longrope", "yarn")

# Older names transformers still reads: early Phi-3 configs say "su" for longrope.
_ALIASES = {"su": "longrope"}


class RopeError(ValueError):
    """A rope type or scaling dict no table can be computed from (the message names it)."""


def rope_type(scaling: dict[str, Any] | None) -> str:
    if not scaling:
        return "default"
    kind = str(scaling.get("rope_type") or scaling.get("type") or "default")
    return _ALIASES.get(kind, kind)


def check_rope_type(scaling: dict[str, Any] | None) -> None:
    """Refuse a rope type without a table here, naming the ones there are."""
    kind = rope_type(scaling)
    if kind not in SUPPORTED_ROPE_TYPES:
        raise RopeError(
            f"rope scaling type {kind!r} is not supported (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
        )


def inverse_frequencies(
    rotary_dim: int, theta: float, scaling: dict[str, Any] | None, context_window: int = 0
) -> tuple[np.ndarray, float]:
    """``inv_freq[i] = theta ** (-2i / rotary_dim)`` adjusted by the scaling, and the attention factor."""
    check_rope_type(scaling)
    kind = rope_type(scaling)
    try:
        with np.errstate(all="ignore"):  # a bad value shows as a non-finite result, checked below
            inv_freq, factor = _by_type(kind, rotary_dim, theta, scaling, context_window)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        raise RopeError(f"rope scaling {kind!r} is missing or has a bad {exc}") from None
    if not (np.isfinite(inv_freq).all() and (inv_freq > 0).all() and math.isfinite(factor)):
        raise RopeError(
            f"rope scaling {kind!r} with theta {theta} gives non-finite or non-positive frequencies"
        )
    return inv_freq, factor


def _by_type(
    kind: str, rotary_dim: int, theta: float, scaling: dict[str, Any] | None, context_window: int
) -> tuple[np.ndarray, float]:
    inv_freq = _default(rotary_dim, theta)
    if kind in ("default", "dynamic"):
        return inv_freq, 1.0
    assert scaling is not None
    if kind == "linear":
        return (inv_freq / np.float32(scaling["factor"])).astype(np.float32), 1.0
    if kind == "llama3":
        return _llama3(inv_freq, scaling), 1.0
    if kind == "yarn":
        return _yarn(rotary_dim, theta, scaling)
    return _longrope(rotary_dim, theta, scaling, context_window)


def _default(rotary_dim: int, theta: float) -> np.ndarray:
    exponent = np.arange(0, rotary_dim, 2, dtype=np.int64).astype(np.float32) / rotary_dim
    return (1.0 / (np.float32(theta) ** exponent)).astype(np.float32)


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


def _yarn(dim: int, theta: float, scaling: dict[str, Any]) -> tuple[np.ndarray, float]:
    """YaRN: interpolated low frequencies, extrapolated high ones, a linear ramp between."""
    factor = float(scaling["factor"])
    original = float(scaling["original_max_position_embeddings"])

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = scaling.get("attention_factor")
    if attention is None:
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    fast, slow = float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1)

    def correction(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction(fast), correction(slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    pos_freqs = np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / dim)
    inv_freq = (1 / (factor * pos_freqs)) * (1 - extrapolation) + (1 / pos_freqs) * extrapolation
    return inv_freq.astype(np.float32), float(attention)


def _longrope(
    dim: int, theta: float, scaling: dict[str, Any], context_window: int
) -> tuple[np.ndarray, float]:
    """LongRoPE (Phi-3.5, Phi-4-mini): per-frequency factors, short or long by the context window."""
    original = int(scaling["original_max_position_embeddings"])
    factor = float(scaling["factor"])
    attention = scaling.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    factors = np.asarray(scaling["long_factor" if context_window > original else "short_factor"], np.float32)
    if factors.shape != (dim // 2,):
        raise ValueError(f"factor list of {factors.size} entries for {dim // 2} frequencies")
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim
    return (1.0 / (factors * np.float32(theta) ** exponent)).astype(np.float32), float(attention)


def cos_sin_caches(
    positions: int, rotary_dim: int, theta: float, scaling: dict[str, Any] | None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``[positions, rotary_dim / 2]`` float32 cos and sin tables (attention factor applied)."""
    inv_freq, factor = inverse_frequencies(rotary_dim, theta, scaling, positions)
    angles = np.outer(np.arange(positions, dtype=np.float32), inv_freq).astype(np.float32)
    cos = np.cos(angles)
    sin = np.sin(angles, out=angles)  # in place: two tables of memory, not five
    if factor != 1.0:
        cos *= np.float32(factor)
        sin *= np.float32(factor)
    return cos, sin
