"""Whisper-style log-mel features in NumPy against transformers' feature extractor."""

from __future__ import annotations

import numpy as np
import pytest
from audio_signals import speech_like

from clika_runtime.media.audio_features import AudioSettings, log_mel_features

whisper = pytest.importorskip("transformers.models.whisper.feature_extraction_whisper")


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("seconds", [2.5, 31.0])  # padded with silence; cut to the 30 s chunk
def test_log_mel_features_match_transformers(n_mels, seconds):
    wave = speech_like(seconds, seed=n_mels)
    extractor = whisper.WhisperFeatureExtractor(feature_size=n_mels)
    ours = log_mel_features(wave, AudioSettings(n_mels=n_mels))
    # What a transformers user gets (its torch STFT when torch is installed, as here): within 1e-4.
    # torch's float32 FFT picks its kernel by CPU, so one log-mel bin in 384,000 can land 5.7e-5 away
    # from the float64 NumPy path on an AVX-512 machine; the NumPy path below is the exact check.
    called = extractor(wave, sampling_rate=16000, return_tensors="np")["input_features"][0]
    assert ours.shape == called.shape == (n_mels, 3000)
    np.testing.assert_allclose(ours, called, rtol=0, atol=1e-4)
    # Its NumPy path, the one our steps follow, on the same 30 s chunk: bit for bit.
    chunk = np.zeros(480000, np.float32)
    chunk[: min(len(wave), 480000)] = wave[:480000]
    numpy_path = extractor._np_extract_fbank_features(chunk[None], "cpu")[0]
    np.testing.assert_array_equal(ours, numpy_path)
