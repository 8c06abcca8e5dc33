"""Test audio: a speech-like wave (sweeping tones, noise and a silent gap) at 16 kHz."""

from __future__ import annotations

import numpy as np


def speech_like(seconds: float, seed: int) -> np.ndarray:
    """Tones sweeping through the mel range plus noise, with a silent gap."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    wave = 0.3 * np.sin(2 * np.pi * (200 + 900 * t) * t) + 0.05 * rng.standard_normal(t.shape)
    wave[len(wave) // 3 : len(wave) // 2] = 0.0
    return wave.astype(np.float32)
