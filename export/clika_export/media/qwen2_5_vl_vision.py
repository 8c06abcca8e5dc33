"""The Qwen2.5-VL vision tower and patch merger as ONNX.

Qwen2-VL's tower (``qwen2_vl_vision``) with three differences: RMSNorms for
the LayerNorms, a gated SiLU MLP (``gate_proj`` / ``up_proj`` / ``down_proj``),
and window attention. The patches are reordered so that each window of
``window x window`` merged patches is contiguous; most blocks attend within
their window, the ``fullatt_block_indexes`` blocks over the whole frame; the
merged tokens are put back in the processor's order at the end.

Inputs (the runtime computes all but the pixels from each image's grid, see
``clika_runtime.media.qwen2_vl_positions`` and ``qwen2_5_vl_windows``):

* ``pixel_values``, ``rotary_cos``, ``rotary_sin`` as Qwen2-VL's, in the
  processor's (merge) order;
* ``window_order`` int64 [L]: the patch each window-ordered row takes;
* ``attention_bias`` float32 [L, L] (frames) and ``window_bias`` float32
  [L, L] (windows), both over the window-ordered patches;
* ``window_restore`` int64 [L / merge**2]: the window-ordered merged token
  each output row takes.

Output ``image_embeds`` float32 [L / merge**2, text_hidden], as Qwen2-VL's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clika_export.graph.builder import GraphBuilder
from clika_export.media.qwen2_vl_vision import Qwen2VLVision, merger, patch_embed, rotary_attention
from clika_export.media.vision_ops import Weights, activation, linear

_EPS = 1e-6  # Qwen2.5-VL's vision RMSNorms


@dataclass(frozen=True)
class Qwen2_5_VLVision:
    base: Qwen2VLVision  # mlp_hidden: the gated MLP's intermediate width
    window_size: int  # pixels per window edge (window_size // patch // merge merged patches)
    full_attention_blocks: tuple[int, ...]

    @property
    def window_merged(self) -> int:
        """A window's edge in merged patches."""
        return self.window_size // self.base.merge // self.base.patch


def qwen2_5_vl_vision_config(config: dict[str, Any]) -> Qwen2_5_VLVision:
    v = config.get("vision_config") or {}
    rope = v.get("rope_parameters") or {}
    base = Qwen2VLVision(
        hidden=int(v.get("hidden_size", 3584)),
        heads=int(v.get("num_heads", 16)),
        layers=int(v.get("depth", 32)),
        mlp_hidden=int(v.get("intermediate_size", 3420)),
        patch=int(v.get("patch_size", 14)),
        temporal=int(v.get("temporal_patch_size", 2)),
        merge=int(v.get("spatial_merge_size", 2)),
        act=str(v.get("hidden_act", "silu")),
        out_hidden=int(v.get("out_hidden_size", 3584)),
        rope_theta=float(rope.get("rope_theta", 10000.0)),
    )
    blocks = tuple(int(i) for i in v.get("fullatt_block_indexes", (7, 15, 23, 31)))
    spec = Qwen2_5_VLVision(base, int(v.get("window_size", 112)), blocks)
    if base.hidden % base.heads or base.head_dim % 4:
        raise ValueError(
            f"inconsistent Qwen2.5-VL vision config: hidden_size {base.hidden}, num_heads {base.heads}"
        )
    if spec.window_merged < 1:
        raise ValueError(
            f"window_size {spec.window_size} is smaller than one merged patch "
            f"({base.patch * base.merge} pixels)"
        )
    if any(not 0 <= i < base.layers for i in blocks):
        raise ValueError(f"fullatt_block_indexes {list(blocks)} name blocks outside the {base.layers}")
    return spec


def qwen2_5_vl_details(spec: Qwen2_5_VLVision) -> dict[str, Any]:
    """The manifest's layout numbers: Qwen2-VL's, and the window's edge in merged patches."""
    base = spec.base
    return {
        "patch_size": base.patch,
        "merge_size": base.merge,
        "temporal_patch_size": base.temporal,
        "head_dim": base.head_dim,
        "rope_theta": base.rope_theta,
        "window_size": spec.window_merged,
        "full_attention_blocks": list(spec.full_attention_blocks),
    }


def _rms_norm(g: GraphBuilder, x: str, w: Weights, name: str) -> str:
    scale = g.weight(f"{name}.weight", w(f"{name}.weight"))
    return g.op(
        "SimplifiedLayerNormalization", [x, scale], label=f"{name.rsplit('.', 1)[-1]}/RMSNorm", axis=-1,
        epsilon=_EPS,
    )  # fmt: skip


def _layer(g: GraphBuilder, x: str, i: int, spec: Qwen2_5_VLVision, w: Weights, rope: tuple[str, ...]) -> str:
    base, p = spec.base, f"blocks.{i}"
    cos, sin, frame_bias, window_bias = rope
    bias = frame_bias if i in spec.full_attention_blocks else window_bias
    with g.scope(p):
        x = rotary_attention(g, x, _rms_norm(g, x, w, f"{p}.norm1"), p, base, w, (cos, sin, bias))
        h = _rms_norm(g, x, w, f"{p}.norm2")
        gate = _gate_activation(g, linear(g, h, w, f"{p}.mlp.gate_proj"), base.act, "mlp")
        up = linear(g, h, w, f"{p}.mlp.up_proj")
        h = linear(g, g.op("Mul", [gate, up], label="mlp/Gate"), w, f"{p}.mlp.down_proj")
        return g.op("Add", [x, h], label="mlp_residual")


def _gate_activation(g: GraphBuilder, x: str, kind: str, label: str) -> str:
    """The gate's ``hidden_act``: SiLU (Qwen2.5-VL's), or one the other towers use."""
    if kind == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x], label=f"{label}/Sigmoid")], label=f"{label}/Silu")
    return activation(g, x, kind, label)


def build_qwen2_5_vl_vision(
    g: GraphBuilder, spec: Qwen2_5_VLVision, w: Weights
) -> tuple[tuple[str, ...], str]:
    """Build the graph into ``g``; returns (input names, output name)."""
    base = spec.base
    pixels = g.input("pixel_values", np.float32, ["patches", base.patch_dim])
    cos = g.input("rotary_cos", np.float32, ["patches", base.head_dim])
    sin = g.input("rotary_sin", np.float32, ["patches", base.head_dim])
    order = g.input("window_order", np.int64, ["patches"])
    frame_bias = g.input("attention_bias", np.float32, ["patches", "patches"])
    window_bias = g.input("window_bias", np.float32, ["patches", "patches"])
    restore = g.input("window_restore", np.int64, ["tokens"])
    with g.scope("vision"):
        # Reordering the pixel rows equals reordering the embedded patches (one MatMul per row).
        windowed = g.op("Gather", [pixels, order], label="window_order/Pixels", axis=0)
        wcos = g.op("Gather", [cos, order], label="window_order/Cos", axis=0)
        wsin = g.op("Gather", [sin, order], label="window_order/Sin", axis=0)
        x = patch_embed(g, windowed, base, w)
        for i in range(base.layers):
            x = _layer(g, x, i, spec, w, (wcos, wsin, frame_bias, window_bias))
        x = merger(g, x, base, w, _rms_norm)
        x = g.op("Gather", [x, restore], label="window_restore", axis=0)
    out = g.op("Identity", [x], label="image_embeds", outputs=["image_embeds"])
    g.output(out, np.float32, ["tokens", base.out_hidden])
    return (pixels, cos, sin, order, frame_bias, window_bias, restore), out
