"""Read a checkpoint's ``preprocessor_config.json`` into the right processor's settings.

The ``image_processor_type`` the file names picks the vision family whose
processor reads it (``media.families``); the file's fields are checked as
``processor_fields`` does, so a bad file fails with the field's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clika_runtime.media.families import VISION_FAMILIES
from clika_runtime.media.processor_fields import (
    PROCESSOR_FILE,
    ProcessorConfigError,
    processor_kind,
    read_processor_json,
)

# The file's name and error type are read from here by the exporter too.
__all__ = ["PROCESSOR_FILE", "ProcessorConfigError", "processor_settings", "read_processor_settings"]


def processor_settings(config: Mapping[str, Any]) -> Any:
    """The settings for the processor ``config`` names (``image_processor_type``)."""
    kind = processor_kind(config)
    for family in VISION_FAMILIES.values():
        if kind in family.PROCESSOR_TYPES:
            return family.settings_from_config(config)
    known = ", ".join(name for family in VISION_FAMILIES.values() for name in family.PROCESSOR_TYPES)
    raise ProcessorConfigError(
        f"{PROCESSOR_FILE}: image processor {kind or '(none)'!r} is not supported ({known})"
    )


def read_processor_settings(folder: str | Path) -> Any:
    return processor_settings(read_processor_json(folder))
