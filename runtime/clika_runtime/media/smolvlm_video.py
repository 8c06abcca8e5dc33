"""Videos for SmolVLM2 (an Idefics3 vision tower): frames as unsplit images, timestamps in the prompt.

SmolVLM2 reads a video as its sampled frames, each one image at one tile's size
(the longest edge resized to ``video_sampling.video_size`` first, then the
frame squared to the tile, never split), and its chat template's ``<video>``
marker expands, as SmolVLM2's processor writes it, to an introduction naming
the frame count in words and the clip's length as ``H:MM:SS``, then per frame
``"\\nFrame from MM:SS:"`` and the frame's global-view image tokens, then a
blank line. The frames come from ``media.video.sample_frames`` (the frame on
screen at each instant of the ``fps`` grid), so their timestamps are the
clip's own.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import numpy as np

from clika_runtime.media.arguments import VideoClip
from clika_runtime.media.idefics3 import Idefics3Settings, preprocess_idefics3
from clika_runtime.media.placeholders import idefics3_image_text

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    """``n`` (0 to 999) in English words as the processor writes a frame count ("one hundred and five")."""
    if not 0 <= n < 1000:
        raise ValueError(f"a frame count in words is 0 to 999, got {n}")
    hundreds, rest = divmod(n, 100)
    if rest < 20:
        low = _ONES[rest]
    else:
        tens, ones = divmod(rest, 10)
        low = _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if not hundreds:
        return low
    return f"{_ONES[hundreds]} hundred" + (f" and {low}" if rest else "")


def clip_duration(timestamps: np.ndarray) -> float:
    """How long a clip lasts: its last frame's time plus one frame's spacing (the median), which
    is ``frames / fps`` for a clip sampled evenly from 0; the last time for a single frame."""
    if len(timestamps) < 2:
        return float(timestamps[-1])
    return float(timestamps[-1] + np.median(np.diff(timestamps)))


def smolvlm_video_text(timestamps: np.ndarray, duration: float, tokens_per_frame: int) -> str:
    """The text a ``<video>`` marker expands to for frames at ``timestamps`` (seconds)."""
    frame = idefics3_image_text(0, 0, tokens_per_frame)
    text = (
        f"You are provided the following series of {number_words(len(timestamps))} frames "
        f"from a {timedelta(seconds=int(duration))} [H:MM:SS] video.\n"
    )
    for second in timestamps:
        minutes, seconds = int(second // 60), int(second % 60)
        text += f"\nFrame from {minutes:02d}:{seconds:02d}:{frame}"
    return text + "\n\n"


def preprocess_smolvlm_frames(clip: VideoClip, settings: Idefics3Settings) -> np.ndarray:
    """A clip's (sampled) frames as the tower reads them: float32 [frames, 3, tile, tile]."""
    if settings.video is None:
        raise ValueError("videos: this checkpoint's processor config has no video_sampling")
    per_frame = dataclasses.replace(settings, longest_edge=settings.video.longest_edge, split=False)
    return np.concatenate([preprocess_idefics3(frame, per_frame).pixel_values for frame in clip.frames])
