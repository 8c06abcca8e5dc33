"""Idefics3 / SmolVLM (and SmolVLM2's videos): tiles plus a global view through a SigLIP tower.

An image is tiled by ``media.idefics3`` and embedded alone (its tiles are the
graph's batch); its ``<image>`` marker expands to the tiles' row/column tokens
and the global view's. A checkpoint whose processor config has SmolVLM2's
``video_sampling`` reads videos: each clip's sampled frames as unsplit images,
its ``<video>`` marker expanded as ``media.smolvlm_video`` writes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clika_runtime.contract.manifest import VisionSpec
from clika_runtime.media.arguments import VideoClip
from clika_runtime.media.embedding import MediaEmbedding, image_digest
from clika_runtime.media.idefics3 import Idefics3Settings, preprocess_idefics3
from clika_runtime.media.idefics3_config import idefics3_settings
from clika_runtime.media.placeholders import IDEFICS3_IMAGE, idefics3_image_text
from clika_runtime.media.placeholders import VIDEO_MARKER as SMOLVLM2_VIDEO
from clika_runtime.media.processor_fields import processor_kind, read_processor_json
from clika_runtime.media.smolvlm_video import clip_duration, preprocess_smolvlm_frames, smolvlm_video_text
from clika_runtime.media.video import sample_frames
from clika_runtime.media.vision_graph import VisionGraph

NAME = "idefics3"
PROCESSOR_TYPES = ("Idefics3ImageProcessor", "SmolVLMImageProcessor")
SETTINGS = Idefics3Settings
IMAGE_MARKER = IDEFICS3_IMAGE
VIDEO_MARKER = SMOLVLM2_VIDEO
VIDEO_TOKEN = False  # a video's frames expand to <image> tokens
MROPE = False

settings_from_config = idefics3_settings


def check_spec(spec: VisionSpec) -> None:
    """Nothing beyond the graph's inputs, which the tower checks."""


def video_settings(folder: Path, settings: Idefics3Settings) -> None:
    """None: a clip's sampling is the processor config's ``video_sampling`` (``settings.video``)."""
    return None


def reads_video(folder: Path, spec: VisionSpec) -> bool:
    """True when the folder's processor config has SmolVLM2's ``video_sampling``; an unreadable
    one reads False: the first image's request names its problem."""
    try:
        config = read_processor_json(folder)
        return processor_kind(config) in PROCESSOR_TYPES and idefics3_settings(config).video is not None
    except ValueError:
        return False


def embeds_videos(spec: VisionSpec, settings: Idefics3Settings) -> bool:
    return settings.video is not None


def embed_images(graph: VisionGraph, images: list[np.ndarray]) -> list[MediaEmbedding]:
    """Each image in its own graph run (its tiles the batch), or from the cache."""
    return [_cached_image(graph, image) for image in images]


def _cached_image(graph: VisionGraph, image: np.ndarray) -> MediaEmbedding:
    return graph.cache.one(image_digest(image), lambda: _image(graph, image))


def _image(graph: VisionGraph, image: np.ndarray) -> MediaEmbedding:
    tiles = preprocess_idefics3(image, graph.settings)
    out = graph.embeds({"pixel_values": tiles.pixel_values})
    text = idefics3_image_text(tiles.rows, tiles.cols, int(out.shape[1]))
    return MediaEmbedding(out.reshape(-1, out.shape[-1]), text, image_digest(image))


def embed_videos(
    graph: VisionGraph, clips: list[VideoClip], *, fps: float | None, max_frames: int | None
) -> list[MediaEmbedding]:
    """Each clip sampled at the rate and count its ``video_sampling`` names (``fps`` and
    ``max_frames`` do not apply: SmolVLM2's prompt text states the checkpoint's sampling)."""
    return [_clip(graph, clip) for clip in clips]


def _clip(graph: VisionGraph, clip: VideoClip) -> MediaEmbedding:
    sampling = graph.settings.video
    duration = clip_duration(clip.timestamps)  # the whole clip's, as the prompt states it
    clip = sample_frames(clip, fps=sampling.fps, max_frames=sampling.max_frames)
    digest = image_digest(clip.frames, clip.timestamps)
    # A conversation renders its videos on every turn, too.
    return graph.cache.one(digest, lambda: _sampled_clip(graph, clip, duration, digest), refresh=False)


def _sampled_clip(graph: VisionGraph, clip: VideoClip, duration: float, digest: str) -> MediaEmbedding:
    out = graph.embeds({"pixel_values": preprocess_smolvlm_frames(clip, graph.settings)})
    text = smolvlm_video_text(clip.timestamps, duration, int(out.shape[1]))
    times = tuple(float(t) for t in clip.timestamps)
    return MediaEmbedding(out.reshape(-1, out.shape[-1]), text, digest, times)
