"""Audio in ``clika chat``: ``/audio PATH.wav`` attaches a clip to the next message; saved chats keep it.

An attached clip rides the next user turn (the session keeps it in its
history as an audio part). A saved conversation stores each clip's float32
samples as base64, losslessly, so a resumed chat renders the very same clip
and finds its KV by the samples' digest.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

import numpy as np

from clika_cli.saved_parts import map_parts
from clika_runtime.media.wav import WavError, read_wav

_DATA = "audio_f32"  # a saved audio part's key: its float32 little-endian samples, base64
# A 30 s clip at 48 kHz in 32-bit stereo is 11.5 MB: a larger file is no clip this chat takes.
MAX_WAV_BYTES = 16 << 20


def read_audio_attachment(path: str, supports_audio: bool, sampling_rate: int | None) -> np.ndarray:
    """The samples of the WAV file at ``path`` for ``/audio`` (ValueError naming the problem)."""
    if not path:
        raise ValueError("/audio PATH: name a WAV file")
    if not supports_audio or sampling_rate is None:
        raise ValueError("this model takes no audio; /audio needs a model with an audio graph")
    file = Path(path.strip().strip("'\""))
    where = f"/audio {path}"
    try:
        if not file.is_file():
            raise ValueError(f"{where}: no such WAV file")
        if file.stat().st_size > MAX_WAV_BYTES:
            raise ValueError(f"{where}: the file is larger than {MAX_WAV_BYTES >> 20} MB")
        data = file.read_bytes()
    except OSError as exc:
        raise ValueError(f"{where}: {exc.strerror or exc}") from None
    try:
        return read_wav(data, sampling_rate=sampling_rate)
    except WavError as exc:
        raise ValueError(f"{where}: {exc}") from None


def storable_audio(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each audio part's samples as base64 float32 (what a store keeps)."""
    return map_parts(messages, _encoded)


def restored_audio(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Saved ``messages`` with each stored audio part back as samples."""
    return map_parts(messages, _decoded)


def _encoded(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") != "audio" or "audio" not in part:
        return part
    samples = np.ascontiguousarray(part["audio"], dtype="<f4")
    return {"type": "audio", _DATA: base64.b64encode(samples.tobytes()).decode()}


def _decoded(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") != "audio" or _DATA not in part:
        return part
    try:
        raw = base64.b64decode(part[_DATA], validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError("a saved audio clip is not valid base64") from None
    if not raw or len(raw) % 4:
        raise ValueError("a saved audio clip holds no whole float32 samples")
    return {"type": "audio", "audio": np.frombuffer(raw, dtype="<f4").astype(np.float32)}
