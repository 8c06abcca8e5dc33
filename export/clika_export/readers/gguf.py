"""Read a GGUF file into a ``Checkpoint`` (the families of ``readers.gguf_families``).

Tensors come out under Hugging Face names in Hugging Face layout (float32,
Linear weights ``[out, in]``), dequantized lazily from the memory-mapped file
(``clika_export.readers.gguf_file``) with ``gguf.quants.dequantize``. llama.cpp stores the Q and K projections of
``llama`` models (and granite, smollm3) with their rows permuted for its rotary
layout; that is undone here, for the float tensors and for the raw quantized
blocks alike (a row permutation never cuts through a quantization block).
Phi-3's fused ``attn_qkv`` and ``ffn_up`` (gate and up) are split into the
llama names the same way, by rows.

The file is untrusted: its header counts, metadata types and ranges, tensor
types, shapes and extents are all checked, and each problem raises
``CheckpointError`` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize

from clika_export.checkpoint import (
    Checkpoint,
    CheckpointError,
    RawBlocks,
    check_architecture,
    check_layers_exist,
)
from clika_export.readers.gguf_families import (
    BUILT_AS,
    PERMUTED_FAMILIES,
    ROPE_FACTOR_TENSORS,
    SUPPORTED_FAMILIES,
    family_config,
    layer_names,
    layer_shapes,
)
from clika_export.readers.gguf_file import GGUFFile, GGUFMetadata, TensorInfo
from clika_export.readers.layouts import fused_phi3_names, row_slices
from clika_export.readers.pooling import gguf_pooling
from clika_export.readers.regular_file import file_sha256
from clika_export.tokenizer_gguf import tokenizer_from_metadata
from clika_runtime.contract.manifest import Architecture

_FLOAT_TYPES = {"F32", "F16", "BF16"}
_BLOCK_TYPES = set("Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS".split())
SUPPORTED_TENSOR_TYPES = tuple(sorted(_FLOAT_TYPES | _BLOCK_TYPES))

# GGUF tensor name (per layer: blk.{i}.<part>) -> Hugging Face name.
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_PATTERN = re.compile(r"blk\.(\d+)\.(.+)")


def read_gguf(path: str | Path) -> Checkpoint:
    """Read a GGUF file of a supported family into a lazily loading ``Checkpoint``."""
    path = Path(path)
    gguf = GGUFFile(path)
    meta = GGUFMetadata(gguf)
    family = meta.string("general.architecture")
    if family not in SUPPORTED_FAMILIES:
        raise CheckpointError(
            f"{path.name}: model family {family!r} is not supported; supported families: "
            f"{', '.join(SUPPORTED_FAMILIES)}"
        )
    tokenizer = tokenizer_from_metadata(meta)
    tensors = _tensors_by_hf_name(gguf, family)
    factors = {ROPE_FACTOR_TENSORS[n]: tensors.pop(n) for n in list(tensors) if n in ROPE_FACTOR_TENSORS}
    rotary = _rotary_dim(meta, family)
    arch = _architecture(meta, family, tokenizer.vocab_size, tensors, _longrope(gguf, meta, family, factors))
    check_architecture(arch, path.name)
    check_layers_exist(arch, tensors, path.name)
    _check_tensors(tensors, arch, path.name)
    permute = family in PERMUTED_FAMILIES
    floats = {name: _float_loader(gguf, t, name, arch, permute) for name, t in tensors.items()}
    raws = {
        name: _raw_loader(gguf, t, name, arch, permute)
        for name, t in tensors.items()
        if t.is_block_quantized and len(t.shape) == 2
    }
    return Checkpoint(
        architecture=arch,
        tensor_loaders=_split_fused(floats, arch),
        raw_loaders=_split_fused(raws, arch),
        tokenizer_json=tokenizer.tokenizer_json,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_ids=tokenizer.eos_token_ids,
        pad_token_id=tokenizer.pad_token_id,
        add_bos_token=tokenizer.add_bos_token,
        chat_template=tokenizer.chat_template,
        generation_defaults={},  # GGUF stores no sampling defaults
        source_name=path.name,
        source_format="gguf",
        source_sha256=file_sha256(path),
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        config=family_config(meta, family, arch, rotary),
        pooling=gguf_pooling(meta, family),
    )


# -- names ------------------------------------------------------------------------


def _tensors_by_hf_name(gguf: GGUFFile, family: str) -> dict[str, TensorInfo]:
    tensors = {}
    for tensor in gguf.tensors.values():
        if tensor.type_name not in SUPPORTED_TENSOR_TYPES:
            raise CheckpointError(
                f"{gguf.name}: tensor {tensor.name} has tensor type {tensor.type_name}, which is not supported "
                f"(supported: {', '.join(SUPPORTED_TENSOR_TYPES)})"
            )
        tensors[_hf_name(tensor.name, gguf.name, family)] = tensor
    return tensors


def _hf_name(gguf_name: str, source: str, family: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    if family == "phi3" and gguf_name in ROPE_FACTOR_TENSORS:
        return gguf_name
    names = layer_names(family)
    match = _LAYER_PATTERN.fullmatch(gguf_name)
    if match and match.group(2) in names:
        return f"model.layers.{int(match.group(1))}.{names[match.group(2)]}"
    raise CheckpointError(f"{source}: tensor {gguf_name!r} has no Hugging Face counterpart in this reader")


# -- architecture ----------------------------------------------------------------


def _architecture(
    meta: GGUFMetadata, family: str, vocab_size: int, tensors: dict[str, TensorInfo], longrope: dict | None
) -> Architecture:
    key = f"{family}."
    if meta.integer(key + "expert_count", 0, high=1 << 16) > 0:
        raise CheckpointError(f"{meta.source}: mixture-of-experts {family} models are not supported")
    hidden = meta.integer(key + "embedding_length", low=1, high=1 << 17)
    heads = meta.integer(key + "attention.head_count", low=1, high=1 << 12)
    kv_heads = meta.integer(key + "attention.head_count_kv", heads, low=1, high=heads)
    if heads % kv_heads:
        raise CheckpointError(
            f"{meta.source}: {heads} attention heads do not split into {kv_heads} KV groups"
        )
    head_dim = _head_dim(meta, key, hidden, heads, partial_rotary=family == "phi3")
    return Architecture(
        family=BUILT_AS.get(family, family),
        num_layers=meta.integer(key + "block_count", low=1, high=1 << 10),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=meta.integer(key + "feed_forward_length", low=1, high=1 << 20),
        vocab_size=vocab_size,
        rms_norm_eps=meta.number(key + "attention.layer_norm_rms_epsilon", 1e-5, low=1e-12, high=0.1),
        rope_theta=meta.number(key + "rope.freq_base", 10000.0, low=1.0, high=1e12),
        max_position_embeddings=meta.integer(key + "context_length", low=1, high=1 << 24),
        tie_word_embeddings="lm_head.weight" not in tensors,
        attention_bias="model.layers.0.self_attn.q_proj.bias" in tensors,
        rope_scaling=longrope or _rope_scaling(meta, key),
    )


def _head_dim(meta: GGUFMetadata, key: str, hidden: int, heads: int, *, partial_rotary: bool) -> int:
    if meta.has(key + "attention.key_length"):
        head_dim = meta.integer(key + "attention.key_length", low=1, high=1 << 12)
        if meta.integer(key + "attention.value_length", head_dim, low=1, high=1 << 12) != head_dim:
            raise CheckpointError(f"{meta.source}: different key and value head sizes are not supported")
    elif hidden % heads:
        raise CheckpointError(f"{meta.source}: hidden size {hidden} is not a multiple of {heads} heads")
    else:
        head_dim = hidden // heads
    rotary = meta.integer(key + "rope.dimension_count", head_dim, low=1, high=1 << 12)
    if rotary != head_dim and not (partial_rotary and rotary < head_dim):
        raise CheckpointError(
            f"{meta.source}: partial rotary embeddings ({rotary} of {head_dim} dims) are not supported"
        )
    return head_dim


def _rotary_dim(meta: GGUFMetadata, family: str) -> int:
    key = f"{family}."
    head_dim = meta.integer(key + "attention.key_length", 0, low=0, high=1 << 12) or (
        meta.integer(key + "embedding_length", low=1, high=1 << 17)
        // meta.integer(key + "attention.head_count", low=1, high=1 << 12)
    )
    return meta.integer(key + "rope.dimension_count", head_dim, low=1, high=1 << 12)


def _longrope(gguf: GGUFFile, meta: GGUFMetadata, family: str, factors: dict[str, TensorInfo]) -> dict | None:
    """Phi-3's longrope scaling, from its factor tensors and the original context length."""
    if not factors:
        return None
    key = f"{family}."
    if set(factors) != {"long_factor", "short_factor"}:
        raise CheckpointError(f"{meta.source}: longrope needs both rope_factors_long and rope_factors_short")
    half = _rotary_dim(meta, family) // 2
    scaling: dict = {"rope_type": "longrope"}
    for name, tensor in factors.items():
        values = np.array(dequantize(gguf.data(tensor), tensor.ggml_type), dtype=np.float32).reshape(-1)
        if values.shape != (half,) or not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise CheckpointError(f"{meta.source}: {tensor.name} must hold {half} positive factors")
        scaling[name] = values.tolist()
    context = meta.integer(key + "context_length", low=1, high=1 << 24)
    original = meta.integer(key + "rope.scaling.original_context_length", context, low=1, high=1 << 24)
    scaling["original_max_position_embeddings"] = original
    scaling["factor"] = context / original
    if meta.has(key + "rope.scaling.attn_factor"):
        scaling["attention_factor"] = meta.number(key + "rope.scaling.attn_factor", low=1e-6, high=1e6)
    return scaling


