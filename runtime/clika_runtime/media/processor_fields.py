"""A checkpoint's ``preprocessor_config.json``, read as untrusted JSON field by field.

Each field is type-checked and a missing one takes the processor's own default
(what transformers does), so a bad file fails here with the field's name rather
than deep inside a resize. The family modules' settings readers
(``idefics3_config``, ``qwen2_vl_config``) are built from these checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clika_runtime.media.resample import FILTERS

PROCESSOR_FILE = "preprocessor_config.json"


class ProcessorConfigError(ValueError):
    """A processor config this runtime cannot follow."""


def field(config: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``config[key]`` checked against ``kind`` (a bool is no number here), or ``default`` when absent."""
    value = config.get(key)
    if value is None:
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: {key} must be {names}, got {value!r}")
    return value


def positive(config: Mapping[str, Any], key: str, default: int) -> int:
    value = field(config, key, int, default)
    if value < 1:
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: {key} must be a positive integer, got {value}")
    return value


def edge(config: Mapping[str, Any], key: str, default: int) -> int:
    """``config[key]["longest_edge"]``, a positive integer."""
    entry = field(config, key, dict, {"longest_edge": default})
    return positive(entry, "longest_edge", default)


def _triple(config: Mapping[str, Any], key: str, default: tuple[float, ...]) -> tuple[float, float, float]:
    value = field(config, key, (list, tuple, float, int), default)
    values = [value] * 3 if isinstance(value, (float, int)) else list(value)
    if len(values) != 3 or not all(isinstance(v, (float, int)) and not isinstance(v, bool) for v in values):
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: {key} must be 3 numbers, got {value!r}")
    if key == "image_std" and any(v == 0 for v in values):
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: image_std must not contain 0")
    return (float(values[0]), float(values[1]), float(values[2]))


def pixels_steps(config: Mapping[str, Any], mean: tuple, std: tuple) -> dict[str, Any]:
    """The resample filter, rescale factor, mean and std every image processor's settings take."""
    resample = field(config, "resample", int, None)
    if resample is not None and resample not in FILTERS:
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: resample {resample} is not a supported filter")
    rescale = field(config, "rescale_factor", (float, int), 1 / 255)
    steps: dict[str, Any] = {
        "rescale_factor": float(rescale) if field(config, "do_rescale", bool, True) else None,
        "mean": _triple(config, "image_mean", mean) if field(config, "do_normalize", bool, True) else None,
        "std": _triple(config, "image_std", std) if field(config, "do_normalize", bool, True) else None,
    }
    if resample is not None:
        steps["resample"] = resample
    return steps


def processor_kind(config: Mapping[str, Any]) -> str:
    """The processor ``config`` names (``image_processor_type``, a ``Fast`` suffix dropped; "" if none)."""
    kind = field(config, "image_processor_type", str, "")
    return kind[: -len("Fast")] if kind.endswith("Fast") else kind


def read_processor_json(folder: str | Path) -> dict[str, Any]:
    """The folder's ``preprocessor_config.json`` as a JSON object."""
    path = Path(folder) / PROCESSOR_FILE
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProcessorConfigError(f"{Path(folder).name} has no {PROCESSOR_FILE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProcessorConfigError(f"{PROCESSOR_FILE} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ProcessorConfigError(f"{PROCESSOR_FILE} must hold a JSON object")
    return config
