"""Read a GGUF file into a ``Checkpoint`` (families llama and qwen2).

Tensors come out under Hugging Face names in Hugging Face layout (float32,
Linear weights ``[out, in]``), dequantized lazily from the memory-mapped file
(``clika_export.readers.gguf_file``) with ``gguf.quants.dequantize``. llama.cpp stores the Q and K projections of
``llama`` models with their rows permuted for its rotary layout; that is undone
here, for the float tensors and for the raw quantized blocks alike (a row
permutation never cuts through a quantization block).

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

from clika_export.checkpoint import Checkpoint, CheckpointError, RawBlocks
from clika_export.readers.gguf_file import GGUFFile, GGUFMetadata, TensorInfo
from clika_export.readers.regular_file import file_sha256
from clika_export.tokenizer_gguf import tokenizer_from_metadata
from clika_runtime.manifest import Architecture

SUPPORTED_FAMILIES = ("llama", "qwen2")
# Families whose Q/K rows llama.cpp's converter permutes.
_PERMUTED_FAMILIES = ("llama",)

_FLOAT_TYPES = {"F32", "F16", "BF16"}
_BLOCK_TYPES = set("Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS".split())
SUPPORTED_TENSOR_TYPES = tuple(sorted(_FLOAT_TYPES | _BLOCK_TYPES))

# GGUF tensor name (per layer: blk.{i}.<part>) -> Hugging Face name.
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
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
    tensors = _tensors_by_hf_name(gguf)
    arch = _architecture(meta, family, tokenizer.vocab_size, tensors)
    _check_tensors(tensors, arch, path.name)
    permute = family in _PERMUTED_FAMILIES
    return Checkpoint(
        architecture=arch,
        tensor_loaders={name: _float_loader(gguf, t, name, arch, permute) for name, t in tensors.items()},
        raw_loaders={
            name: _raw_loader(gguf, t, name, arch, permute)
            for name, t in tensors.items()
            if t.is_block_quantized and len(t.shape) == 2
        },
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
    )


# -- names ------------------------------------------------------------------------


def _tensors_by_hf_name(gguf: GGUFFile) -> dict[str, TensorInfo]:
    tensors = {}
    for tensor in gguf.tensors.values():
        if tensor.type_name not in SUPPORTED_TENSOR_TYPES:
            raise CheckpointError(
                f"{gguf.name}: tensor {tensor.name} has tensor type {tensor.type_name}, which is not supported "
                f"(supported: {', '.join(SUPPORTED_TENSOR_TYPES)})"
            )
        tensors[_hf_name(tensor.name, gguf.name)] = tensor
    return tensors


def _hf_name(gguf_name: str, source: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_PATTERN.fullmatch(gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{int(match.group(1))}.{_LAYER_NAMES[match.group(2)]}"
    raise CheckpointError(f"{source}: tensor {gguf_name!r} has no Hugging Face counterpart in this reader")


# -- architecture ----------------------------------------------------------------


def _architecture(
    meta: GGUFMetadata, family: str, vocab_size: int, tensors: dict[str, TensorInfo]
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
    head_dim = _head_dim(meta, key, hidden, heads)
    return Architecture(
        family=family,
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
        rope_scaling=_rope_scaling(meta, key),
    )


def _head_dim(meta: GGUFMetadata, key: str, hidden: int, heads: int) -> int:
    if meta.has(key + "attention.key_length"):
        head_dim = meta.integer(key + "attention.key_length", low=1, high=1 << 12)
        if meta.integer(key + "attention.value_length", head_dim, low=1, high=1 << 12) != head_dim:
            raise CheckpointError(f"{meta.source}: different key and value head sizes are not supported")
    elif hidden % heads:
        raise CheckpointError(f"{meta.source}: hidden size {hidden} is not a multiple of {heads} heads")
    else:
        head_dim = hidden // heads
    rotary = meta.integer(key + "rope.dimension_count", head_dim, low=1, high=1 << 12)
    if rotary != head_dim:
        raise CheckpointError(
            f"{meta.source}: partial rotary embeddings ({rotary} of {head_dim} dims) are not supported"
        )
    return head_dim


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
    """Every tensor a checkpoint of this architecture must have, with its HF shape."""
    q_rows, kv_rows = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    hidden, inter = arch.hidden_size, arch.intermediate_size
    shapes = {"model.embed_tokens.weight": (arch.vocab_size, hidden), "model.norm.weight": (hidden,)}
    if not arch.tie_word_embeddings:
        shapes["lm_head.weight"] = (arch.vocab_size, hidden)
    for i in range(arch.num_layers):
        layer = f"model.layers.{i}."
        shapes[layer + "input_layernorm.weight"] = (hidden,)
        shapes[layer + "post_attention_layernorm.weight"] = (hidden,)
        shapes[layer + "self_attn.q_proj.weight"] = (q_rows, hidden)
        shapes[layer + "self_attn.k_proj.weight"] = (kv_rows, hidden)
        shapes[layer + "self_attn.v_proj.weight"] = (kv_rows, hidden)
        shapes[layer + "self_attn.o_proj.weight"] = (hidden, q_rows)
        shapes[layer + "mlp.gate_proj.weight"] = (inter, hidden)
        shapes[layer + "mlp.up_proj.weight"] = (inter, hidden)
        shapes[layer + "mlp.down_proj.weight"] = (hidden, inter)
        if arch.attention_bias:
            shapes[layer + "self_attn.q_proj.bias"] = (q_rows,)
            shapes[layer + "self_attn.k_proj.bias"] = (kv_rows,)
            shapes[layer + "self_attn.v_proj.bias"] = (kv_rows,)
    return shapes


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