def _rope_scaling(meta: GGUFMetadata, key: str) -> dict | None:
    kind = meta.string(key + "rope.scaling.type", "none", max_chars=64)
    if kind == "none":
        return None
    scaling: dict = {"rope_type": kind}
    if meta.has(key + "rope.scaling.factor"):
        scaling["factor"] = meta.number(key + "rope.scaling.factor", low=1e-6, high=1e6)
    if meta.has(key + "rope.scaling.original_context_length"):
        scaling["original_max_position_embeddings"] = meta.integer(
            key + "rope.scaling.original_context_length", low=1, high=1 << 24
        )
    if meta.has(key + "rope.scaling.attn_factor"):
        scaling["attention_factor"] = meta.number(key + "rope.scaling.attn_factor", low=1e-6, high=1e6)
    return scaling


# -- tensor checks -----------------------------------------------------------------


def expected_shapes(arch: Architecture) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint of this architecture must have, with its HF shape (fused ones unsplit)."""
    hidden = arch.hidden_size
    shapes = {"model.embed_tokens.weight": (arch.vocab_size, hidden), "model.norm.weight": (hidden,)}
    if not arch.tie_word_embeddings:
        shapes["lm_head.weight"] = (arch.vocab_size, hidden)
    per_layer = layer_shapes(arch.family, arch)
    for i in range(arch.num_layers):
        shapes |= {f"model.layers.{i}.{suffix}": shape for suffix, shape in per_layer.items()}
    return shapes


def _split_fused(loaders: dict, arch: Architecture) -> dict:
    """Phi-3's fused projections as the llama names (row slices)."""
    if arch.family != "phi3":
        return loaders
    q, kv, inter = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim, arch.intermediate_size
    out = {}
    for name, load in loaders.items():
        attn, mlp = fused_phi3_names(name.rsplit(".", 3)[0])
        if name.endswith(".self_attn.qkv_proj.weight"):
            out.update(row_slices(load, attn, (q, kv, kv), name))
        elif name.endswith(".mlp.gate_up_proj.weight"):
            out.update(row_slices(load, mlp, (inter, inter), name))
        else:
            out[name] = load
    return out


