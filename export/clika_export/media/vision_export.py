"""Export a multimodal checkpoint's vision tower + projector into a model folder.

Reads a Hugging Face folder (``config.json``, safetensors weights,
``preprocessor_config.json``), builds the family's vision graph, writes
``vision.onnx`` and ``vision.onnx.data`` into ``out``, copies the processor
config beside them, and returns the manifest's ``VisionSpec``.
``attach_vision`` records it in an exported folder's manifest.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from clika_export.checkpoint import CheckpointError
from clika_export.graph.builder import ExternalData, GraphBuilder, save_model
from clika_export.media.idefics3_vision import build_idefics3_vision, idefics3_vision_config
from clika_export.media.qwen2_5_vl_vision import (
    build_qwen2_5_vl_vision,
    qwen2_5_vl_details,
    qwen2_5_vl_vision_config,
)
from clika_export.media.qwen2_vl_video import video_token_of, with_video
from clika_export.media.qwen2_vl_vision import build_qwen2_vl_vision, qwen2_vl_vision_config
from clika_export.media.vision_ops import Weights
from clika_export.readers.safetensors_file import tensor_loaders
from clika_runtime.contract.manifest import Manifest, VisionSpec
from clika_runtime.media.processor_config import PROCESSOR_FILE, read_processor_settings

VISION_FILE = "vision.onnx"
# Where each family keeps its tower in a checkpoint (newest layout first).
_PREFIXES = {
    "idefics3": ("model.vision_model.", "vision_model.", "model.", ""),
    "qwen2_vl": ("model.visual.", "visual."),
}
# Qwen2.5-VL is a qwen2_vl family (its processor, prompts and positions) with a windowed tower.
_FAMILIES = {"idefics3": "idefics3", "smolvlm": "idefics3", "qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_vl"}


def read_json(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file (untrusted): a dict, or a CheckpointError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent.name} has no {path.name}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path.name} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name} must hold a JSON object")
    return data


def tensor_loaders_of(folder: Path) -> dict[str, Callable[[], np.ndarray]]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index.name} has no weight_map")
        files = sorted({str(name) for name in weight_map.values()})
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder.name} has no *.safetensors weights")
    loaders: dict[str, Callable[[], np.ndarray]] = {}
    for name in files:
        loaders.update(tensor_loaders(folder / name))
    return loaders


def tower_reader(
    loaders: dict[str, Callable[[], np.ndarray]], prefixes: tuple[str, ...]
) -> Callable[[str], np.ndarray]:
    def read(name: str) -> np.ndarray:
        for prefix in prefixes:
            if prefix + name in loaders:
                return np.asarray(loaders[prefix + name](), dtype=np.float32)
        raise CheckpointError(
            f"the checkpoint has no vision tensor {name} (looked under {', '.join(prefixes)})"
        )

    return read


def vision_family(config: dict[str, Any]) -> str:
    kind = config.get("model_type")
    if kind not in _FAMILIES:
        raise CheckpointError(
            f"model_type {kind!r} has no vision export (supported: {', '.join(sorted(_FAMILIES))})"
        )
    return _FAMILIES[kind]


def export_vision(source: str | Path, out: str | Path) -> VisionSpec:
    """Write the vision graph of the Hugging Face folder ``source`` into ``out``."""
    source, out = Path(source), Path(out)
    config = read_json(source / "config.json")
    family = vision_family(config)
    read_processor_settings(source)  # refuse a processor config the runtime could not follow, now
    video_token = video_token_of(source, config) if family == "qwen2_vl" else None
    weights = tower_reader(tensor_loaders_of(source), _PREFIXES[family])
    token = config.get("image_token_id", config.get("image_token_index"))
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / PROCESSOR_FILE, out / PROCESSOR_FILE)
    spec = write_vision_graph(
        family, config, weights, out, image_token_id=token if isinstance(token, int) else None
    )
    return with_video(spec, source, out, video_token) if family == "qwen2_vl" else spec


def write_vision_graph(
    family: str, config: dict[str, Any], weights: Weights, out: Path, *, image_token_id: int | None
) -> VisionSpec:
    """Build ``family``'s graph from an HF-shaped ``config`` and tower-relative ``weights`` into ``out``."""
    windowed = config.get("model_type") == "qwen2_5_vl"
    try:
        if windowed:
            spec = qwen2_5_vl_vision_config(config)
        else:
            spec = idefics3_vision_config(config) if family == "idefics3" else qwen2_vl_vision_config(config)
    except (TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
        raise CheckpointError(f"the {family} vision config is malformed: {exc}") from None
    data = ExternalData(out / f"{VISION_FILE}.data")
    graph = GraphBuilder("vision", data)
    try:
        if windowed:
            inputs, output = build_qwen2_5_vl_vision(graph, spec, weights)
            details, text_hidden = qwen2_5_vl_details(spec), spec.base.out_hidden
        elif family == "idefics3":
            inputs, output = build_idefics3_vision(graph, spec, weights)
            details = {
                "patch_size": spec.patch,
                "image_size": spec.image_size,
                "scale_factor": spec.scale,
                "tokens_per_tile": spec.tokens_per_tile,
            }
            text_hidden = spec.text_hidden
        else:
            inputs, output = build_qwen2_vl_vision(graph, spec, weights)
            details = {
                "patch_size": spec.patch,
                "merge_size": spec.merge,
                "temporal_patch_size": spec.temporal,
                "head_dim": spec.head_dim,
                "rope_theta": spec.rope_theta,
            }
            text_hidden = spec.out_hidden
        save_model(graph.model(doc=f"{family} vision tower and projector"), out / VISION_FILE)
    finally:
        data.close()
    return VisionSpec(
        file=VISION_FILE,
        family=family,
        inputs=tuple(inputs),
        outputs=(output,),
        text_hidden_size=text_hidden,
        processor_file=PROCESSOR_FILE,
        embeds_output=output,
        image_token_id=image_token_id,
        details=details,
    )


def attach_vision(folder: str | Path, spec: VisionSpec) -> Manifest:
    """Record ``spec`` in the exported folder's manifest (rewritten in place)."""
    manifest = dataclasses.replace(Manifest.read(folder), vision=spec)
    manifest.check_files(Path(folder))
    manifest.write(Path(folder))
    return manifest
