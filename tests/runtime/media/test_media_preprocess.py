"""Image preprocessing in NumPy against transformers' own processors.

The reference is transformers' Pillow-backed processor built here from a
config dict (what a checkpoint's preprocessor_config.json holds); ours reads
the same dict and must give the same pixels within 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest

from clika_runtime.media.idefics3 import preprocess_idefics3
from clika_runtime.media.processor_config import ProcessorConfigError, processor_settings
from clika_runtime.media.qwen2_vl import preprocess_qwen2_vl, preprocess_qwen2_vl_video

pytest.importorskip("PIL")
idefics3_pil = pytest.importorskip("transformers.models.idefics3.image_processing_pil_idefics3")
qwen2_vl_pil = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
smolvlm_pil = pytest.importorskip("transformers.models.smolvlm.image_processing_pil_smolvlm")

IDEFICS3_CONFIG = {
    "image_processor_type": "Idefics3ImageProcessor",
    "do_convert_rgb": True,
    "do_image_splitting": True,
    "do_normalize": True,
    "do_pad": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "max_image_size": {"longest_edge": 64},
    "resample": 1,
    "rescale_factor": 1 / 255,
    "size": {"longest_edge": 160},
}
QWEN2_VL_CONFIG = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "min_pixels": 56 * 56,
    "max_pixels": 28 * 28 * 40,
    "merge_size": 2,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "resample": 3,
    "rescale_factor": 1 / 255,
}
# Tall, wide, square, tiny and larger-than-the-cap images.
SHAPES = [(37, 91), (120, 45), (64, 64), (9, 13), (300, 211)]


def _image(height: int, width: int, seed: int) -> np.ndarray:
    """A smooth gradient plus noise: resampling filters see both edges and flat areas."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / max(width - 1, 1), y * 255 / max(height - 1, 1), (x + y) % 256], axis=-1)
    return np.clip(base + rng.normal(0, 30, base.shape), 0, 255).astype(np.uint8)


def _reference(processor_class, config):
    kwargs = {k: v for k, v in config.items() if k != "image_processor_type"}
    return processor_class(**kwargs)


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_idefics3_pixels_match_transformers(shape, split):
    config = {**IDEFICS3_CONFIG, "do_image_splitting": split}
    image = _image(*shape, seed=shape[0])
    ref = _reference(idefics3_pil.Idefics3ImageProcessorPil, config)(
        [image], return_tensors="np", return_row_col_info=True
    )
    ours = preprocess_idefics3(image, processor_settings(config))
    expected = ref["pixel_values"][0]
    assert ours.pixel_values.shape == expected.shape
    np.testing.assert_allclose(ours.pixel_values, expected, rtol=0, atol=1e-5)
    assert (ours.rows, ours.cols) == (ref["rows"][0][0], ref["cols"][0][0])
    assert ref["pixel_attention_mask"][0].all()  # tiles are whole: no padding to carry


@pytest.mark.parametrize("shape", SHAPES[:3])
def test_smolvlm_processor_is_the_idefics3_pipeline(shape):
    config = {**IDEFICS3_CONFIG, "image_processor_type": "SmolVLMImageProcessor"}
    image = _image(*shape, seed=shape[0] + 1)
    ref = _reference(smolvlm_pil.SmolVLMImageProcessorPil, config)([image], return_tensors="np")
    ours = preprocess_idefics3(image, processor_settings(config))
    np.testing.assert_allclose(ours.pixel_values, ref["pixel_values"][0], rtol=0, atol=1e-5)


def test_idefics3_two_images_in_one_prompt_match_transformers():
    """Images of a prompt are processed independently; the reference pads them to the most tiles."""
    images = [_image(37, 150, 1), _image(64, 64, 2)]
    ref = _reference(idefics3_pil.Idefics3ImageProcessorPil, IDEFICS3_CONFIG)([images], return_tensors="np")
    settings = processor_settings(IDEFICS3_CONFIG)
    ours = np.concatenate([preprocess_idefics3(image, settings).pixel_values for image in images])
    np.testing.assert_allclose(ours, ref["pixel_values"][0][: len(ours)], rtol=0, atol=1e-5)
    assert not ref["pixel_attention_mask"][0][len(ours) :].any()  # the rest is padding


@pytest.mark.parametrize("shape", [*SHAPES, (500, 700)])
def test_qwen2_vl_patches_match_transformers(shape):
    image = _image(*shape, seed=shape[1])
    ref = _reference(qwen2_vl_pil.Qwen2VLImageProcessorPil, QWEN2_VL_CONFIG)([image], return_tensors="np")
    ours = preprocess_qwen2_vl(image, processor_settings(QWEN2_VL_CONFIG))
    assert ours.pixel_values.shape == ref["pixel_values"].shape
    np.testing.assert_allclose(ours.pixel_values, ref["pixel_values"], rtol=0, atol=1e-5)
    assert list(ours.grid_thw) == ref["image_grid_thw"][0].tolist()


def test_qwen2_vl_video_of_one_still_frame_is_the_image():
    """A still image is one temporal patch of a repeated frame, so a 1-frame clip equals it."""
    settings = processor_settings(QWEN2_VL_CONFIG)
    image = _image(70, 90, 5)
    clip = preprocess_qwen2_vl_video(image[None], settings)
    still = preprocess_qwen2_vl(image, settings)
    np.testing.assert_array_equal(clip.pixel_values, still.pixel_values)
    assert clip.grid_thw == still.grid_thw


def test_qwen2_vl_video_groups_consecutive_frames():
    settings = processor_settings(QWEN2_VL_CONFIG)
    frames = np.stack([_image(56, 84, s) for s in range(3)])
    clip = preprocess_qwen2_vl_video(frames, settings)
    assert clip.grid_thw[0] == 2  # three frames pad to two temporal patches
    first = preprocess_qwen2_vl(frames[0], settings).pixel_values
    # The first temporal patch holds frames 0 and 1: its frame-0 half equals the still frame's.
    half = first.shape[1] // (3 * 2)
    per_channel = clip.pixel_values[: first.shape[0]].reshape(first.shape[0], 3, 2, half)
    np.testing.assert_array_equal(per_channel[:, :, 0], first.reshape(first.shape[0], 3, 2, half)[:, :, 0])
    assert not np.array_equal(per_channel[:, :, 1], per_channel[:, :, 0])


def test_float_pixels_in_unit_range_read_as_their_uint8_values():
    from clika_runtime.media.arguments import image_arrays

    image = _image(20, 30, 7)
    (as_float,) = image_arrays([image.astype(np.float32) / 255])
    np.testing.assert_array_equal(as_float, image)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"image_processor_type": "CLIPImageProcessor"}, "not supported"),
        ({**QWEN2_VL_CONFIG, "patch_size": 0}, "patch_size"),
        ({**QWEN2_VL_CONFIG, "image_std": [0.2, 0.0, 0.3]}, "image_std"),
        ({**QWEN2_VL_CONFIG, "min_pixels": 10**9}, "min_pixels"),
        ({**IDEFICS3_CONFIG, "max_image_size": {"longest_edge": "big"}}, "longest_edge"),
        ({**IDEFICS3_CONFIG, "resample": 7}, "resample"),
        ({**IDEFICS3_CONFIG, "do_image_splitting": "yes"}, "do_image_splitting"),
    ],
)
def test_bad_processor_configs_are_refused_by_field(config, message):
    with pytest.raises(ProcessorConfigError, match=message):
        processor_settings(config)
