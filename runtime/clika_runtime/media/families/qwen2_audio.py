"""Qwen2-Audio: Whisper-style log-mel features of one 30 s chunk through its encoder and projector.

The encoder's input is fixed (3000 feature frames, 1500 positions after its
conv); the padding keys are masked and a clip keeps its first
``encoder_tokens(frames)`` rows, one ``<|AUDIO|>`` each.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from clika_runtime.contract.manifest import ManifestError
from clika_runtime.media.audio_features import (
    AudioSettings,
    encoder_attention_bias,
    encoder_tokens,
    log_mel_features,
    valid_frames,
)
from clika_runtime.media.placeholders import QWEN2_AUDIO, QWEN2_AUDIO_CLIP, qwen2_audio_text

NAME = "qwen2_audio"
MARKER = QWEN2_AUDIO
CLIP_TEXT = QWEN2_AUDIO_CLIP
INPUTS = frozenset({"input_features", "attention_bias"})
# The encoder's fixed input: 3000 feature frames (one chunk), 1500 positions after its conv.
_FRAMES = 3000


def check_settings(settings: AudioSettings) -> None:
    if settings.chunk_samples // settings.hop != _FRAMES:
        raise ManifestError(f"manifest audio.details give chunks of other than {_FRAMES} feature frames")


def tokens(samples: int, settings: AudioSettings) -> int:
    return encoder_tokens(valid_frames(samples, settings))


def embed(
    run: Callable[[dict[str, np.ndarray]], np.ndarray], clip: np.ndarray, settings: AudioSettings
) -> tuple[np.ndarray, str]:
    frames = valid_frames(len(clip), settings)
    out = run(
        {
            "input_features": log_mel_features(clip, settings)[None],
            "attention_bias": encoder_attention_bias(frames),
        }
    )
    kept = encoder_tokens(frames)
    return np.ascontiguousarray(out[0, :kept], dtype=np.float32), qwen2_audio_text(kept)
