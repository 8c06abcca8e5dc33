"""A multimodal checkpoint's media towers exported beside its text graphs, by family.

The text model of every multimodal family ``readers.multimodal`` reads takes
media embeddings in its step graph; this writes the tower that makes them
(audio for Qwen2-Audio, vision for the others) and records it in the manifest.
"""

from __future__ import annotations

from pathlib import Path

from clika_export.media.audio_export import attach_audio, export_audio
from clika_export.media.vision_export import attach_vision, export_vision, read_json
from clika_runtime.contract.manifest import Manifest

_AUDIO_FAMILIES = ("qwen2_audio",)


def attach_towers(source: Path, folder: Path) -> Manifest:
    """Export ``source``'s media tower into the exported ``folder`` and record it in its manifest."""
    if read_json(source / "config.json").get("model_type") in _AUDIO_FAMILIES:
        return attach_audio(folder, export_audio(source, folder))
    return attach_vision(folder, export_vision(source, folder))
