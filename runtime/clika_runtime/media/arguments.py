"""Checks on the media a caller passes (``images=``, ``audio=``, ``videos=``).

Every refusal is a ValueError (TypeError for a value that is no array at all)
that names the argument and the item, so a caller sees which input is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clika_runtime.tensor import Tensor

_FLOATS = (np.float16, np.float32, np.float64)


@dataclass(frozen=True)
class VideoClip:
    """Frames uint8 [N, H, W, 3] and their times in seconds [N] (strictly increasing)."""

    frames: np.ndarray
    timestamps: np.ndarray


@dataclass(frozen=True)
class VideoInput:
    """A video among a prompt's images, in prompt order: the caller's (frames, timestamps) pair,
    checked when the tower reads it (``video_clips``)."""

    pair: Any


def _array(value: Any, where: str) -> np.ndarray:
    try:
        return Tensor(value).numpy()
    except TypeError as exc:
        raise TypeError(f"{where}: {exc}") from None


def _sequence(given: Any, argument: str, max_count: int | None) -> list[Any]:
    if isinstance(given, (np.ndarray, Tensor)) or not isinstance(given, Sequence):
        raise TypeError(f"{argument} must be a sequence (a list of tensors), got {type(given).__name__}")
    items = list(given)
    if max_count is not None and len(items) > max_count:
        raise ValueError(f"{argument}: {len(items)} given, this model takes at most {max_count} per request")
    return items


def _pixels(array: np.ndarray, where: str) -> np.ndarray:
    """uint8 pixels from a uint8 array, or from floats in [0, 1] (scaled by 255, rounded)."""
    if array.dtype == np.uint8:
        return array
    if array.dtype.type in _FLOATS:
        if array.size and not (np.isfinite(array).all() and array.min() >= 0.0 and array.max() <= 1.0):
            raise ValueError(f"{where}: float pixels must lie in [0, 1]")
        return np.rint(array.astype(np.float64) * 255.0).astype(np.uint8)
    raise ValueError(f"{where}: dtype {array.dtype} is not a pixel type (use uint8, or floats in [0, 1])")


def image_arrays(images: Any, *, max_count: int | None = None, argument: str = "images") -> list[np.ndarray]:
    """``images`` as uint8 [H, W, 3] arrays (RGB, channels last)."""
    out = []
    for i, image in enumerate(_sequence(images, argument, max_count)):
        where = f"{argument}[{i}]"
        array = _array(image, where)
        if array.ndim != 3 or array.shape[2] != 3:
            raise ValueError(f"{where}: expected an [H, W, 3] RGB image, got shape {list(array.shape)}")
        if array.shape[0] < 1 or array.shape[1] < 1:
            raise ValueError(f"{where}: the image is empty (shape {list(array.shape)})")
        out.append(np.ascontiguousarray(_pixels(array, where)))
    return out


def audio_arrays(audio: Any, *, max_count: int | None = None, argument: str = "audio") -> list[np.ndarray]:
    """``audio`` as float32 [S] mono waveforms."""
    out = []
    for i, clip in enumerate(_sequence(audio, argument, max_count)):
        where = f"{argument}[{i}]"
        array = _array(clip, where)
        if array.ndim != 1 or array.shape[0] < 1:
            raise ValueError(f"{where}: expected [S] float mono samples, got shape {list(array.shape)}")
        if array.dtype.type not in _FLOATS:
            raise ValueError(f"{where}: dtype {array.dtype} is not a sample type (use float32)")
        if not np.isfinite(array).all():
            raise ValueError(f"{where}: samples must be finite")
        out.append(array.astype(np.float32))
    return out


def video_clips(videos: Any, *, max_count: int | None = None, argument: str = "videos") -> list[VideoClip]:
    """``videos`` ((frames [N, H, W, 3], timestamps [N] seconds) pairs) checked."""
    out = []
    for i, pair in enumerate(_sequence(videos, argument, max_count)):
        where = f"{argument}[{i}]"
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"{where}: expected a (frames, timestamps) pair")
        frames, times = _array(pair[0], f"{where} frames"), _array(pair[1], f"{where} timestamps")
        if frames.ndim != 4 or frames.shape[3] != 3 or 0 in frames.shape:
            raise ValueError(f"{where}: frames must be [N, H, W, 3], got shape {list(frames.shape)}")
        if times.shape != (frames.shape[0],):
            raise ValueError(
                f"{where}: timestamps must be [N] with N = {frames.shape[0]} frames, got shape {list(times.shape)}"
            )
        if times.dtype.kind not in "fiu" or not np.isfinite(times).all():
            raise ValueError(f"{where}: timestamps must be finite numbers (seconds)")
        times = times.astype(np.float64)
        if (times < 0).any() or (np.diff(times) <= 0).any():
            raise ValueError(f"{where}: timestamps must be non-negative and strictly increasing")
        out.append(VideoClip(np.ascontiguousarray(_pixels(frames, f"{where} frames")), times))
    return out
