"""The in-memory form every checkpoint reader produces and every family reads.

Readers (``clika_export.readers.hf`` for Hugging Face folders,
``clika_export.readers.gguf`` for GGUF files) turn a source into a
``Checkpoint``: architecture facts, tensors under Hugging Face names in Hugging
Face layout (a Linear weight is ``[out_features, in_features]``), the tokenizer
as ``tokenizers`` JSON, the chat template and generation defaults. Norm weights
are the multipliers applied (Gemma's ``1 + w``, as llama.cpp stores them), and
fused projections (Phi-3's ``qkv_proj``, ``gate_up_proj``) come split into the
llama names, so every family reads one layout. Tensors load
lazily so a large checkpoint never has to sit in memory twice.

A GGUF reader also offers each block-quantized tensor's original blocks
(``RawBlocks``), already in Hugging Face row order, so the quantizer can carry
them over exactly instead of dequantizing and quantizing again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clika_export.checkpoint_error import CheckpointError
from clika_runtime.contract.manifest import Architecture

_COUNTS = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)
_CONFIG_NAMES = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
}


_LAYER_PREFIX = re.compile(r"model\.layers\.(\d+)\.")


def check_layers_exist(arch: Architecture, tensor_names: Iterable[str], source: str) -> None:
    """The layer count must be the layers the weights hold (0..N-1), before anything is sized by it."""
    held = {int(match.group(1)) for name in tensor_names if (match := _LAYER_PREFIX.match(name))}
    if held != set(range(arch.num_layers)):
        raise CheckpointError(
            f"{source}: num_hidden_layers is {arch.num_layers}, but the weights hold {len(held)} layers"
        )


def check_architecture(arch: Architecture, source: str) -> None:
    """Every reader's architecture must describe a buildable model: sizes >= 1, finite scales > 0."""
    for name in _COUNTS:
        if getattr(arch, name) < 1:
            raise CheckpointError(
                f"{source}: {_CONFIG_NAMES.get(name, name)} must be at least 1, got {getattr(arch, name)}"
            )
    if arch.num_heads % arch.num_kv_heads:
        raise CheckpointError(
            f"{source}: {arch.num_heads} attention heads do not divide into {arch.num_kv_heads} KV heads"
        )
    for name in ("rms_norm_eps", "rope_theta"):
        value = getattr(arch, name)
        if not math.isfinite(value) or value <= 0:
            raise CheckpointError(f"{source}: {name} must be a finite number > 0, got {value}")
    if arch.rope_scaling is not None and not isinstance(arch.rope_scaling, dict):
        raise CheckpointError(f"{source}: rope_scaling must be an object, got {arch.rope_scaling!r}")


@dataclass(frozen=True)
class RawBlocks:
    """A tensor's original block-quantized bytes (GGUF), rows in HF order.

    ``data`` is ``uint8[rows, bytes_per_row]``; ``ggml_type`` is the GGUF type
    name ("Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q8_0", ...); ``shape`` the logical
    ``(rows, cols)`` float shape.
    """

    ggml_type: str
    data: np.ndarray
    shape: tuple[int, int]


@dataclass
class Checkpoint:
    architecture: Architecture
    # name -> loader returning float32 in HF layout; lazy on purpose.
    tensor_loaders: dict[str, Callable[[], np.ndarray]]
    tokenizer_json: str
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None
    add_bos_token: bool
    chat_template: str | None
    generation_defaults: dict[str, Any]
    source_name: str
    source_format: str  # "hf" | "gguf"
    source_sha256: str
    bos_token: str | None = None
    eos_token: str | None = None
    # name -> loader of the original quantized blocks (GGUF only).
    raw_loaders: dict[str, Callable[[], RawBlocks]] = field(default_factory=dict)
    # The architecture's settings in transformers' config.json vocabulary (a GGUF
    # reader maps its metadata onto it), for what a family reads beyond ``architecture``.
    config: dict[str, Any] = field(default_factory=dict)
    # How embeddings pool the hidden states, when the checkpoint says ("mean", "last", "cls").
    pooling: str | None = None

    def names(self) -> Iterator[str]:
        return iter(self.tensor_loaders)

    def tensor(self, name: str) -> np.ndarray:
        try:
            loader = self.tensor_loaders[name]
        except KeyError:
            raise CheckpointError(f"checkpoint has no tensor {name!r}") from None
        return self._load(name, loader)

    def raw(self, name: str) -> RawBlocks | None:
        loader = self.raw_loaders.get(name)
        return self._load(name, loader) if loader else None

    def _load(self, name: str, loader: Callable[[], Any]) -> Any:
        try:
            return loader()
        except CheckpointError:
            raise
        except Exception as exc:  # tensors load lazily: the checkpoint's bytes are read only here
            raise CheckpointError(
                f"{self.source_name}: tensor {name} could not be read ({type(exc).__name__}: {exc})"
            ) from None

    def has(self, name: str) -> bool:
        return name in self.tensor_loaders
