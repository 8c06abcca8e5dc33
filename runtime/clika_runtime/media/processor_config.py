"""Read a checkpoint's ``preprocessor_config.json`` into a processor's settings.

The file is untrusted input: each field is type-checked and a missing one
takes the processor's own default (what transformers does), so a bad file
fails here with the field's name rather than deep inside a resize.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clika_runtime.media.idefics3 import Idefics3Settings, VideoSampling
from clika_runtime.media.qwen2_vl import Qwen2VLSettings
from clika_runtime.media.resample import FILTERS

PROCESSOR_FILE = "preprocessor_config.json"
_IDEFICS3 = ("Idefics3ImageProcessor", "SmolVLMImageProcessor")
_QWEN2_VL = ("Qwen2VLImageProcessor", "Qwen2_5_VLImageProcessor")


class ProcessorConfigError(ValueError):
    """A processor config this runtime cannot follow."""


def _field(config: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``config[key]`` checked against ``kind`` (a bool is no number here), or ``default`` when absent."""
    value = config.get(key)
    if value is None:
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: {key} must be {names}, got {value!r}")
    return value


def _positive(config: Mapping[str, Any], key: str, default: int) -> int:
    value = _field(config, key, int, default)
    if value < 1:
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: {key} must be a positive integer, got {value}")
    return value


def _edge(config: Mapping[str, Any], key: str, default: int) -> int:
    entry = _field(config, key, dict, {"longest_edge": default})
    return _positive(entry, "longest_edge", default)


def _triple(config: Mapping[str, Any], key: str, default: tuple[float, ...]) -> tuple[float, float, float]:
    value = _field(config, key, (list, tuple, float, int), default)
    values = [value] * 3 if isinstance(value, (float, int)) else list(value)
    if len(values) != 3 or not all(isinstance(v, (float, int)) and not isinstance(v, bool) for v in values):
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: {key} must be 3 numbers, got {value!r}")
    if key == "image_std" and any(v == 0 for v in values):
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: image_std must not contain 0")
    return (float(values[0]), float(values[1]), float(values[2]))


def _pixels_steps(config: Mapping[str, Any], mean: tuple, std: tuple) -> dict[str, Any]:
    resample = _field(config, "resample", int, None)
    if resample is not None and resample not in FILTERS:
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: resample {resample} is not a supported filter")
    rescale = _field(config, "rescale_factor", (float, int), 1 / 255)
    steps: dict[str, Any] = {
        "rescale_factor": float(rescale) if _field(config, "do_rescale", bool, True) else None,
        "mean": _triple(config, "image_mean", mean) if _field(config, "do_normalize", bool, True) else None,
        "std": _triple(config, "image_std", std) if _field(config, "do_normalize", bool, True) else None,
    }
    if resample is not None:
        steps["resample"] = resample
    return steps


def idefics3_settings(config: Mapping[str, Any]) -> Idefics3Settings:
    d = Idefics3Settings()
    resize = _field(config, "do_resize", bool, True)
    return Idefics3Settings(
        longest_edge=_edge(config, "size", d.longest_edge or 1456) if resize else None,
        tile_edge=_edge(config, "max_image_size", d.tile_edge),
        split=_field(config, "do_image_splitting", bool, d.split),
        video=_video_sampling(config),
        **_pixels_steps(config, d.mean, d.std),
    )


def _video_sampling(config: Mapping[str, Any]) -> VideoSampling | None:
    """SmolVLM2's ``video_sampling`` (None when the checkpoint reads images only)."""
    entry = _field(config, "video_sampling", dict, None)
    if entry is None:
        return None
    d = VideoSampling()
    fps = _field(entry, "fps", (float, int), d.fps)
    if not fps > 0:
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: video_sampling.fps must be positive, got {fps}")
    return VideoSampling(
        fps=float(fps),
        max_frames=_positive(entry, "max_frames", d.max_frames),
        longest_edge=_edge(entry, "video_size", d.longest_edge),
    )


def qwen2_vl_settings(config: Mapping[str, Any]) -> Qwen2VLSettings:
    d = Qwen2VLSettings()
    size = _field(config, "size", dict, {})
    min_pixels = _field(config, "min_pixels", int, _field(size, "shortest_edge", int, d.min_pixels))
    max_pixels = _field(config, "max_pixels", int, _field(size, "longest_edge", int, d.max_pixels))
    if not 0 < min_pixels <= max_pixels:
        raise ProcessorConfigError(
            f"{PROCESSOR_FILE}: need 0 < min_pixels <= max_pixels, got {min_pixels}, {max_pixels}"
        )
    return Qwen2VLSettings(
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        patch_size=_positive(config, "patch_size", d.patch_size),
        temporal_patch_size=_positive(config, "temporal_patch_size", d.temporal_patch_size),
        merge_size=_positive(config, "merge_size", d.merge_size),
        resize=_field(config, "do_resize", bool, True),
        **_pixels_steps(config, d.mean, d.std),
    )


def processor_settings(config: Mapping[str, Any]) -> Idefics3Settings | Qwen2VLSettings:
    """The settings for the processor ``config`` names (``image_processor_type``)."""
    kind = _field(config, "image_processor_type", str, "")
    kind = kind[: -len("Fast")] if kind.endswith("Fast") else kind
    if kind in _IDEFICS3:
        return idefics3_settings(config)
    if kind in _QWEN2_VL:
        return qwen2_vl_settings(config)
    known = ", ".join((*_IDEFICS3, *_QWEN2_VL))
    raise ProcessorConfigError(
        f"{PROCESSOR_FILE}: image processor {kind or '(none)'!r} is not supported ({known})"
    )


def read_processor_settings(folder: str | Path) -> Idefics3Settings | Qwen2VLSettings:
    path = Path(folder) / PROCESSOR_FILE
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProcessorConfigError(f"{Path(folder).name} has no {PROCESSOR_FILE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProcessorConfigError(f"{PROCESSOR_FILE} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ProcessorConfigError(f"{PROCESSOR_FILE} must hold a JSON object")
    return processor_settings(config)
