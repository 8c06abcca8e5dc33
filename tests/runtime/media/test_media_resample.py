"""The NumPy resampler against Pillow itself, bit for bit, on random sizes."""

from __future__ import annotations

import numpy as np
import pytest

from clika_runtime.media.resample import resize_uint8

Image = pytest.importorskip("PIL.Image")


@pytest.mark.parametrize("resample", [1, 2, 3])  # lanczos, bilinear, bicubic
def test_resize_equals_pillow(resample):
    rng = np.random.default_rng(resample)
    for _ in range(25):
        height, width = (int(v) for v in rng.integers(1, 200, 2))
        out_h, out_w = (int(v) for v in rng.integers(1, 260, 2))
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        expected = np.asarray(Image.fromarray(image).resize((out_w, out_h), resample=resample))
        np.testing.assert_array_equal(resize_uint8(image, out_h, out_w, resample), expected)


def test_unknown_filters_and_empty_sizes_are_refused():
    image = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError, match="resampling filter 5"):
        resize_uint8(image, 2, 2, 5)
    with pytest.raises(ValueError, match="0x2"):
        resize_uint8(image, 0, 2, 1)
