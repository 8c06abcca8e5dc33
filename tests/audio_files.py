"""WAV files written with the standard library, for the audio tests."""

from __future__ import annotations

import io
import wave

import numpy as np


def wav_bytes(samples: np.ndarray, rate: int = 16000, *, width: int = 2) -> bytes:
    """PCM WAV bytes of float ``samples`` ([S] mono or [S, channels]) in [-1, 1]."""
    frames = samples.reshape(len(samples), -1) if samples.ndim == 2 else samples.reshape(-1, 1)
    scale = float(2 ** (8 * width - 1) - 1)
    kinds = {1: np.uint8, 2: "<i2", 4: "<i4"}
    if width == 1:
        pcm = np.round(frames * 127.0 + 128.0).astype(np.uint8)
    else:
        pcm = np.round(frames * scale).astype(kinds[width])
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(frames.shape[1])
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(pcm.tobytes())
    return out.getvalue()


def pcm16_values(samples: np.ndarray) -> np.ndarray:
    """What 16-bit PCM keeps of float ``samples``, as floats again."""
    return (np.round(samples * 32767.0) / 32768.0).astype(np.float32)
