"""The Idefics3 / SmolVLM projector of an mmproj GGUF (``clip.projector_type = "idefics3"``).

llama.cpp's converter keeps every encoder tensor as is under ``v.*`` and the
pixel-shuffle connector's matrix as ``mm.model.fc.weight``. The file carries
no ``preprocessor_config.json``: tiles are ``clip.vision.image_size``, the first
resize is ``clip.vision.preproc_image_size``, mean and std are stored, and the
resampling is transformers' (Lanczos).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from clika_export.media.mmproj_names import MmprojNames
from clika_export.readers.gguf_file import GGUFMetadata

NAMES = MmprojNames(
    modules={
        "embeddings.patch_embedding": "v.patch_embd",
        "embeddings.position_embedding": "v.position_embd",
        "post_layernorm": "v.post_ln",
        "connector.modality_projection.proj": "mm.model.fc",
    },
    layer=re.compile(r"encoder\.layers\.(\d+)\.(.+)"),
    parts={
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.out_proj": "attn_out",
        "layer_norm1": "ln1",
        "layer_norm2": "ln2",
        "mlp.fc1": "ffn_up",
        "mlp.fc2": "ffn_down",
    },
)
gguf_name = NAMES.gguf_name


def weights(read: Callable[[str], np.ndarray]) -> Callable[[str], np.ndarray]:
    """Tower-relative HF names read from the mmproj's names (``read`` takes a GGUF name)."""
    return lambda name: read(gguf_name(name))


def configs(
    meta: GGUFMetadata, triple: Callable[[str], list[float]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The HF-shaped model config and the processor config the mmproj implies."""
    vision = {
        "hidden_size": meta.integer("clip.vision.embedding_length", low=1),
        "intermediate_size": meta.integer("clip.vision.feed_forward_length", low=1),
        "num_hidden_layers": meta.integer("clip.vision.block_count", low=1, high=1024),
        "num_attention_heads": meta.integer("clip.vision.attention.head_count", low=1, high=1024),
        "image_size": meta.integer("clip.vision.image_size", low=1, high=8192),
        "patch_size": meta.integer("clip.vision.patch_size", low=1, high=1024),
        "layer_norm_eps": meta.number("clip.vision.attention.layer_norm_epsilon", 1e-6, high=1.0),
        "hidden_act": "gelu_pytorch_tanh",
    }
    config = {
        "model_type": "idefics3",
        "scale_factor": meta.integer("clip.vision.projector.scale_factor", 2, low=1, high=64),
        "vision_config": vision,
        "text_config": {"hidden_size": meta.integer("clip.vision.projection_dim", low=1)},
    }
    processor = {
        "image_processor_type": "Idefics3ImageProcessor",
        "do_image_splitting": True,
        "max_image_size": {"longest_edge": vision["image_size"]},
        "size": {
            "longest_edge": meta.integer("clip.vision.preproc_image_size", 4 * vision["image_size"], low=1)
        },
        "resample": 1,
        "rescale_factor": 1 / 255,
        "image_mean": triple("clip.vision.image_mean"),
        "image_std": triple("clip.vision.image_std"),
    }
    return config, processor
