"""The Qwen2-VL vision tower and patch merger as ONNX.

Inputs (the runtime computes the last three from each image's grid, see
``clika_runtime.media.qwen2_vl_positions``):

* ``pixel_values`` float32 [L, 3 * temporal * patch**2]: the processor's patches;
* ``rotary_cos`` / ``rotary_sin`` float32 [L, head_dim]: the 2-D (row, column)
  rotary angles of each patch;
* ``attention_bias`` float32 [L, L]: 0 where two patches belong to the same
  image frame, -inf elsewhere, so images batched in one call stay apart.

Output ``image_embeds`` float32 [L / merge**2, text_hidden]: each merged 2x2
block of patches becomes one image token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from clika_export.graph.builder import GraphBuilder
from clika_export.media.vision_ops import Weights, activation, attention, layer_norm, linear

_EPS = 1e-6  # Qwen2-VL's vision LayerNorms

# (graph, input, weights, weight prefix) -> the normed input
Norm = Callable[[GraphBuilder, str, Weights, str], str]


@dataclass(frozen=True)
class Qwen2VLVision:
    hidden: int
    heads: int
    layers: int
    mlp_hidden: int
    patch: int
    temporal: int
    merge: int
    act: str
    out_hidden: int
    rope_theta: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def patch_dim(self) -> int:
        return 3 * self.temporal * self.patch**2


def qwen2_vl_vision_config(config: dict[str, Any]) -> Qwen2VLVision:
    v = config.get("vision_config") or {}
    hidden = int(v.get("embed_dim", 1280))
    rope = v.get("rope_parameters") or {}
    spec = Qwen2VLVision(
        hidden=hidden,
        heads=int(v.get("num_heads", 16)),
        layers=int(v.get("depth", 32)),
        mlp_hidden=int(hidden * float(v.get("mlp_ratio", 4))),
        patch=int(v.get("patch_size", 14)),
        temporal=int(v.get("temporal_patch_size", 2)),
        merge=int(v.get("spatial_merge_size", 2)),
        act=str(v.get("hidden_act", "quick_gelu")),
        out_hidden=int(v.get("hidden_size", 3584)),
        rope_theta=float(rope.get("rope_theta", 10000.0)),
    )
    if spec.hidden % spec.heads or spec.head_dim % 4:
        raise ValueError(f"inconsistent Qwen2-VL vision config: embed_dim {hidden}, num_heads {spec.heads}")
    return spec


def rotate(g: GraphBuilder, x: str, cos: str, sin: str, half: int, label: str) -> str:
    """``x * cos + rotate_half(x) * sin`` over [1, heads, L, head_dim]."""
    with g.scope(label):
        sizes = g.constant(g.node_name("halves"), [half, half])
        first, second = g.op("Split", [x, sizes], label="Split", outputs=2, axis=-1)
        rotated = g.op("Concat", [g.op("Neg", [second], label="Neg"), first], label="Concat", axis=-1)
        return g.op(
            "Add",
            [g.op("Mul", [x, cos], label="MulCos"), g.op("Mul", [rotated, sin], label="MulSin")],
            label="Add",
        )


def rotary_attention(
    g: GraphBuilder, x: str, h: str, prefix: str, spec: Qwen2VLVision, w: Weights, rope: tuple[str, str, str]
) -> str:
    """``x`` plus the self-attention over ``h`` (``x`` normed), q and k rotated by ``rope``'s
    (cos, sin); its bias keeps apart the patches that must not see each other."""
    cos, sin, bias = rope
    hd = spec.head_dim
    qkv = linear(g, h, w, f"{prefix}.attn.qkv")  # [1, L, 3 * hidden]
    shaped = g.op(
        "Reshape",
        [qkv, g.constant(g.node_name("qkv_shape"), [0, 0, 3, spec.heads, hd])],
        label="qkv/Reshape",
    )
    heads = g.op("Transpose", [shaped], label="qkv/Transpose", perm=[2, 0, 3, 1, 4])  # [3, 1, H, L, hd]
    q, k, v = g.op("Split", [heads], label="qkv/Split", outputs=3, axis=0, num_outputs=3)
    q, k, v = (
        g.op("Squeeze", [t, g.constant(g.node_name(f"{n}_axis"), [0])], label=f"{n}/Squeeze")
        for t, n in ((q, "q"), (k, "k"), (v, "v"))
    )
    q, k = rotate(g, q, cos, sin, hd // 2, "rope_q"), rotate(g, k, cos, sin, hd // 2, "rope_k")
    return g.op(
        "Add",
        [x, linear(g, attention(g, q, k, v, hd, bias, "attn"), w, f"{prefix}.attn.proj")],
        label="attn_residual",
    )


def _layer(
    g: GraphBuilder, x: str, i: int, spec: Qwen2VLVision, w: Weights, rope: tuple[str, str, str]
) -> str:
    p = f"blocks.{i}"
    with g.scope(p):
        x = rotary_attention(g, x, layer_norm(g, x, w, f"{p}.norm1", _EPS), p, spec, w, rope)
        h = layer_norm(g, x, w, f"{p}.norm2", _EPS)
        h = activation(g, linear(g, h, w, f"{p}.mlp.fc1"), spec.act, "mlp")
        return g.op("Add", [x, linear(g, h, w, f"{p}.mlp.fc2")], label="mlp_residual")


def patch_embed(g: GraphBuilder, pixels: str, spec: Qwen2VLVision, w: Weights) -> str:
    """The Conv3d whose kernel equals its stride is a MatMul over the flattened patch."""
    kernel = w("patch_embed.proj.weight")
    if kernel.shape != (spec.hidden, 3, spec.temporal, spec.patch, spec.patch):
        raise ValueError(f"patch_embed.proj.weight has shape {list(kernel.shape)}, not the config's")
    matrix = np.ascontiguousarray(kernel.reshape(spec.hidden, spec.patch_dim).T)
    out = g.op("MatMul", [pixels, g.weight("patch_embed.proj.weight", matrix)], label="patch_embed/MatMul")
    return g.op("Unsqueeze", [out, g.constant("batch_axis", [0])], label="patch_embed/Unsqueeze")  # [1, L, D]


def merger(g: GraphBuilder, x: str, spec: Qwen2VLVision, w: Weights, norm: Norm) -> str:
    """Each 2x2 block of normed patches folded into one token, then the MLP into the text width."""
    with g.scope("merger"):
        x = norm(g, x, w, "merger.ln_q")
        x = g.op(
            "Reshape",
            [x, g.constant(g.node_name("merge_shape"), [-1, spec.hidden * spec.merge**2])],
            label="Merge",
        )
        x = activation(g, linear(g, x, w, "merger.mlp.0"), "gelu", "mlp")
        return linear(g, x, w, "merger.mlp.2")


def _layer_norm(g: GraphBuilder, x: str, w: Weights, name: str) -> str:
    return layer_norm(g, x, w, name, _EPS)


def build_qwen2_vl_vision(g: GraphBuilder, spec: Qwen2VLVision, w: Weights) -> tuple[tuple[str, ...], str]:
    """Build the graph into ``g``; returns (input names, output name)."""
    pixels = g.input("pixel_values", np.float32, ["patches", spec.patch_dim])
    cos = g.input("rotary_cos", np.float32, ["patches", spec.head_dim])
    sin = g.input("rotary_sin", np.float32, ["patches", spec.head_dim])
    bias = g.input("attention_bias", np.float32, ["patches", "patches"])
    with g.scope("vision"):
        x = patch_embed(g, pixels, spec, w)
        for i in range(spec.layers):
            x = _layer(g, x, i, spec, w, (cos, sin, bias))
        x = merger(g, x, spec, w, _layer_norm)
    out = g.op("Identity", [x], label="image_embeds", outputs=["image_embeds"])
    g.output(out, np.float32, ["tokens", spec.out_hidden])
    return (pixels, cos, sin, bias), out
