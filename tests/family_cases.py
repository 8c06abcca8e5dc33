"""Tiny random checkpoints of every native family, and their GGUF twins written as llama.cpp writes them.

``CASES`` names, per family, the transformers ``model_type`` and the config
that makes its distinctive parts bite at tiny sizes (windows of 5 keys under
prompts of 14, soft-caps below the logits' range, multipliers far from 1).
``write_family_gguf`` converts a transformers model to GGUF independently of
the reader: llama.cpp's tensor names, its Q/K row permutation for llama-like
architectures, Gemma's norms stored as ``1 + w``, Phi-3's fused tensors and
longrope factor tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# The tiny GGUF vocabulary of conftest (265 tokens); the HF twins are built with the same size.
VOCAB = 265


@dataclass(frozen=True)
class FamilyCase:
    family: str  # our family name
    model_type: str  # transformers'
    config: dict[str, Any] = field(default_factory=dict)
    layers: int = 3
    context: int | None = None  # export context window (None: max_position_embeddings)
    gguf_arch: str | None = None  # llama.cpp's architecture name
    gguf_config: dict[str, Any] | None = None  # config overrides for the GGUF twin (None: the same)


_LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 10000.0,
    "partial_rotary_factor": 0.5,
    "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
    "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 18.0],
    "original_max_position_embeddings": 32,
}

CASES = {
    case.family: case
    for case in (
        FamilyCase("qwen3", "qwen3", gguf_arch="qwen3"),
        FamilyCase(
            "gemma3",
            "gemma3_text",
            dict(head_dim=16, sliding_window=5, query_pre_attn_scalar=16),
            layers=6,  # five sliding layers, then a global one
            gguf_arch="gemma3",
        ),
        FamilyCase(
            "mistral",
            "mistral",
            dict(sliding_window=5),
            gguf_arch="llama",
            gguf_config=dict(sliding_window=None),  # llama.cpp records no window for Mistral
        ),
        FamilyCase(
            "phi3",
            "phi3",
            dict(
                num_attention_heads=2,
                num_key_value_heads=1,
                original_max_position_embeddings=32,
                rope_parameters=_LONGROPE,
            ),
            context=32,  # the short factors: transformers switches to the long ones past 32 tokens
            gguf_arch="phi3",
        ),
        FamilyCase(
            "gemma2",
            "gemma2",
            dict(head_dim=16, sliding_window=5, attn_logit_softcapping=2.0, final_logit_softcapping=3.0),
            layers=4,
            gguf_arch="gemma2",
            gguf_config=dict(query_pre_attn_scalar=16),  # llama.cpp's scale is 1/sqrt(head_dim)
        ),
        FamilyCase(
            "granite",
            "granite",
            dict(
                embedding_multiplier=3.0,
                residual_multiplier=0.5,
                attention_multiplier=0.2,
                logits_scaling=2.5,
            ),
            gguf_arch="granite",
        ),
        FamilyCase("olmo2", "olmo2", gguf_arch="olmo2"),
        FamilyCase("smollm3", "smollm3", layers=4, gguf_arch="smollm3"),  # layer 3 has no rotary
    )
}


def build_case(make_tiny_hf, folder: Path, case: FamilyCase, *, gguf: bool = False, seed: int = 0):
    """The tiny transformers model of ``case`` saved to ``folder`` (``gguf``: its GGUF twin's config)."""
    config = {**case.config, **((case.gguf_config or {}) if gguf else {})}
    return make_tiny_hf(folder, case.model_type, layers=case.layers, seed=seed, vocab_size=VOCAB, **config)


# -- GGUF ----------------------------------------------------------------------------

_LAYER = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.qkv_proj": "attn_qkv",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.gate_up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "post_feedforward_layernorm": "post_ffw_norm",
}
_PERMUTED = ("llama", "granite", "smollm3")


def _gguf_name(name: str, arch: str) -> str:
    globals_ = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    module, kind = name.rsplit(".", 1)
    if module in globals_:
        return f"{globals_[module]}.{kind}"
    _, _, layer, part = module.split(".", 3)
    if part == "post_attention_layernorm":
        gguf = "post_attention_norm" if arch in ("gemma2", "gemma3", "olmo2") else "ffn_norm"
    elif part == "pre_feedforward_layernorm":
        gguf = "ffn_norm"
    else:
        gguf = _LAYER[part]
    return f"blk.{layer}.{gguf}.{kind}"


