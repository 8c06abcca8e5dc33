"""Image and audio files from clients, fuzzed: PNG, JPEG and WAV headers and bodies.

Each case starts from a real small file and damages it (bytes changed, cut,
inserted, header fields set to extremes). Property: decoded pixels/samples of
the documented shape and dtype, or the decoder's own error (ImageFileError,
WavError); never another exception.
"""

from __future__ import annotations

import io
import struct
import wave

import numpy as np
from fuzz_budget import budget, count
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from clika_runtime.media.image_files import ImageFileError, decode_image
from clika_runtime.media.wav import WavError, read_wav


def _image(kind: str, width: int, height: int) -> bytes:
    out = io.BytesIO()
    pixels = np.arange(width * height * 3, dtype=np.uint8).reshape(height, width, 3)
    Image.fromarray(pixels).save(out, format=kind)
    return out.getvalue()


def _wav(channels: int, width: int, rate: int, frames: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(bytes(range(256)) * (frames * channels * width // 256 + 1))
    return out.getvalue()


SEEDS = {kind: _image(kind, 7, 5) for kind in ("PNG", "JPEG", "GIF", "BMP")}


@st.composite
def damaged(draw, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(0, 6))):
        action = draw(st.sampled_from(["set", "cut", "insert", "u32"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if action == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[at : at + draw(st.integers(1, 64))]
        elif action == "insert":
            data[at:at] = draw(st.binary(max_size=32))
        elif len(data) >= at + 4:  # a length or dimension field set to an extreme
            data[at : at + 4] = struct.pack(
                ">I", draw(st.sampled_from([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 65535]))
            )
    return bytes(data)


images = st.sampled_from(sorted(SEEDS)).flatmap(lambda kind: damaged(SEEDS[kind])) | st.binary(max_size=200)


@given(data=images)
@budget(1500)
def test_damaged_images_decode_or_are_an_image_file_error(data):
    count("image decoder (PNG/JPEG/GIF/BMP)")
    try:
        pixels = decode_image(data, "image 0")
    except ImageFileError as error:
        assert str(error).startswith("image 0: ")
        return
    assert pixels.dtype == np.uint8 and pixels.ndim == 3 and pixels.shape[2] == 3


wavs = st.builds(
    _wav, st.integers(1, 3), st.sampled_from([1, 2, 3, 4]), st.sampled_from([8000, 16000, 44100]),
    st.integers(0, 400),
).flatmap(damaged) | st.binary(max_size=100).map(lambda tail: b"RIFF\xff\xff\xff\xffWAVEfmt " + tail)  # fmt: skip


@given(data=wavs)
@budget(1500)
def test_damaged_wav_files_read_or_are_a_wav_error(data):
    count("WAV reader")
    try:
        samples = read_wav(data, max_seconds=30.0)
    except WavError as error:
        assert str(error)
        return
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert samples.size <= 30 * 16000 + 1
