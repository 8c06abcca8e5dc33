"""The Qwen2-VL projector of an mmproj GGUF (``clip.projector_type = "qwen2vl_merger"``).

llama.cpp's converter rewrites three tensors on the way: the Conv3d patch
embedding becomes two Conv2d kernels, one per frame of the temporal patch
(``v.patch_embd.weight`` and ``v.patch_embd.weight.1``), and each block's fused
``qkv`` becomes ``attn_q`` / ``attn_k`` / ``attn_v``; both are put back here.
The merger's LayerNorm is ``v.post_ln`` and its MLP ``mm.0`` / ``mm.2``. The
MLP width is read from ``ffn_up``'s shape: the converter stores the vision
config's output width as ``feed_forward_length`` for this family.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from clika_export.checkpoint import CheckpointError
from clika_export.media.mmproj_names import MmprojNames
from clika_export.readers.gguf_file import GGUFMetadata

# The fused and 3-D tensors are handled by ``weights``.
NAMES = MmprojNames(
    modules={"merger.ln_q": "v.post_ln", "merger.mlp.0": "mm.0", "merger.mlp.2": "mm.2"},
    layer=re.compile(r"blocks\.(\d+)\.(.+)"),
    parts={
        "norm1": "ln1",
        "norm2": "ln2",
        "attn.proj": "attn_out",
        "mlp.fc1": "ffn_up",
        "mlp.fc2": "ffn_down",
    },
)
gguf_name = NAMES.gguf_name


def weights(read: Callable[[str], np.ndarray]) -> Callable[[str], np.ndarray]:
    """Tower-relative HF names read from the mmproj's names, the split tensors joined again."""

    def load(name: str) -> np.ndarray:
        if name == "patch_embed.proj.weight":
            return np.stack([read("v.patch_embd.weight"), read("v.patch_embd.weight.1")], axis=2)
        match = re.fullmatch(r"blocks\.(\d+)\.attn\.qkv\.(weight|bias)", name)
        if match:
            block, leaf = int(match.group(1)), match.group(2)
            return np.concatenate([read(f"v.blk.{block}.attn_{p}.{leaf}") for p in "qkv"], axis=0)
        return read(gguf_name(name))

    return load


def configs(
    meta: GGUFMetadata, triple: Callable[[str], list[float]], read: Callable[[str], np.ndarray]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The HF-shaped model config and the processor config the mmproj implies."""
    hidden = meta.integer("clip.vision.embedding_length", low=1)
    mlp_hidden = int(read("v.blk.0.ffn_up.weight").shape[0])
    if mlp_hidden % hidden:
        raise CheckpointError(f"v.blk.0.ffn_up.weight has {mlp_hidden} rows, not a multiple of {hidden}")
    patch = meta.integer("clip.vision.patch_size", low=1, high=1024)
    merge = meta.integer("clip.vision.spatial_merge_size", 2, low=1, high=16)
    vision = {
        "embed_dim": hidden,
        "hidden_size": meta.integer("clip.vision.projection_dim", low=1),
        "depth": meta.integer("clip.vision.block_count", low=1, high=1024),
        "num_heads": meta.integer("clip.vision.attention.head_count", low=1, high=1024),
        "mlp_ratio": mlp_hidden // hidden,
        "patch_size": patch,
        "spatial_merge_size": merge,
        "temporal_patch_size": 2,  # the converter only writes temporal patches of 2 frames
        "hidden_act": "quick_gelu",
    }
    processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "patch_size": patch,
        "merge_size": merge,
        "temporal_patch_size": 2,
        "min_pixels": meta.integer("clip.vision.image_min_pixels", 56 * 56, low=1),
        "max_pixels": meta.integer("clip.vision.image_max_pixels", 28 * 28 * 1280, low=1),
        "resample": 3,
        "rescale_factor": 1 / 255,
        "image_mean": triple("clip.vision.image_mean"),
        "image_std": triple("clip.vision.image_std"),
    }
    return {"model_type": "qwen2_vl", "vision_config": vision}, processor
