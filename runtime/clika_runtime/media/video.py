"""Sample a video clip's frames at a target rate, keeping their timestamps.

A clip arrives as every decoded frame with its presentation time; a vision
tower reads a few frames per second. Sampling picks, for each instant of a
uniform ``fps`` grid starting at the first frame, the frame on screen at that
instant (the last one whose timestamp is not later), so the sampled times are
real frame times and a variable frame rate is handled. ``max_frames`` spreads
the grid over the whole clip instead of truncating it.
"""

from __future__ import annotations

import numpy as np

from clika_runtime.media.arguments import VideoClip


def sample_frames(clip: VideoClip, *, fps: float, max_frames: int) -> VideoClip:
    """The frames shown at ``fps`` instants over the clip (at most ``max_frames``, at least one)."""
    if not fps > 0:
        raise ValueError(f"the sampling rate must be positive, got fps={fps}")
    if max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, got {max_frames}")
    times = clip.timestamps
    duration = float(times[-1] - times[0])
    natural = int(np.floor(duration * fps + 1e-9)) + 1  # grid instants that fit in the clip
    if natural <= max_frames:
        instants = times[0] + np.arange(natural) / fps
    else:
        instants = times[0] + np.linspace(0.0, duration, max_frames)
    shown = np.searchsorted(times, instants + 1e-9, side="right") - 1
    picked = np.unique(np.clip(shown, 0, len(times) - 1))
    return VideoClip(clip.frames[picked], times[picked])
