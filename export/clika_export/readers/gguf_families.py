"""What differs between llama.cpp's architectures in a GGUF file: tensor names, layouts, settings.

Per family: which GGUF layer tensors map to which Hugging Face names (Gemma's
``ffn_norm`` is its pre-feedforward norm, llama's is its post-attention one),
which tensors a layer must have, whether llama.cpp permuted Q/K rows, and the
metadata mapped onto transformers' config.json keys (``Checkpoint.config``),
so a family reads one vocabulary whatever the source. Where llama.cpp fixes a
setting in code rather than in the file, the same default is used here:
Gemma's sliding layers (``attention.sliding_window_pattern``, a per-layer
list or a period: 2 for Gemma 2, 6 for Gemma 3; Gemma 2's window 4096 when
the file names none, Gemma 3 none without one), Gemma 3's local rope base
(``rope.freq_base_swa``, 10000), SmolLM3's NoPE layer every fourth, Gemma's
attention scale ``1/sqrt(head_dim)`` (27B: ``1/sqrt(hidden / heads)``).
Qwen2-VL's text model (``qwen2vl``) is qwen2 with M-RoPE: its
``rope.dimension_sections`` (llama.cpp pads the three sections with a fourth, 0)
becomes the config's ``mrope_section``, as ``readers.multimodal`` makes it from
a Hugging Face config.
"""

from __future__ import annotations

from typing import Any

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFMetadata
from clika_runtime.contract.manifest import Architecture

