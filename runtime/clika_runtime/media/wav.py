"""WAV bytes read into float mono samples at the rate an audio encoder takes.

The standard library's ``wave`` reads PCM files (8, 16, 24 or 32-bit
integer samples); channels are averaged into one and the clip is resampled
(``audio_resample``) when its rate is another. The bytes are untrusted:
anything else (no RIFF/WAVE header, a compressed or float format, a
truncated file, more seconds than ``max_seconds``) is a ``WavError`` naming
the problem.
"""

from __future__ import annotations

import io
import struct
import wave

import numpy as np

from clika_runtime.media.audio_resample import resample

_INT_KINDS = {1: np.uint8, 2: np.int16, 4: np.int32}


class WavError(ValueError):
    """Bytes that are no WAV file this reader takes."""


def _pcm(frames: bytes, width: int) -> np.ndarray:
    """Integer PCM samples as floats in [-1, 1)."""
    if width == 3:  # 24-bit little-endian: widen each sample to 32 bits
        raw = np.frombuffer(frames, dtype=np.uint8).reshape(-1, 3)
        wide = np.zeros((raw.shape[0], 4), dtype=np.uint8)
        wide[:, 1:] = raw
        return wide.view("<i4").reshape(-1).astype(np.float64) / 2.0**31
    values = np.frombuffer(frames, dtype=np.dtype(_INT_KINDS[width]).newbyteorder("<"))
    if width == 1:  # 8-bit WAV is unsigned, centered on 128
        return (values.astype(np.float64) - 128.0) / 128.0
    return values.astype(np.float64) / float(2 ** (8 * width - 1))


def read_wav(data: bytes, *, sampling_rate: int = 16000, max_seconds: float = 30.0) -> np.ndarray:
    """float32 [S] mono samples at ``sampling_rate`` Hz from the WAV file ``data``."""
    try:
        with wave.open(io.BytesIO(data), "rb") as reader:
            channels, width, rate = reader.getnchannels(), reader.getsampwidth(), reader.getframerate()
            count = reader.getnframes()
            if width not in (1, 2, 3, 4) or channels < 1 or rate < 1:
                raise WavError(f"a WAV of {width}-byte samples, {channels} channels at {rate} Hz is not read")
            if count > max_seconds * rate:
                raise WavError(f"the WAV holds {count / rate:.2f} s, more than the {max_seconds:g} s allowed")
            frames = reader.readframes(count)
    except WavError:
        raise
    except (wave.Error, EOFError, struct.error, RuntimeError) as exc:
        # RuntimeError: the wave module's own, for a chunk whose length runs past its parent's.
        raise WavError(f"not a PCM WAV file: {exc or 'a chunk runs past the end of the file'}") from None
    whole = len(frames) // (width * channels) * width * channels
    if whole == 0:
        raise WavError("the WAV holds no samples")
    samples = _pcm(frames[:whole], width).reshape(-1, channels).mean(axis=1)
    return resample(samples.astype(np.float32), rate, sampling_rate)
