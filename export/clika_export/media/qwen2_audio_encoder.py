"""The Qwen2-Audio audio encoder (Whisper-style) and its projector as ONNX.

Input ``input_features`` float32 [1, n_mels, 3000] (one 30 s chunk of log-mel
features, ``clika_runtime.media.audio_features``) and ``attention_bias``
float32 [1500, 1500] (0 for the clip's frames, -inf for the padding keys).
Two convolutions (the second halves the time axis) with GELU, learned
positions, pre-LayerNorm encoder layers, average pooling by 2, a LayerNorm and
the projector give ``audio_embeds`` float32 [1, 750, text_hidden]; the rows
past the clip's own length are padding for the runtime to drop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clika_export.graph.builder import GraphBuilder
from clika_export.media.vision_ops import Weights, activation, attention, layer_norm, linear, split_heads

FRAMES = 3000  # mel frames per 30 s chunk
POSITIONS = FRAMES // 2


@dataclass(frozen=True)
class Qwen2AudioEncoder:
    n_mels: int
    hidden: int
    heads: int
    layers: int
    act: str
    text_hidden: int


def qwen2_audio_config(config: dict[str, Any]) -> Qwen2AudioEncoder:
    audio, text = config.get("audio_config") or {}, config.get("text_config") or {}
    spec = Qwen2AudioEncoder(
        n_mels=int(audio.get("num_mel_bins", 128)),
        hidden=int(audio.get("d_model", 1280)),
        heads=int(audio.get("encoder_attention_heads", 20)),
        layers=int(audio.get("encoder_layers", 32)),
        act=str(audio.get("activation_function", "gelu")),
        text_hidden=int(text.get("hidden_size", 4096)),
    )
    if spec.hidden % spec.heads or int(audio.get("max_source_positions", POSITIONS)) != POSITIONS:
        raise ValueError(
            "inconsistent Qwen2-Audio audio config (d_model / heads, or max_source_positions != 1500)"
        )
    return spec


def _conv(g: GraphBuilder, x: str, w: Weights, name: str, stride: int) -> str:
    inputs = [x, g.weight(f"{name}.weight", w(f"{name}.weight")), g.weight(f"{name}.bias", w(f"{name}.bias"))]
    conv = g.op("Conv", inputs, label=f"{name}/Conv", kernel_shape=[3], strides=[stride], pads=[1, 1])
    return g.op("Gelu", [conv], label=f"{name}/Gelu")


def _layer(g: GraphBuilder, x: str, i: int, spec: Qwen2AudioEncoder, w: Weights, bias: str) -> str:
    p, hd = f"layers.{i}", spec.hidden // spec.heads
    with g.scope(p):
        h = layer_norm(g, x, w, f"{p}.self_attn_layer_norm", 1e-5)
        q = split_heads(g, linear(g, h, w, f"{p}.self_attn.q_proj"), spec.heads, hd, "q_heads")
        k = split_heads(g, linear(g, h, w, f"{p}.self_attn.k_proj", bias=False), spec.heads, hd, "k_heads")
        v = split_heads(g, linear(g, h, w, f"{p}.self_attn.v_proj"), spec.heads, hd, "v_heads")
        context = attention(g, q, k, v, hd, bias, "attn")
        x = g.op("Add", [x, linear(g, context, w, f"{p}.self_attn.out_proj")], label="attn_residual")
        h = layer_norm(g, x, w, f"{p}.final_layer_norm", 1e-5)
        h = activation(g, linear(g, h, w, f"{p}.fc1"), spec.act, "mlp")
        return g.op("Add", [x, linear(g, h, w, f"{p}.fc2")], label="mlp_residual")


def build_qwen2_audio(g: GraphBuilder, spec: Qwen2AudioEncoder, w: Weights) -> tuple[tuple[str, ...], str]:
    """Build the graph into ``g``; returns (input names, output name)."""
    features = g.input("input_features", np.float32, [1, spec.n_mels, FRAMES])
    bias = g.input("attention_bias", np.float32, [POSITIONS, POSITIONS])
    with g.scope("audio"):
        x = _conv(g, _conv(g, features, w, "conv1", 1), w, "conv2", 2)  # [1, hidden, 1500]
        x = g.op("Transpose", [x], label="to_time_major", perm=[0, 2, 1])
        table = w("embed_positions.weight")
        x = g.op("Add", [x, g.weight("embed_positions.weight", table)], label="positions")
        for i in range(spec.layers):
            x = _layer(g, x, i, spec, w, bias)
        x = g.op("Transpose", [x], label="to_channels", perm=[0, 2, 1])
        x = g.op("AveragePool", [x], label="avg_pooler", kernel_shape=[2], strides=[2])
        x = g.op("Transpose", [x], label="to_time_major_pooled", perm=[0, 2, 1])
        x = layer_norm(g, x, w, "layer_norm", 1e-5)
    x = linear(g, x, w, "multi_modal_projector.linear")
    out = g.op("Identity", [x], label="audio_embeds", outputs=["audio_embeds"])
    g.output(out, np.float32, [1, POSITIONS // 2, spec.text_hidden])
    return (features, bias), out
