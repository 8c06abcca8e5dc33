"""The Qwen2-VL / Qwen2.5-VL image processor: smart resize, normalize, patchify.

The image is resized to edges that are multiples of ``patch_size *
merge_size`` with its pixel count inside ``[min_pixels, max_pixels]``, then
flattened into ``patch_size`` squares ordered so that each ``merge_size x
merge_size`` block of neighbours is contiguous (the merger folds them into one
token). A still image fills ``temporal_patch_size`` identical frames; a video
clip groups that many consecutive frames into one temporal patch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from clika_runtime.media.pixels import normalized_chw
from clika_runtime.media.resample import resize_uint8

_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class Qwen2VLSettings:
    """The processor config fields this pipeline reads (``preprocessor_config.json``)."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    resize: bool = True
    resample: int = 3  # Pillow's BICUBIC
    rescale_factor: float | None = 1 / 255
    mean: tuple[float, float, float] | None = _CLIP_MEAN
    std: tuple[float, float, float] | None = _CLIP_STD


@dataclass(frozen=True)
class Qwen2VLPatches:
    """One image (or clip) ready for the vision tower."""

    pixel_values: np.ndarray  # float32 [t * h * w, 3 * temporal_patch_size * patch_size**2]
    grid_thw: tuple[int, int, int]

    @property
    def num_tokens(self) -> int:
        """Placeholder tokens the merged image fills in the prompt."""
        t, h, w = self.grid_thw
        return t * h * w


def smart_size(height: int, width: int, s: Qwen2VLSettings) -> tuple[int, int]:
    """The resized (height, width): multiples of patch*merge, pixel count within bounds."""
    factor = s.patch_size * s.merge_size
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"image aspect ratio must be under 200, got {height}x{width}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > s.max_pixels:
        beta = math.sqrt(height * width / s.max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < s.min_pixels:
        beta = math.sqrt(s.min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _patchify(frames: np.ndarray, s: Qwen2VLSettings) -> Qwen2VLPatches:
    """float32 [T, 3, H, W] (T a multiple of temporal_patch_size) -> merged-order patches."""
    frames_n, channels, height, width = frames.shape
    p, m, tp = s.patch_size, s.merge_size, s.temporal_patch_size
    gt, gh, gw = frames_n // tp, height // p, width // p
    patches = frames.reshape(gt, tp, channels, gh // m, m, p, gw // m, m, p)
    # -> [gt, gh/m, gw/m, m, m, C, tp, p, p]: merge blocks contiguous, each patch C-major.
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return Qwen2VLPatches(
        np.ascontiguousarray(patches.reshape(gt * gh * gw, channels * tp * p * p)), (gt, gh, gw)
    )


def _normalized(image: np.ndarray, size: tuple[int, int], s: Qwen2VLSettings) -> np.ndarray:
    if s.resize:
        image = resize_uint8(image, size[0], size[1], s.resample)
    return normalized_chw(image, rescale_factor=s.rescale_factor, mean=s.mean, std=s.std)


def _checked_size(height: int, width: int, s: Qwen2VLSettings) -> tuple[int, int]:
    size = smart_size(height, width, s) if s.resize else (height, width)
    factor = s.patch_size * s.merge_size
    if size[0] % factor or size[1] % factor:
        raise ValueError(f"image of {height}x{width} is not a whole number of {factor}-pixel merged patches")
    return size


def preprocess_qwen2_vl(image: np.ndarray, settings: Qwen2VLSettings) -> Qwen2VLPatches:
    """uint8 [H, W, 3] -> the patches and grid the Qwen2-VL vision tower reads."""
    size = _checked_size(image.shape[0], image.shape[1], settings)
    frame = _normalized(image, size, settings)
    return _patchify(np.repeat(frame[None], settings.temporal_patch_size, axis=0), settings)


def preprocess_qwen2_vl_video(frames: np.ndarray, settings: Qwen2VLSettings) -> Qwen2VLPatches:
    """uint8 [N, H, W, 3] sampled frames -> patches; the last frame repeats to fill a temporal patch."""
    size = _checked_size(frames.shape[1], frames.shape[2], settings)
    normalized = np.stack([_normalized(f, size, settings) for f in frames])
    short = -len(normalized) % settings.temporal_patch_size
    if short:
        normalized = np.concatenate([normalized, np.repeat(normalized[-1:], short, axis=0)])
    return _patchify(normalized, settings)
