"""The Idefics3 / SmolVLM vision tower (SigLIP) and pixel-shuffle connector as ONNX.

Input ``pixel_values`` float32 [tiles, 3, S, S] (the processor's whole tiles;
a tile is never padded, so every patch is real and patch ``i`` takes position
embedding ``i``). Output ``image_embeds`` float32 [tiles, tokens, text_hidden]:
the connector folds each ``scale x scale`` block of patches into one token
(pixel shuffle) and projects it to the text model's width, so a tile fills
``(S / patch / scale) ** 2`` image-token positions of the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clika_export.graph.builder import GraphBuilder
from clika_export.media.vision_ops import Weights, activation, attention, layer_norm, linear, split_heads


@dataclass(frozen=True)
class Idefics3Vision:
    hidden: int
    heads: int
    layers: int
    image_size: int
    patch: int
    scale: int
    act: str
    eps: float
    text_hidden: int

    @property
    def side(self) -> int:
        return self.image_size // self.patch

    @property
    def tokens_per_tile(self) -> int:
        return (self.side // self.scale) ** 2


def idefics3_vision_config(config: dict[str, Any]) -> Idefics3Vision:
    vision, text = config.get("vision_config") or {}, config.get("text_config") or {}
    spec = Idefics3Vision(
        hidden=int(vision.get("hidden_size", 1152)),
        heads=int(vision.get("num_attention_heads", 16)),
        layers=int(vision.get("num_hidden_layers", 27)),
        image_size=int(vision.get("image_size", 224)),
        patch=int(vision.get("patch_size", 32)),
        scale=int(config.get("scale_factor", 2)),
        act=str(vision.get("hidden_act", "gelu_pytorch_tanh")),
        eps=float(vision.get("layer_norm_eps", 1e-6)),
        text_hidden=int(text.get("hidden_size", 4096)),
    )
    if spec.hidden % spec.heads or spec.image_size % spec.patch or spec.side % spec.scale:
        raise ValueError(
            f"inconsistent Idefics3 vision config: hidden {spec.hidden} / heads {spec.heads}, "
            f"image {spec.image_size} / patch {spec.patch}, side {spec.side} / scale_factor {spec.scale}"
        )
    return spec


def _patches(g: GraphBuilder, pixels: str, spec: Idefics3Vision, w: Weights) -> str:
    name = "embeddings.patch_embedding"
    conv = g.op(
        "Conv",
        [
            pixels,
            g.weight(f"{name}.weight", w(f"{name}.weight")),
            g.weight(f"{name}.bias", w(f"{name}.bias")),
        ],
        label="patch_embedding/Conv",
        kernel_shape=[spec.patch, spec.patch],
        strides=[spec.patch, spec.patch],
    )
    flat = g.op(
        "Reshape",
        [conv, g.constant("patch_flat_shape", [0, spec.hidden, -1])],
        label="patch_embedding/Flatten",
    )
    seq = g.op("Transpose", [flat], label="patch_embedding/Transpose", perm=[0, 2, 1])
    table = w("embeddings.position_embedding.weight")
    if table.shape != (spec.side**2, spec.hidden):
        raise ValueError(
            f"position embedding has shape {list(table.shape)}, expected [{spec.side**2}, {spec.hidden}]"
        )
    return g.op(
        "Add", [seq, g.weight("embeddings.position_embedding.weight", table)], label="position_embedding/Add"
    )


def _layer(g: GraphBuilder, x: str, i: int, spec: Idefics3Vision, w: Weights) -> str:
    p = f"encoder.layers.{i}"
    head_dim = spec.hidden // spec.heads
    with g.scope(f"layers.{i}"):
        h = layer_norm(g, x, w, f"{p}.layer_norm1", spec.eps)
        q, k, v = (
            split_heads(g, linear(g, h, w, f"{p}.self_attn.{n}_proj"), spec.heads, head_dim, f"{n}_heads")
            for n in "qkv"
        )
        x = g.op(
            "Add",
            [x, linear(g, attention(g, q, k, v, head_dim, None, "attn"), w, f"{p}.self_attn.out_proj")],
            label="attn_residual",
        )
        h = layer_norm(g, x, w, f"{p}.layer_norm2", spec.eps)
        h = activation(g, linear(g, h, w, f"{p}.mlp.fc1"), spec.act, "mlp")
        return g.op("Add", [x, linear(g, h, w, f"{p}.mlp.fc2")], label="mlp_residual")


def _pixel_shuffle(g: GraphBuilder, x: str, spec: Idefics3Vision) -> str:
    """transformers' Idefics3Connector.pixel_shuffle: [B, side^2, D] -> [B, (side/s)^2, D*s^2]."""
    side, s, d = spec.side, spec.scale, spec.hidden
    steps = [
        ("Reshape", [-1, side, side // s, d * s]),
        ("Transpose", [0, 2, 1, 3]),
        ("Reshape", [-1, side // s, side // s, d * s * s]),
        ("Transpose", [0, 2, 1, 3]),
        ("Reshape", [-1, (side // s) ** 2, d * s * s]),
    ]
    with g.scope("pixel_shuffle"):
        for n, (op, arg) in enumerate(steps):
            if op == "Reshape":
                x = g.op(op, [x, g.constant(g.node_name(f"shape_{n}"), arg)], label=f"{op}_{n}")
            else:
                x = g.op(op, [x], label=f"{op}_{n}", perm=arg)
    return x


def build_idefics3_vision(g: GraphBuilder, spec: Idefics3Vision, w: Weights) -> tuple[tuple[str, ...], str]:
    """Build the graph into ``g``; returns (input name, output name). ``w`` reads tower-relative names."""
    pixels = g.input("pixel_values", np.float32, ["tiles", 3, spec.image_size, spec.image_size])
    with g.scope("vision"):
        x = _patches(g, pixels, spec, w)
        for i in range(spec.layers):
            x = _layer(g, x, i, spec, w)
        x = layer_norm(g, x, w, "post_layernorm", spec.eps)
    with g.scope("connector"):
        x = _pixel_shuffle(g, x, spec)
        x = linear(g, x, w, "connector.modality_projection.proj", bias=False)
    out = g.op("Identity", [x], label="image_embeds", outputs=["image_embeds"])
    g.output(out, np.float32, ["tiles", spec.tokens_per_tile, spec.text_hidden])
    return (pixels,), out
