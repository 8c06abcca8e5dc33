"""What a family tells the decoder builder (and the NumPy reference) beyond the architecture facts.

The llama layout is the default of every field; a family states only where it
differs: biases, q/k RMSNorm, where the norms sit around each block, the MLP's
activation, scalar multipliers (embeddings, residual branches, attention,
logits), soft-capping, and per layer its attention window and rotary table.

Norm weights are multipliers as read (Gemma's ``1 + w`` is folded in by the
readers), and ``attention_scale`` replaces ``1/sqrt(head_dim)`` when set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clika_runtime.contract.manifest import Architecture

GLOBAL_ROPE = "global"
NORM_LAYOUTS = ("pre", "sandwich", "post")
ACTIVATIONS = ("silu", "gelu_tanh")
QK_NORMS = (None, "head", "full")


@dataclass(frozen=True)
class RopeSpec:
    """One rotary table: base, transformers' scaling dict, and how many leading dims rotate."""

    theta: float
    scaling: dict[str, Any] | None
    rotary_dim: int


@dataclass(frozen=True)
class LayerSpec:
    """One layer's attention: ``window`` keys visible (itself included; None = all), its rope table."""

    window: int | None = None
    rope: str | None = GLOBAL_ROPE  # a key of DecoderSpec.ropes; None: this layer has no rotary


@dataclass(frozen=True)
class DecoderSpec:
    arch: Architecture
    context_window: int
    qkv_bias: bool
    o_bias: bool = False
    # q/k RMSNorm before rotary: per head (weights [head_dim]) or over the whole projection (OLMo 2).
    qk_norm: str | None = None
    # "pre": norm -> block -> add (llama); "sandwich": norm -> block -> norm -> add (Gemma 2/3);
    # "post": block -> norm -> add (OLMo 2).
    norms: str = "pre"
    activation: str = "silu"
    embedding_scale: float = 1.0
    residual_scale: float = 1.0
    attention_scale: float | None = None
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    logits_scale: float = 1.0
    ropes: dict[str, RopeSpec] = field(default_factory=dict)
    layers: tuple[LayerSpec, ...] = ()
    # M-RoPE (Qwen2-VL): how many of the global rope's frequencies each position row
    # (temporal, height, width) rotates; None: one position per token (every other model).
    mrope_section: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        a = self.arch
        if not self.ropes:
            rope = RopeSpec(a.rope_theta, a.rope_scaling, a.head_dim)
            object.__setattr__(self, "ropes", {GLOBAL_ROPE: rope})
        if not self.layers:
            object.__setattr__(self, "layers", (LayerSpec(),) * a.num_layers)
        if len(self.layers) != a.num_layers:
            raise ValueError(f"{len(self.layers)} layer specs for {a.num_layers} layers")
        if (
            self.norms not in NORM_LAYOUTS
            or self.activation not in ACTIVATIONS
            or self.qk_norm not in QK_NORMS
        ):
            raise ValueError(f"bad decoder spec: norms={self.norms} activation={self.activation}")
        for layer in self.layers:
            if layer.rope is not None and layer.rope not in self.ropes:
                raise ValueError(f"layer rope table {layer.rope!r} is not among {sorted(self.ropes)}")
        if self.mrope_section is not None:
            rope = self.ropes[GLOBAL_ROPE]
            if any(layer.rope not in (None, GLOBAL_ROPE) for layer in self.layers):
                raise ValueError("M-RoPE rotates by the global rope only")
            if rope.rotary_dim != a.head_dim:
                raise ValueError("M-RoPE with partial rotary is not built")
            if sum(self.mrope_section) * 2 != rope.rotary_dim:
                raise ValueError(
                    f"mrope_section {list(self.mrope_section)} covers {sum(self.mrope_section)} "
                    f"frequencies, the rope has {rope.rotary_dim // 2}"
                )

    @property
    def scale(self) -> float:
        """The attention scores' scale."""
        return self.attention_scale if self.attention_scale is not None else self.arch.head_dim**-0.5

    def norm_names(self) -> tuple[str | None, str | None, str | None, str | None]:
        """HF names of (pre-attention, post-attention, pre-MLP, post-MLP) norms; None where absent."""
        if self.norms == "pre":
            return "input_layernorm", None, "post_attention_layernorm", None
        if self.norms == "sandwich":
            return (
                "input_layernorm",
                "post_attention_layernorm",
                "pre_feedforward_layernorm",
                "post_feedforward_layernorm",
            )
        return None, "post_attention_layernorm", None, "post_feedforward_layernorm"
