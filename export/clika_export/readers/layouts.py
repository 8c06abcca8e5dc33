"""Tensor layout adaptations the readers share: fused projections split, Gemma's norm shift.

Every family reads the llama layout (``q_proj``/``k_proj``/``v_proj``,
``gate_proj``/``up_proj``, norm weights as the multipliers applied), so a
reader presents Phi-3's fused ``qkv_proj`` and ``gate_up_proj`` as row slices
(lazy, and a row slice never cuts through a GGUF quantization block) and adds
Gemma's ``+ 1`` to the norm weights of Hugging Face checkpoints (llama.cpp's
converter has already added it to a GGUF's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from clika_export.checkpoint import CheckpointError, RawBlocks

T = TypeVar("T", np.ndarray, RawBlocks)

# Families whose HF norm weights hold ``w`` of ``x * (1 + w)``.
SHIFTED_NORM_FAMILIES = ("gemma2", "gemma3")


def row_slices(
    load: Callable[[], T], names: Sequence[str], rows: Sequence[int], source: str
) -> dict[str, Callable[[], T]]:
    """Loaders of consecutive row blocks of one fused tensor, ``rows[i]`` rows named ``names[i]``."""
    bounds = np.cumsum([0, *rows])

    def part(index: int) -> Callable[[], T]:
        def slice_rows() -> T:
            whole = load()
            data = whole.data if isinstance(whole, RawBlocks) else whole
            if data.shape[0] != bounds[-1]:
                raise CheckpointError(
                    f"{source} has {data.shape[0]} rows, the architecture implies {bounds[-1]}"
                )
            piece = np.ascontiguousarray(data[bounds[index] : bounds[index + 1]])
            if isinstance(whole, RawBlocks):
                return RawBlocks(whole.ggml_type, piece, (int(rows[index]), whole.shape[1]))  # type: ignore[return-value]
            return piece  # type: ignore[return-value]

        return slice_rows

    return {name: part(i) for i, name in enumerate(names)}


def shifted_norm(load: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    """A Gemma norm weight as the multiplier it applies: ``1 + w``."""

    def load_shifted() -> np.ndarray:
        return (np.asarray(load(), dtype=np.float32) + np.float32(1.0)).astype(np.float32)

    return load_shifted


def fused_phi3_names(prefix: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The split names of one Phi-3 layer's fused attention and MLP projections."""
    attn = tuple(f"{prefix}.self_attn.{p}_proj.weight" for p in "qkv")
    mlp = (f"{prefix}.mlp.gate_proj.weight", f"{prefix}.mlp.up_proj.weight")
    return attn, mlp
