"""Export a Qwen2-Audio checkpoint's audio encoder + projector as ``audio.onnx``.

Reads the Hugging Face folder, builds ``qwen2_audio_encoder``'s graph into
``out`` and returns the manifest's ``AudioSpec``: the graph's names, the text
width, the audio token id and the feature extractor's settings (from the
checkpoint's ``preprocessor_config.json``, the extractor's defaults without
one). ``attach_audio`` records it in an exported folder's manifest.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from clika_export.checkpoint import CheckpointError
from clika_export.graph.builder import ExternalData, GraphBuilder, save_model
from clika_export.media.qwen2_audio_encoder import FRAMES, build_qwen2_audio, qwen2_audio_config
from clika_export.media.vision_export import read_json, tensor_loaders_of, tower_reader
from clika_runtime.contract.manifest import AudioSpec, Manifest
from clika_runtime.media.audio_features import AudioSettings
from clika_runtime.media.audio_settings import details_of, settings_from_extractor
from clika_runtime.media.processor_config import PROCESSOR_FILE

AUDIO_FILE = "audio.onnx"
_PREFIXES = ("model.audio_tower.", "audio_tower.", "model.", "")


def _extractor_settings(source: Path, n_mels: int) -> AudioSettings:
    path = source / PROCESSOR_FILE
    config = read_json(path) if path.is_file() else {}
    try:
        settings = settings_from_extractor(config, n_mels, PROCESSOR_FILE)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    if settings.chunk_samples // settings.hop != FRAMES:
        raise CheckpointError(
            f"{PROCESSOR_FILE}: {settings.chunk_seconds} s chunks at {settings.sampling_rate} Hz, hop "
            f"{settings.hop} give {settings.chunk_samples // settings.hop} frames; the encoder reads {FRAMES}"
        )
    return settings


def export_audio(source: str | Path, out: str | Path) -> AudioSpec:
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
    settings = _extractor_settings(source, spec.n_mels)
    token = config.get("audio_token_id", config.get("audio_token_index"))
    out.mkdir(parents=True, exist_ok=True)
    data = ExternalData(out / f"{AUDIO_FILE}.data")
    graph = GraphBuilder("audio", data)
    try:
        inputs, output = build_qwen2_audio(graph, spec, tower_reader(tensor_loaders_of(source), _PREFIXES))
        save_model(graph.model(doc="qwen2_audio audio encoder and projector"), out / AUDIO_FILE)
    finally:
        data.close()
    return AudioSpec(
        file=AUDIO_FILE,
        family="qwen2_audio",
        inputs=tuple(inputs),
        outputs=(output,),
        text_hidden_size=spec.text_hidden,
        embeds_output=output,
        audio_token_id=token if isinstance(token, int) and not isinstance(token, bool) else None,
        details=details_of(settings),
    )


def attach_audio(folder: str | Path, spec: AudioSpec) -> Manifest:
    """Record ``spec`` in the exported folder's manifest (rewritten in place)."""
    manifest = dataclasses.replace(Manifest.read(folder), audio=spec)
    manifest.check_files(Path(folder))
    manifest.write(Path(folder))
    return manifest
