"""Media families: one module per checkpoint family, picked by the manifest entry's ``family``.

A vision family module follows :class:`~clika_runtime.media.vision_family.VisionFamily`,
an audio one :class:`~clika_runtime.media.audio_family.AudioFamily`; a new
family is its module plus its line below. ``vision_family`` / ``audio_family``
refuse an unknown family by name; ``find_vision_family`` answers None for one.
"""

from __future__ import annotations

from clika_runtime.contract.manifest import ManifestError
from clika_runtime.media.audio_family import AudioFamily
from clika_runtime.media.families import idefics3, qwen2_audio, qwen2_vl
from clika_runtime.media.vision_family import VisionFamily

# In this order processor_config tries their processor types (and lists them when none matches).
VISION_FAMILIES: dict[str, VisionFamily] = {
    idefics3.NAME: idefics3,
    qwen2_vl.NAME: qwen2_vl,
}
AUDIO_FAMILIES: dict[str, AudioFamily] = {
    qwen2_audio.NAME: qwen2_audio,
}


def find_vision_family(name: str) -> VisionFamily | None:
    return VISION_FAMILIES.get(name)


def vision_family(name: str) -> VisionFamily:
    """The vision family module of a manifest's ``vision.family``."""
    family = VISION_FAMILIES.get(name)
    if family is None:
        raise ManifestError(f"vision family {name!r} is not supported (supported: {sorted(VISION_FAMILIES)})")
    return family


def audio_family(name: str) -> AudioFamily:
    """The audio family module of a manifest's ``audio.family``."""
    family = AUDIO_FAMILIES.get(name)
    if family is None:
        raise ManifestError(f"audio family {name!r} is not supported (supported: {tuple(AUDIO_FAMILIES)})")
    return family
