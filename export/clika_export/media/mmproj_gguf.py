"""Read llama.cpp's ``mmproj`` GGUF files (the vision tower + projector half of a model).

llama.cpp ships a multimodal model as two GGUF files: the text model and an
``mmproj`` file (``general.architecture = "clip"``) holding the vision encoder
under ``v.*`` and the projector under ``mm.*``, with its hyperparameters under
``clip.vision.*``. Each supported projector type has a module that maps those
names back to the Hugging Face layout our vision graph builders read and makes
the processor config the file implies (an mmproj carries none); this module
opens the file, picks the projector and writes the folder's vision graph.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from gguf.quants import dequantize

from clika_export.checkpoint import CheckpointError
from clika_export.media import mmproj_idefics3, mmproj_qwen2_vl
from clika_export.media.vision_export import write_vision_graph
from clika_export.readers.gguf_file import GGUFFile, GGUFMetadata
from clika_runtime.contract.manifest import VisionSpec
from clika_runtime.media.processor_config import PROCESSOR_FILE, processor_settings

# llama.cpp's projector type -> our vision family.
SUPPORTED_PROJECTORS = {"idefics3": "idefics3", "qwen2vl_merger": "qwen2_vl"}


def _reader(gguf: GGUFFile):
    def read(key: str) -> np.ndarray:
        info = gguf.tensors.get(key)
        if info is None:
            raise CheckpointError(f"{gguf.name}: the mmproj file has no tensor {key}")
        values = dequantize(gguf.data(info), info.ggml_type)
        return np.array(values, dtype=np.float32).reshape(info.shape)

    return read


def _triple(meta: GGUFMetadata):
    def read(key: str) -> list[float]:
        values = meta.numbers(key, max_items=3)
        if len(values) != 3 or not all(math.isfinite(v) for v in values):
            raise CheckpointError(
                f"{meta.source}: GGUF metadata {key!r} must hold 3 finite numbers, got {values}"
            )
        # Stored as float32: keep each value's shortest float32 spelling (0.48145466), as number() does.
        return [float(str(np.float32(v))) for v in values]

    return read


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
            f"{gguf.name}: projector type {projector!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_PROJECTORS)})"
        )
    family, read = SUPPORTED_PROJECTORS[projector], _reader(gguf)
    if family == "idefics3":
        config, processor = mmproj_idefics3.configs(meta, _triple(meta))
        weights = mmproj_idefics3.weights(read)
    else:
        config, processor = mmproj_qwen2_vl.configs(meta, _triple(meta), read)
        weights = mmproj_qwen2_vl.weights(read)
    processor_settings(processor)  # the implied config must be one the runtime follows
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / PROCESSOR_FILE).write_text(json.dumps(processor, indent=2) + "\n", encoding="utf-8")
    return write_vision_graph(family, config, weights, out, image_token_id=None)
