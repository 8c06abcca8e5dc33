"""A Qwen2-VL / Qwen2.5-VL ``preprocessor_config.json`` read into ``Qwen2VLSettings``
(the pixel bounds from ``min_pixels`` / ``max_pixels`` or the newer ``size`` entry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clika_runtime.media.processor_fields import (
    PROCESSOR_FILE,
    ProcessorConfigError,
    field,
    pixels_steps,
    positive,
)
from clika_runtime.media.qwen2_vl import Qwen2VLSettings


def qwen2_vl_settings(config: Mapping[str, Any]) -> Qwen2VLSettings:
    d = Qwen2VLSettings()
    size = field(config, "size", dict, {})
    min_pixels = field(config, "min_pixels", int, field(size, "shortest_edge", int, d.min_pixels))
    max_pixels = field(config, "max_pixels", int, field(size, "longest_edge", int, d.max_pixels))
    if not 0 < min_pixels <= max_pixels:
        raise ProcessorConfigError(
            f"{PROCESSOR_FILE}: need 0 < min_pixels <= max_pixels, got {min_pixels}, {max_pixels}"
        )
    return Qwen2VLSettings(
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        patch_size=positive(config, "patch_size", d.patch_size),
        temporal_patch_size=positive(config, "temporal_patch_size", d.temporal_patch_size),
        merge_size=positive(config, "merge_size", d.merge_size),
        resize=field(config, "do_resize", bool, True),
        **pixels_steps(config, d.mean, d.std),
    )