def _check_tensors(tensors: dict[str, TensorInfo], arch: Architecture, source: str) -> None:
    expected = expected_shapes(arch)
    missing = [name for name in expected if name not in tensors]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise CheckpointError(f"{source}: missing tensor {', '.join(missing[:3])}{more}")
    for name, tensor in tensors.items():
        if name not in expected:
            raise CheckpointError(f"{source}: unexpected tensor {tensor.name} ({name}) for this architecture")
        if tensor.shape != expected[name]:
            raise CheckpointError(
                f"{source}: tensor {tensor.name} has shape {tensor.shape}, the metadata implies {expected[name]}"
            )


# -- loaders ---------------------------------------------------------------------


def _float_loader(
    gguf: GGUFFile, tensor: TensorInfo, name: str, arch: Architecture, permute: bool
) -> Callable[[], np.ndarray]:
    heads = _permutation_heads(name, arch) if permute else None

    def load() -> np.ndarray:
        values = dequantize(gguf.data(tensor), tensor.ggml_type)
        values = np.array(values, dtype=np.float32).reshape(tensor.shape)
        return _unpermute_rows(values, heads) if heads else values

    return load


def _raw_loader(
    gguf: GGUFFile, tensor: TensorInfo, name: str, arch: Architecture, permute: bool
) -> Callable[[], RawBlocks]:
    heads = _permutation_heads(name, arch) if permute else None
    rows, cols = tensor.shape
    block_size, type_size = GGML_QUANT_SIZES[tensor.ggml_type]
    row_bytes = cols // block_size * type_size

    def load() -> RawBlocks:
        blocks = np.array(gguf.data(tensor), dtype=np.uint8).reshape(rows, row_bytes)
        if heads:
            blocks = _unpermute_rows(blocks, heads)
        return RawBlocks(ggml_type=tensor.type_name, data=blocks, shape=(rows, cols))

    return load


def _permutation_heads(name: str, arch: Architecture) -> int | None:
    """How many heads llama.cpp interleaved this tensor's rows over (None: not permuted)."""
    if ".self_attn.q_proj." in name:
        return arch.num_heads
    if ".self_attn.k_proj." in name:
        return arch.num_kv_heads
    return None


def _unpermute_rows(values: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's ``permute``: per head, rows (pairs, 2) -> (2, pairs)."""
    rows = values.shape[0]
    grouped = values.reshape(heads, rows // heads // 2, 2, *values.shape[1:])
    return np.ascontiguousarray(grouped.swapaxes(1, 2).reshape(values.shape))
