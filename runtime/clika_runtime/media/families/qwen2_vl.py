"""Qwen2-VL / Qwen2.5-VL: merge-ordered patches through a ViT whose positions the runtime computes.

A request's images are embedded in one graph run (the frame mask keeps them
apart), with the rotary tables and mask ``media.qwen2_vl_positions`` computes
from their grids (and, on a windowed Qwen2.5-VL tower, ``window_*`` inputs);
each ``<|image_pad|>`` expands to one pad per merged patch, and the text model
rotates the prompt by M-RoPE over the media's grids. A clip's sampled frames
pair into temporal patches (``media.qwen2_vl_video`` names the sampling), its
``<|video_pad|>`` a token of its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clika_runtime.contract.manifest import ManifestError, VisionSpec
from clika_runtime.media.arguments import VideoClip
from clika_runtime.media.embedding import MediaEmbedding, image_digest
from clika_runtime.media.placeholders import QWEN2_VL_IMAGE, QWEN2_VL_VIDEO, qwen2_vl_image_text
from clika_runtime.media.qwen2_5_vl_windows import is_windowed, window_inputs
from clika_runtime.media.qwen2_vl import (
    Qwen2VLPatches,
    Qwen2VLSettings,
    preprocess_qwen2_vl,
    preprocess_qwen2_vl_video,
)
from clika_runtime.media.qwen2_vl_config import qwen2_vl_settings
from clika_runtime.media.qwen2_vl_positions import frame_attention_bias, rotary_tables
from clika_runtime.media.qwen2_vl_video import Qwen2VLVideoSettings, read_video_settings
from clika_runtime.media.video import sample_frames
from clika_runtime.media.vision_graph import VisionGraph

NAME = "qwen2_vl"
PROCESSOR_TYPES = ("Qwen2VLImageProcessor", "Qwen2_5_VLImageProcessor")
SETTINGS = Qwen2VLSettings
IMAGE_MARKER = QWEN2_VL_IMAGE
VIDEO_MARKER = QWEN2_VL_VIDEO
VIDEO_TOKEN = True  # <|video_pad|>: its positions take a clip's rows in prompt order with the images'
MROPE = True

settings_from_config = qwen2_vl_settings


def check_spec(spec: VisionSpec) -> None:
    """A windowed tower's manifest must name its window size."""
    window = spec.details.get("window_size")
    if is_windowed(spec) and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise ManifestError(f"{spec.file}: the manifest's window_size must be a positive integer")


def video_settings(folder: Path, settings: Qwen2VLSettings) -> Qwen2VLVideoSettings:
    """How clips are sampled and resized (the video processor's own bounds)."""
    return read_video_settings(folder, settings)


def reads_video(folder: Path, spec: VisionSpec) -> bool:
    """True when the manifest names its ``<|video_pad|>`` token, on a tower without windows
    (Qwen2.5-VL's video positions count seconds)."""
    return spec.video_token_id is not None and not is_windowed(spec)


def embeds_videos(spec: VisionSpec, settings: Qwen2VLSettings) -> bool:
    return not is_windowed(spec)


def embed_images(graph: VisionGraph, images: list[np.ndarray]) -> list[MediaEmbedding]:
    """The images' embeddings, those not kept from earlier requests in one graph run."""
    digests = [image_digest(image) for image in images]
    found = {digest: kept for digest in digests if (kept := graph.cache.get(digest)) is not None}
    missing = {digest: image for digest, image in zip(digests, images, strict=True) if digest not in found}
    if missing:
        for embedding in _images(graph, list(missing.values())):
            graph.cache.put(embedding.digest, embedding)
            found[embedding.digest] = embedding
    return [found[digest] for digest in digests]


def _images(graph: VisionGraph, images: list[np.ndarray]) -> list[MediaEmbedding]:
    # All images of a request in one call: the frame mask keeps them apart.
    patches = [preprocess_qwen2_vl(image, graph.settings) for image in images]
    out = graph.embeds(_feeds(graph.spec, patches))
    merge = int(graph.spec.details["merge_size"])
    counts = [p.num_tokens // merge**2 for p in patches]
    rows = np.split(out, np.cumsum(counts)[:-1])
    grids = [(int(t), int(h) // merge, int(w) // merge) for t, h, w in (p.grid_thw for p in patches)]
    return [
        MediaEmbedding(r, qwen2_vl_image_text(n), image_digest(image), grid=grid)
        for r, n, image, grid in zip(rows, counts, images, grids, strict=True)
    ]


def embed_videos(
    graph: VisionGraph, clips: list[VideoClip], *, fps: float | None, max_frames: int | None
) -> list[MediaEmbedding]:
    """Each clip sampled at ``fps`` (at most ``max_frames``; by default the video processor's,
    2 a second), its frames paired into temporal patches and embedded in one graph run."""
    video: Qwen2VLVideoSettings = graph.video
    fps = video.fps if fps is None else fps
    max_frames = video.max_frames if max_frames is None else max_frames
    sampled = [sample_frames(clip, fps=fps, max_frames=max_frames) for clip in clips]
    return [_cached_clip(graph, clip) for clip in sampled]


def _cached_clip(graph: VisionGraph, clip: VideoClip) -> MediaEmbedding:
    digest = image_digest(clip.frames, clip.timestamps)
    # A conversation renders its videos on every turn.
    return graph.cache.one(digest, lambda: _clip(graph, clip, digest), refresh=False)


def _clip(graph: VisionGraph, clip: VideoClip, digest: str) -> MediaEmbedding:
    pixels = graph.video.pixels
    patches = preprocess_qwen2_vl_video(clip.frames, pixels)
    out = graph.embeds(_feeds(graph.spec, [patches]))
    starts = clip.timestamps[:: pixels.temporal_patch_size]
    merge = pixels.merge_size
    t, h, w = patches.grid_thw
    text = QWEN2_VL_VIDEO * int(out.shape[0])
    times = tuple(float(s) for s in starts)
    return MediaEmbedding(out, text, digest, times, grid=(int(t), int(h) // merge, int(w) // merge))


def _feeds(spec: VisionSpec, patches: list[Qwen2VLPatches]) -> dict[str, np.ndarray]:
    """The graph's inputs for ``patches``: pixels, rotary tables and frame mask (and windows)."""
    grids = [p.grid_thw for p in patches]
    d = spec.details
    cos, sin = rotary_tables(grids, head_dim=d["head_dim"], merge=d["merge_size"], theta=d["rope_theta"])
    feeds = {
        "pixel_values": np.concatenate([p.pixel_values for p in patches]),
        "rotary_cos": cos,
        "rotary_sin": sin,
        "attention_bias": frame_attention_bias(grids),
    }
    if is_windowed(spec):  # Qwen2.5-VL: its blocks attend in windows of merged patches
        feeds.update(window_inputs(grids, merge=d["merge_size"], window=d["window_size"]).feeds())
    return feeds
