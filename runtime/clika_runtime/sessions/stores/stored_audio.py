"""Audio clips in a stored conversation: kept once by their sha256, the transcript naming them by it.

A session's history holds a clip as a content part ``{"type": "audio",
"audio": <samples>}`` (``chat.media_turns.attach_audio``). Before a store
writes the transcript as JSON, :func:`detach_audio` replaces each such part by
``{"type": "audio", "audio_sha256": <digest>}`` and hands the float32 samples
back keyed by that digest; :func:`attach_audio` puts them back when the
transcript is read. The digest is the one the audio tower and the prefix cache
key the clip by (``media.audio_tower.audio_digest``), so a clip saved, read
back and rendered again finds its KV in the cache (or in a saved KV file), and
a clip that several turns or conversations carry is stored once.

:func:`samples_record` / :func:`samples_from_record` are the stored form: the
float32 little-endian samples, checked against a size bound, their length and
their digest when read (a store's rows are untrusted input).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from clika_runtime.chat.media_turns import AUDIO_PART
from clika_runtime.media.arguments import audio_arrays
from clika_runtime.media.audio_tower import audio_digest
from clika_runtime.sessions.stores.stored_media import StoredImageError
from clika_runtime.sessions.stores.stored_parts import (
    StoredPartKind,
    checked_array,
    held,
)

AUDIO_DIGEST_KEY = "audio_sha256"
# 60 s of float32 samples at 16 kHz: twice the 30 s the audio encoder reads per clip.
MAX_STORED_AUDIO_BYTES = 60 * 16000 * 4


class StoredAudioError(StoredImageError):
    """A clip a store cannot keep or give back (the message names it); a store's media error."""


def samples_record(samples: np.ndarray) -> tuple[int, bytes]:
    """The stored form of float32 [S] samples: their count and little-endian bytes."""
    return int(samples.shape[0]), np.ascontiguousarray(samples, dtype="<f4").tobytes()


def samples_from_record(
    digest: str, count: Any, data: Any, max_bytes: int = MAX_STORED_AUDIO_BYTES
) -> np.ndarray:
    """Samples read back from a stored record, checked: the size bound, the count against the
    bytes, the digest against the samples. Read-only (shared by readers)."""
    where = f"stored audio clip {str(digest)[:16]}..."
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise StoredAudioError(f"{where}: its length {count!r} is not a clip's")
    if count * 4 > max_bytes:
        raise StoredAudioError(f"{where}: {count} samples, more than the store's {max_bytes} bytes")
    if not isinstance(data, bytes) or len(data) != count * 4:
        raise StoredAudioError(f"{where}: its samples do not fill {count} float32 values")
    samples = np.frombuffer(data, dtype="<f4").astype(np.float32)
    samples.flags.writeable = False
    if audio_digest(samples) != digest:
        raise StoredAudioError(f"{where}: its samples do not match their sha256 (a damaged store?)")
    return samples


def _detached(part: Mapping[str, Any], where: str, max_bytes: int, clips: dict[str, np.ndarray]) -> dict:
    samples = checked_array(audio_arrays, part[AUDIO_PART], where, StoredAudioError)
    if samples.nbytes > max_bytes:
        raise StoredAudioError(
            f"{where}: the clip is {len(samples)} samples ({samples.nbytes} bytes), more than the "
            f"{max_bytes} bytes a stored clip may take (the store's max_audio_bytes)"
        )
    digest = audio_digest(samples)
    clips.setdefault(digest, samples)
    rest = {k: v for k, v in part.items() if k != AUDIO_PART}
    return {**rest, AUDIO_DIGEST_KEY: digest}


def _attached(part: Mapping[str, Any], samples_of: Callable[[str], np.ndarray | None], where: str) -> dict:
    found = held(samples_of, part[AUDIO_DIGEST_KEY], where, "audio clip", StoredAudioError)
    rest = {k: v for k, v in part.items() if k != AUDIO_DIGEST_KEY}
    return {**rest, AUDIO_PART: found}


def _has_samples(part: Any) -> bool:
    """An audio part holding its samples (what a session's history has)."""
    return isinstance(part, Mapping) and part.get("type") == AUDIO_PART and AUDIO_PART in part


def _named_digests(part: Any) -> list[str]:
    """The digest a stored audio part names (none: not a stored audio part)."""
    if not isinstance(part, Mapping) or part.get("type") != AUDIO_PART or AUDIO_PART in part:
        return []
    digest = part.get(AUDIO_DIGEST_KEY)
    return [digest] if isinstance(digest, str) else []


# A clip detached by its float32 samples' digest, given back by it (bound: MAX_STORED_AUDIO_BYTES).
STORED_AUDIO = StoredPartKind(_has_samples, _detached, _attached, _named_digests, MAX_STORED_AUDIO_BYTES)
detach_audio = STORED_AUDIO.detach
audio_digests = STORED_AUDIO.digests
attach_audio = STORED_AUDIO.attach