def write_family_gguf(
    path: Path, model, case: FamilyCase, drop: tuple[str, ...] = (), metadata: dict | None = None
) -> Path:
    """Write ``model`` (a transformers model of ``case``) as an F32 GGUF with the tiny byte-level vocabulary.

    ``drop`` names GGUF tensors to leave out (a broken file); ``metadata`` adds entries
    (key -> (value, GGUFValueType)).
    """
    from conftest import _llama_cpp_permute, _tiny_vocab
    from gguf import GGUFValueType, GGUFWriter

    arch, cfg = case.gguf_arch, model.config
    assert arch is not None
    tokens, types, merges = _tiny_vocab()
    assert len(tokens) == VOCAB
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rope = cfg.rope_parameters if isinstance(cfg.rope_parameters, dict) else {}
    rope = rope.get("full_attention", rope)
    rotary = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))
    u32, f32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
    kv: dict[str, tuple[Any, GGUFValueType]] = {
        f"{arch}.block_count": (cfg.num_hidden_layers, u32),
        f"{arch}.context_length": (cfg.max_position_embeddings, u32),
        f"{arch}.embedding_length": (cfg.hidden_size, u32),
        f"{arch}.feed_forward_length": (cfg.intermediate_size, u32),
        f"{arch}.attention.head_count": (cfg.num_attention_heads, u32),
        f"{arch}.attention.head_count_kv": (cfg.num_key_value_heads, u32),
        f"{arch}.attention.key_length": (head_dim, u32),
        f"{arch}.attention.value_length": (head_dim, u32),
        f"{arch}.rope.dimension_count": (rotary, u32),
        f"{arch}.rope.freq_base": (float(rope.get("rope_theta", 10000.0)), f32),
        f"{arch}.attention.layer_norm_rms_epsilon": (float(cfg.rms_norm_eps), f32),
    }
    if getattr(cfg, "sliding_window", None) and arch in ("gemma2", "gemma3", "phi3"):
        kv[f"{arch}.attention.sliding_window"] = (cfg.sliding_window, u32)
    if arch == "gemma2":
        kv["gemma2.attn_logit_softcapping"] = (float(cfg.attn_logit_softcapping), f32)
        kv["gemma2.final_logit_softcapping"] = (float(cfg.final_logit_softcapping), f32)
    if arch == "granite":
        kv["granite.embedding_scale"] = (float(cfg.embedding_multiplier), f32)
        kv["granite.residual_scale"] = (float(cfg.residual_multiplier), f32)
        kv["granite.attention.scale"] = (float(cfg.attention_multiplier), f32)
        kv["granite.logit_scale"] = (float(cfg.logits_scaling), f32)
    if rope.get("rope_type") == "longrope":
        kv[f"{arch}.rope.scaling.original_context_length"] = (rope["original_max_position_embeddings"], u32)
    kv |= {
        "tokenizer.ggml.model": ("gpt2", GGUFValueType.STRING),
        "tokenizer.ggml.pre": ("smollm", GGUFValueType.STRING),
        "tokenizer.ggml.tokens": (tokens, GGUFValueType.ARRAY),
        "tokenizer.ggml.token_type": (types, GGUFValueType.ARRAY),
        "tokenizer.ggml.merges": (merges, GGUFValueType.ARRAY),
        "tokenizer.ggml.bos_token_id": (tokens.index("<|im_start|>"), u32),
        "tokenizer.ggml.eos_token_id": (tokens.index("<|im_end|>"), u32),
        "tokenizer.ggml.add_bos_token": (False, GGUFValueType.BOOL),
    }
    kv |= metadata or {}
    writer = GGUFWriter(path, arch)
    for key, (value, vtype) in kv.items():
        sub = None
        if vtype == GGUFValueType.ARRAY:
            sub = GGUFValueType.STRING if isinstance(value[0], str) else GGUFValueType.INT32
            sub = GGUFValueType.BOOL if isinstance(value[0], bool) else sub
        writer.add_key_value(key, value, vtype, sub)
    for name, param in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        values = param.detach().float().numpy().copy()
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            values = values + 1  # llama.cpp's converter stores Gemma's norm multipliers
        if arch in _PERMUTED and (".q_proj." in name or ".k_proj." in name):
            heads = cfg.num_attention_heads if ".q_proj." in name else cfg.num_key_value_heads
            values = _llama_cpp_permute(values, heads)
        if _gguf_name(name, arch) not in drop:
            writer.add_tensor(_gguf_name(name, arch), np.ascontiguousarray(values, dtype=np.float32))
    if rope.get("rope_type") == "longrope":
        for kind in ("long", "short"):
            if f"rope_factors_{kind}.weight" not in drop:
                writer.add_tensor(
                    f"rope_factors_{kind}.weight", np.asarray(rope[f"{kind}_factor"], np.float32)
                )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
