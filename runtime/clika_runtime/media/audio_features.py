"""Whisper-style log-mel features in NumPy (Whisper, Qwen2-Audio and their kin).

The waveform (16 kHz mono float) is padded with silence or cut to one chunk
(30 s), framed by a periodic Hann window of ``n_fft`` samples every ``hop``
samples (centered, reflect-padded), turned into a power spectrum, projected
on a Slaney-normalized mel filter bank, and put on Whisper's log scale
(log10, floored 8 below the peak, then ``(x + 4) / 4``). Every step follows
transformers' NumPy feature extractor in the same precision (the spectrum is
held in complex64 as there), so the features equal its; its torch STFT path
(the default where torch is installed) differs from both by float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_MEL_FLOOR = 1e-10


@dataclass(frozen=True)
class AudioSettings:
    """The feature extractor's fields (``preprocessor_config.json`` of a Whisper-style checkpoint)."""

    n_mels: int = 80  # feature_size
    sampling_rate: int = 16000
    n_fft: int = 400
    hop: int = 160
    chunk_seconds: int = 30

    @property
    def chunk_samples(self) -> int:
        return self.chunk_seconds * self.sampling_rate


def _hertz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    mels = 3.0 * freq / 200.0
    high = freq >= 1000.0
    mels[high] = 15.0 + np.log(freq[high] / 1000.0) * (27.0 / np.log(6.4))
    return mels


def _mel_to_hertz(mels: np.ndarray) -> np.ndarray:
    freq = 200.0 * mels / 3.0
    high = mels >= 15.0
    freq[high] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels[high] - 15.0))
    return freq


def mel_filters(s: AudioSettings) -> np.ndarray:
    """float64 [n_fft // 2 + 1, n_mels]: Slaney-normalized triangles from 0 Hz to 8 kHz."""
    bins = 1 + s.n_fft // 2
    edges = _mel_to_hertz(
        np.linspace(_hertz_to_mel(np.array([0.0]))[0], _hertz_to_mel(np.array([8000.0]))[0], s.n_mels + 2)
    )
    fft_freqs = np.linspace(0, s.sampling_rate // 2, bins)
    widths = np.diff(edges)
    slopes = edges[None, :] - fft_freqs[:, None]
    down, up = -slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]
    triangles = np.maximum(np.zeros(1), np.minimum(down, up))
    return triangles * (2.0 / (edges[2 : s.n_mels + 2] - edges[: s.n_mels]))[None, :]


def log_mel_features(samples: np.ndarray, s: AudioSettings) -> np.ndarray:
    """float32 [n_mels, chunk_samples / hop] features of one waveform (padded or cut to one chunk)."""
    wave = np.zeros(s.chunk_samples, dtype=np.float32)
    clip = np.asarray(samples, dtype=np.float32)[: s.chunk_samples]
    wave[: len(clip)] = clip
    half = s.n_fft // 2
    padded = np.pad(wave, (half, half), mode="reflect").astype(np.float64)
    window = np.hanning(s.n_fft + 1)[:-1]  # periodic Hann
    frames = np.lib.stride_tricks.sliding_window_view(padded, s.n_fft)[:: s.hop]
    spectrum = np.fft.rfft(frames * window, axis=1).astype(np.complex64)
    power = (np.abs(spectrum, dtype=np.float64) ** 2).T
    mel = np.maximum(_MEL_FLOOR, np.dot(mel_filters(s).T, power))
    log_spec = np.log10(mel).astype(np.float32)[:, :-1]
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def valid_frames(num_samples: int, s: AudioSettings) -> int:
    """Feature frames that carry the clip (the rest of the chunk is padding silence)."""
    return min(-(-min(num_samples, s.chunk_samples) // s.hop), s.chunk_samples // s.hop)


def encoder_attention_bias(frames: int, positions: int = 1500) -> np.ndarray:
    """float32 [positions, positions]: -inf on the key columns past the clip (after the stride-2 conv)."""
    keys = (frames - 1) // 2 + 1
    bias = np.zeros((positions, positions), dtype=np.float32)
    bias[:, keys:] = -np.inf
    return bias


def encoder_tokens(frames: int) -> int:
    """Audio tokens the clip fills after the encoder's stride-2 conv and pooling by 2."""
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1
