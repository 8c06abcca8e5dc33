"""Export a Qwen2-Audio checkpoint's audio encoder + projector as ``audio.onnx``.

Reads the Hugging Face folder, builds ``qwen2_audio_encoder``'s graph into
``out`` and returns the numbers a runner needs (mel bins, text width, the
audio token id). The manifest has no audio entry yet, so the folder records
nothing about it; the graph stands beside the text graphs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clika_export.checkpoint import CheckpointError
from clika_export.graph.builder import ExternalData, GraphBuilder, save_model
from clika_export.media.qwen2_audio_encoder import build_qwen2_audio, qwen2_audio_config
from clika_export.media.vision_export import read_json, tensor_loaders_of, tower_reader

AUDIO_FILE = "audio.onnx"
_PREFIXES = ("model.audio_tower.", "audio_tower.", "model.", "")


def export_audio(source: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the audio graph of the Qwen2-Audio folder ``source`` into ``out``."""
    source, out = Path(source), Path(out)
    config = read_json(source / "config.json")
    if config.get("model_type") != "qwen2_audio":
        raise CheckpointError(
            f"model_type {config.get('model_type')!r} has no audio export (supported: qwen2_audio)"
        )
    try:
        spec = qwen2_audio_config(config)
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise CheckpointError(f"the qwen2_audio audio config is malformed: {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    data = ExternalData(out / f"{AUDIO_FILE}.data")
    graph = GraphBuilder("audio", data)
    try:
        inputs, output = build_qwen2_audio(graph, spec, tower_reader(tensor_loaders_of(source), _PREFIXES))
        save_model(graph.model(doc="qwen2_audio audio encoder and projector"), out / AUDIO_FILE)
    finally:
        data.close()
    token = config.get("audio_token_id", config.get("audio_token_index"))
    return {
        "file": AUDIO_FILE,
        "inputs": list(inputs),
        "output": output,
        "n_mels": spec.n_mels,
        "text_hidden_size": spec.text_hidden,
        "audio_token_id": token if isinstance(token, int) else None,
    }