SUPPORTED_FAMILIES = (
    "gemma2", "gemma3", "granite", "llama", "olmo2", "phi3", "qwen2", "qwen2vl", "qwen3", "smollm3",
)  # fmt: skip
# GGUF architectures built by another family's graph (the file's own keys still name them).
BUILT_AS = {"qwen2vl": "qwen2"}
# Families whose Q/K rows llama.cpp's converter permutes (its LlamaModel and subclasses).
PERMUTED_FAMILIES = ("granite", "llama", "smollm3")
GEMMA = ("gemma2", "gemma3")
# Phi-3's longrope factors are tensors, not metadata.
ROPE_FACTOR_TENSORS = {"rope_factors_long.weight": "long_factor", "rope_factors_short.weight": "short_factor"}

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_POST_NORMS = {
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
_FAMILY_NAMES = {
    "gemma2": {**_LAYER_NAMES, **_POST_NORMS, "ffn_norm.weight": "pre_feedforward_layernorm.weight"},
    "gemma3": {**_LAYER_NAMES, **_POST_NORMS, "ffn_norm.weight": "pre_feedforward_layernorm.weight"},
    "olmo2": {**_LAYER_NAMES, **_POST_NORMS},
    # Fused in the file; the reader splits them into the llama names.
    "phi3": {
        **_LAYER_NAMES,
        "attn_qkv.weight": "self_attn.qkv_proj.weight",
        "ffn_up.weight": "mlp.gate_up_proj.weight",
    },
}


def layer_names(family: str) -> dict[str, str]:
    """GGUF layer tensor suffix -> Hugging Face suffix, for ``family``."""
    return _FAMILY_NAMES.get(family, _LAYER_NAMES)


def layer_shapes(family: str, arch: Architecture) -> dict[str, tuple[int, ...]]:
    """The Hugging Face suffixes (before any split) and shapes every layer of ``family`` has."""
    q, kv, h, i = (
        arch.num_heads * arch.head_dim,
        arch.num_kv_heads * arch.head_dim,
        arch.hidden_size,
        arch.intermediate_size,
    )
    shapes: dict[str, tuple[int, ...]] = {
        "self_attn.o_proj.weight": (h, q),
        "mlp.down_proj.weight": (h, i),
    }
    if family == "phi3":
        shapes |= {"self_attn.qkv_proj.weight": (q + 2 * kv, h), "mlp.gate_up_proj.weight": (2 * i, h)}
    else:
        shapes |= {"self_attn.q_proj.weight": (q, h), "self_attn.k_proj.weight": (kv, h)}
        shapes |= {
            "self_attn.v_proj.weight": (kv, h),
            "mlp.gate_proj.weight": (i, h),
            "mlp.up_proj.weight": (i, h),
        }
    if family != "olmo2":
        shapes |= {"input_layernorm.weight": (h,)}
    shapes["post_attention_layernorm.weight"] = (h,)
    if family in GEMMA:
        shapes |= {"pre_feedforward_layernorm.weight": (h,), "post_feedforward_layernorm.weight": (h,)}
    if family == "olmo2":
        shapes |= {"post_feedforward_layernorm.weight": (h,)}
        shapes |= {"self_attn.q_norm.weight": (q,), "self_attn.k_norm.weight": (kv,)}
    if family in ("qwen3", "gemma3"):
        shapes |= {"self_attn.q_norm.weight": (arch.head_dim,), "self_attn.k_norm.weight": (arch.head_dim,)}
    if arch.attention_bias:
        shapes |= {
            "self_attn.q_proj.bias": (q,),
            "self_attn.k_proj.bias": (kv,),
            "self_attn.v_proj.bias": (kv,),
        }
    return shapes


def family_config(meta: GGUFMetadata, family: str, arch: Architecture, rotary_dim: int) -> dict[str, Any]:
    """The file's settings under transformers' config.json keys."""
    key = f"{family}."
    config: dict[str, Any] = {"hidden_act": "gelu_pytorch_tanh" if family in GEMMA else "silu"}
    # 0 means no window (llama.cpp's converter writes 0 for Phi-4); llama.cpp currently runs Phi-3's
    # windowed layers unwindowed, the window kept here is the checkpoint's (and transformers').
    window = meta.integer(key + "attention.sliding_window", 0, low=0, high=1 << 24)
    if window:
        config["sliding_window"] = window
    if family in GEMMA:
        config |= _gemma_layers(meta, family, arch.num_layers, config.get("sliding_window"))
        # llama.cpp: 1/sqrt(head_dim), but 1/sqrt(hidden / heads) for the 27B models (46 and 62 layers).
        big = arch.num_layers == (46 if family == "gemma2" else 62)
        config["query_pre_attn_scalar"] = arch.hidden_size // arch.num_heads if big else arch.head_dim
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            if meta.has(key + name):
                config[name] = meta.number(key + name, low=0.0, high=1e6)
    if family == "gemma3":
        full = {"rope_theta": arch.rope_theta, **(arch.rope_scaling or {})}
        local = meta.number(key + "rope.freq_base_swa", 10000.0, low=1.0, high=1e12)
        config["rope_parameters"] = {"full_attention": full, "sliding_attention": {"rope_theta": local}}
    if family == "granite":
        names = {
            "embedding_scale": "embedding_multiplier",
            "residual_scale": "residual_multiplier",
            "attention.scale": "attention_multiplier",
            "logit_scale": "logits_scaling",
        }
        for gguf_name, hf_name in names.items():
            if meta.has(key + gguf_name):
                config[hf_name] = meta.number(key + gguf_name, low=-1e6, high=1e6)
    if family == "phi3":
        config["partial_rotary_factor"] = rotary_dim / arch.head_dim
    if family == "smollm3":
        config["no_rope_layer_interval"] = 4
    if family == "qwen2vl":
        config["mrope_section"] = _mrope_sections(meta, key + "rope.dimension_sections")
    return config


def _mrope_sections(meta: GGUFMetadata, key: str) -> list[int]:
    """Qwen2-VL's three M-RoPE sections (temporal, height, width); a fourth entry must be 0."""
    sections = meta.integers(key, max_items=4)
    if len(sections) not in (3, 4) or any(s <= 0 for s in sections[:3]) or any(sections[3:]):
        raise CheckpointError(
            f"{meta.source}: {key} must list 3 positive sections (and an optional 0), not {sections}"
        )
    return sections[:3]


def _gemma_layers(meta: GGUFMetadata, family: str, layers: int, window: int | None) -> dict[str, Any]:
    """Gemma's layer types (and Gemma 2's default window), as llama.cpp decides them."""
    key = f"{family}.attention.sliding_window_pattern"
    if family == "gemma2" and window is None:
        window = 4096
    if window is None:
        return {"layer_types": ["full_attention"] * layers}
    if meta.is_array(key):
        sliding = meta.booleans(key)
        if len(sliding) < layers:
            raise CheckpointError(f"{meta.source}: {key} lists {len(sliding)} layers of {layers}")
    else:
        period = meta.integer(key, 2 if family == "gemma2" else 6, low=0, high=1 << 10)
        sliding = [period == 0 or i % period < period - 1 for i in range(layers)]
    types = ["sliding_attention" if s else "full_attention" for s in sliding[:layers]]
    return {"sliding_window": window, "layer_types": types}
