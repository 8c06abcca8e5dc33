"""WAV bytes into 16 kHz mono samples: PCM widths, channels, resampling, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest
from audio_files import pcm16_values, wav_bytes
from audio_signals import speech_like

from clika_runtime.media.audio_resample import resample
from clika_runtime.media.wav import WavError, read_wav


def tone(rate: int, freq: float = 440.0, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_a_16_khz_mono_wav_reads_back_its_pcm_values():
    wave = speech_like(1.0, seed=2)
    np.testing.assert_array_equal(read_wav(wav_bytes(wave)), pcm16_values(wave))


@pytest.mark.parametrize("width", [1, 2, 4])
def test_each_pcm_width_reads_the_same_tone(width):
    ours = read_wav(wav_bytes(tone(16000), width=width))
    assert np.abs(ours - tone(16000)).max() <= 2.0 / 2 ** (8 * width - 1) + 1e-6


def test_stereo_is_averaged_and_44_1_khz_resampled_to_16_khz():
    left, right = tone(44100, 440.0), tone(44100, 1000.0)
    ours = read_wav(wav_bytes(np.stack([left, right], axis=1), rate=44100))
    expected = (tone(16000, 440.0) + tone(16000, 1000.0)) / 2  # whole periods: no edge effect
    assert ours.shape == (16000,)
    assert np.abs(ours - expected).max() < 1e-3


def test_resampling_down_removes_what_the_new_rate_cannot_hold():
    high = tone(48000, 10000.0)  # above 8 kHz, the Nyquist frequency of 16 kHz
    assert np.abs(resample(high, 48000, 16000)).max() < 1e-3
    assert resample(tone(8000), 8000, 16000).shape == (16000,)


@pytest.mark.parametrize(
    "data,message",
    [
        (b"not a wav at all", "not a PCM WAV file"),
        (wav_bytes(np.zeros(0, np.float32)), "holds no samples"),
        (wav_bytes(np.zeros(31 * 8000, np.float32), rate=8000), "31.00 s, more than the 30 s"),
    ],
)
def test_bad_wav_bytes_are_refused_by_name(data, message):
    with pytest.raises(WavError, match=message):
        read_wav(data)


def test_a_float_wav_is_refused_by_name():
    data = bytearray(wav_bytes(tone(16000)))
    data[20:22] = (3).to_bytes(2, "little")  # WAVE_FORMAT_IEEE_FLOAT
    with pytest.raises(WavError, match="not a PCM WAV file"):
        read_wav(bytes(data))


def test_a_chunk_longer_than_the_file_is_a_wav_error_not_a_runtime_error():
    # Found by the fuzz tier: a damaged 'fmt ' chunk id makes the wave module skip a chunk whose
    # length runs past the RIFF body, and it raised a bare RuntimeError.
    data = bytearray(wav_bytes(tone(1000)))
    del data[12]  # "fmt " loses its "f": every later field shifts by one byte
    with pytest.raises(WavError, match="not a PCM WAV file"):
        read_wav(bytes(data))
