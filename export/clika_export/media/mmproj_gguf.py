"""Read llama.cpp's ``mmproj`` GGUF files (the vision tower + projector half of a model).

llama.cpp ships a multimodal model as two GGUF files: the text model and an
``mmproj`` file (``general.architecture = "clip"``) holding the vision encoder
under ``v.*`` and the projector under ``mm.*``, with its hyperparameters under
``clip.vision.*``. This reader maps an Idefics3 / SmolVLM projector
(``clip.projector_type = "idefics3"``) back to the Hugging Face layout our
vision graph builder reads, and makes the processor config the file implies
(an mmproj carries no ``preprocessor_config.json``): tiles of
``clip.vision.image_size``, a first resize to ``clip.vision.preproc_image_size``,
the stored mean and std, Lanczos resampling as transformers' processor uses.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from gguf.quants import dequantize

from clika_export.checkpoint import CheckpointError
from clika_export.media.vision_export import write_vision_graph
from clika_export.readers.gguf_file import GGUFFile, GGUFMetadata
from clika_runtime.manifest import VisionSpec
from clika_runtime.media.processor_config import PROCESSOR_FILE, processor_settings

_GLOBAL = {
    "embeddings.patch_embedding": "v.patch_embd",
    "embeddings.position_embedding": "v.position_embd",
    "post_layernorm": "v.post_ln",
    "connector.modality_projection.proj": "mm.model.fc",
}
_LAYER = re.compile(r"encoder\.layers\.(\d+)\.(.+)")
_LAYER_PARTS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.out_proj": "attn_out",
    "layer_norm1": "ln1",
    "layer_norm2": "ln2",
    "mlp.fc1": "ffn_up",
    "mlp.fc2": "ffn_down",
}
SUPPORTED_PROJECTORS = ("idefics3",)


def gguf_name(hf_name: str) -> str:
    """The mmproj tensor name of a tower-relative Hugging Face name (``...weight`` / ``...bias``)."""
    module, _, leaf = hf_name.rpartition(".")
    if module in _GLOBAL:
        return f"{_GLOBAL[module]}.{leaf}"
    match = _LAYER.fullmatch(module)
    if match and match.group(2) in _LAYER_PARTS:
        return f"v.blk.{int(match.group(1))}.{_LAYER_PARTS[match.group(2)]}.{leaf}"
    raise CheckpointError(f"no mmproj tensor corresponds to {hf_name}")


def _weights(gguf: GGUFFile):
    def read(name: str) -> np.ndarray:
        key = gguf_name(name)
        info = gguf.tensors.get(key)
        if info is None:
            raise CheckpointError(f"{gguf.name}: the mmproj file has no tensor {key}")
        values = dequantize(gguf.data(info), info.ggml_type)
        return np.array(values, dtype=np.float32).reshape(info.shape)

    return read


def _triple(meta: GGUFMetadata, key: str) -> list[float]:
    values = meta.numbers(key, max_items=3)
    if len(values) != 3:
        raise CheckpointError(f"{meta.source}: GGUF metadata {key!r} must hold 3 numbers, got {len(values)}")
    return values


def mmproj_config(meta: GGUFMetadata) -> tuple[dict[str, Any], dict[str, Any]]:
    """The HF-shaped model config and the processor config an idefics3 mmproj implies."""
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
        "image_mean": _triple(meta, "clip.vision.image_mean"),
        "image_std": _triple(meta, "clip.vision.image_std"),
    }
    return config, processor


def export_mmproj(path: str | Path, out: str | Path) -> VisionSpec:
    """Write the vision graph of the mmproj GGUF ``path`` (and its processor config) into ``out``."""
    gguf = GGUFFile(path)
    meta = GGUFMetadata(gguf)
    arch = meta.string("general.architecture")
    if arch != "clip":
        raise CheckpointError(
            f"{gguf.name}: not an mmproj file (general.architecture is {arch!r}, not 'clip')"
        )
    projector = meta.string("clip.projector_type", "")
    if projector not in SUPPORTED_PROJECTORS:
        raise CheckpointError(
            f"{gguf.name}: projector type {projector!r} is not supported (supported: {', '.join(SUPPORTED_PROJECTORS)})"
        )
    config, processor = mmproj_config(meta)
    processor_settings(processor)  # the implied config must be one the runtime follows
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / PROCESSOR_FILE).write_text(json.dumps(processor, indent=2) + "\n", encoding="utf-8")
    return write_vision_graph("idefics3", config, _weights(gguf), out, image_token_id=None)
