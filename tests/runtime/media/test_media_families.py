"""The media family registry: each family module provides its protocol, and names pick them."""

from __future__ import annotations

import dataclasses
import re

import pytest

from clika_runtime.contract.manifest import ManifestError, VisionSpec
from clika_runtime.media.audio_family import AudioFamily
from clika_runtime.media.families import AUDIO_FAMILIES, VISION_FAMILIES, audio_family, vision_family
from clika_runtime.media.image_prompts import ImagePrompts
from clika_runtime.media.processor_config import ProcessorConfigError, processor_settings
from clika_runtime.media.vision_family import VisionFamily
from clika_runtime.media.vision_tower import reads_video


def _members(protocol: type) -> set[str]:
    """The constants and functions a protocol declares."""
    return set(protocol.__annotations__) | {k for k in vars(protocol) if not k.startswith("_")}


@pytest.mark.parametrize(
    ("families", "protocol"), [(VISION_FAMILIES, VisionFamily), (AUDIO_FAMILIES, AudioFamily)]
)
def test_every_registered_family_provides_its_protocol_under_its_own_name(families, protocol):
    for name, module in families.items():
        assert module.NAME == name
        missing = {member for member in _members(protocol) if not hasattr(module, member)}
        assert not missing, f"{module.__name__} lacks {sorted(missing)}"


def test_each_vision_familys_processor_types_read_into_its_settings():
    for family in VISION_FAMILIES.values():
        for kind in family.PROCESSOR_TYPES:
            for named in (kind, f"{kind}Fast"):
                assert isinstance(processor_settings({"image_processor_type": named}), family.SETTINGS)
    known = ", ".join(kind for family in VISION_FAMILIES.values() for kind in family.PROCESSOR_TYPES)
    with pytest.raises(
        ProcessorConfigError, match=re.escape(f"'CLIPImageProcessor' is not supported ({known})")
    ):
        processor_settings({"image_processor_type": "CLIPImageProcessor"})


def test_unknown_families_are_refused_by_name(tmp_path):
    with pytest.raises(
        ManifestError,
        match=re.escape("vision family 'llava' is not supported (supported: ['idefics3', 'qwen2_vl'])"),
    ):
        vision_family("llava")
    with pytest.raises(
        ManifestError,
        match=re.escape("audio family 'whisper' is not supported (supported: ('qwen2_audio',))"),
    ):
        audio_family("whisper")
    spec = VisionSpec(
        "vision.onnx", "llava", ("pixel_values",), ("image_embeds",), 8, "preprocessor_config.json"
    )
    with pytest.raises(ManifestError, match="images for the llava vision graph are not supported yet"):
        ImagePrompts(tmp_path, dataclasses.replace(spec, image_token_id=1), tokenizer=None)  # type: ignore[arg-type]
    assert not reads_video(tmp_path, dataclasses.replace(spec, video_token_id=2))
