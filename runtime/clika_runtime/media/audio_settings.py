"""A feature extractor's settings, read from untrusted JSON into ``AudioSettings``.

Two shapes carry them: a Whisper-style checkpoint's ``preprocessor_config.json``
(``feature_size``, ``sampling_rate``, ``n_fft``, ``hop_length``,
``chunk_length``) at export time, and the manifest's ``audio.details``
(``AudioSettings``' own field names) at run time. Each field must be a
positive integer; a missing one takes the extractor's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clika_runtime.media.audio_features import AudioSettings

# preprocessor_config.json's name -> AudioSettings' field
_EXTRACTOR_FIELDS = {
    "feature_size": "n_mels",
    "sampling_rate": "sampling_rate",
    "n_fft": "n_fft",
    "hop_length": "hop",
    "chunk_length": "chunk_seconds",
}


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 20:
        raise ValueError(f"{where} must be a positive integer, got {value!r}")
    return value


def settings_from_details(details: Mapping[str, Any], where: str = "audio.details") -> AudioSettings:
    """``AudioSettings`` from a manifest's ``audio.details`` (field names as the dataclass's)."""
    if not isinstance(details, Mapping):
        raise ValueError(f"{where} must be an object")
    defaults = AudioSettings()
    values = {
        name: _positive(details.get(name, getattr(defaults, name)), f"{where}.{name}")
        for name in _EXTRACTOR_FIELDS.values()
    }
    return AudioSettings(**values)


def settings_from_extractor(config: Mapping[str, Any], n_mels: int, where: str) -> AudioSettings:
    """``AudioSettings`` from a ``preprocessor_config.json`` (``n_mels``: the encoder's mel bins)."""
    if not isinstance(config, Mapping):
        raise ValueError(f"{where} must hold a JSON object")
    details = {field: config[key] for key, field in _EXTRACTOR_FIELDS.items() if config.get(key) is not None}
    settings = settings_from_details({"n_mels": n_mels, **details}, where)
    if settings.n_mels != n_mels:
        raise ValueError(
            f"{where}: feature_size {settings.n_mels} differs from the encoder's {n_mels} mel bins"
        )
    return settings


def details_of(settings: AudioSettings) -> dict[str, int]:
    """What the manifest's ``audio.details`` records."""
    return {name: int(getattr(settings, name)) for name in _EXTRACTOR_FIELDS.values()}
