"""Resample a mono waveform to another rate, band-limited, in NumPy.

The clip's spectrum is cut (or zero-extended) at the new Nyquist frequency
and transformed back at the new length: an ideal low-pass, so downsampling
does not alias. Clips are at most one 30 s chunk, so one FFT of the whole
clip is cheap.
"""

from __future__ import annotations

import numpy as np


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """float32 ``samples`` at ``from_rate`` Hz as float32 samples at ``to_rate`` Hz."""
    if from_rate <= 0 or to_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {from_rate} and {to_rate}")
    samples = np.asarray(samples, dtype=np.float32)
    if from_rate == to_rate or samples.size == 0:
        return samples
    length = max(1, round(samples.size * to_rate / from_rate))
    spectrum = np.fft.rfft(samples.astype(np.float64))
    bins = length // 2 + 1
    kept = np.zeros(bins, dtype=np.complex128)
    kept[: min(bins, spectrum.size)] = spectrum[: min(bins, spectrum.size)]
    return (np.fft.irfft(kept, n=length) * (length / samples.size)).astype(np.float32)
