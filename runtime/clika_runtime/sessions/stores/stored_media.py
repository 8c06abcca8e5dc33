"""Images in a stored conversation: kept once by their sha256, the transcript naming them by it.

A session's history holds an image as a content part ``{"type": "image",
"image": <tensor>}`` (``chat.media_turns``). A store keeps the transcript as
JSON, so before saving, :func:`detach_images` replaces each such part by
``{"type": "image", "image_sha256": <digest>}`` and hands the pixels back keyed
by that digest; :func:`attach_images` puts them back when the transcript is
read. The digest is the one the vision tower and the prefix cache key the
image by (``media.embedding.image_digest`` over the uint8 pixels), so an
image saved, read back and rendered again finds its KV in the cache, and an
image that appears in several turns or conversations is stored once. A video
part ``{"type": "video", "video": (frames, timestamps)}`` is stored as
``{"type": "video", "frames_sha256": [...], "timestamps": [...]}``, each frame
kept as an image.

:func:`pixels_record` / :func:`pixels_from_record` are the stored form: the
uint8 ``[H, W, 3]`` pixels, zlib-compressed, checked against their digest and a
size bound when read (a store's rows are untrusted input).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from clika_runtime.chat.media_turns import IMAGE_PART, VIDEO_PART
from clika_runtime.media.arguments import image_arrays, video_clips
from clika_runtime.media.embedding import image_digest
from clika_runtime.sessions.stores.stored_parts import (
    StoredPartKind,
    checked_array,
    held,
)

DIGEST_KEY = "image_sha256"
FRAMES_KEY = "frames_sha256"  # a stored video part's frames, each kept as an image
TIMES_KEY = "timestamps"
# 4096 x 4096 RGB pixels: a bigger image is refused by a store (its limit is a setting).
MAX_STORED_IMAGE_BYTES = 4096 * 4096 * 3


class StoredImageError(ValueError):
    """An image a store cannot keep or give back (the message names it)."""


def _detached(part: Mapping[str, Any], where: str, max_bytes: int, images: dict[str, np.ndarray]) -> dict:
    rest = {k: v for k, v in part.items() if k != part["type"]}
    if part["type"] == IMAGE_PART:
        pixels = _checked_pixels(part[IMAGE_PART], where, max_bytes)
        digest = image_digest(pixels)
        images.setdefault(digest, pixels)
        return {**rest, DIGEST_KEY: digest}
    clip = checked_array(video_clips, part[VIDEO_PART], where, StoredImageError)
    digests = []
    for k, frame in enumerate(clip.frames):
        pixels = _checked_pixels(frame, f"{where} frame {k}", max_bytes)
        digest = image_digest(pixels)
        images.setdefault(digest, pixels)
        digests.append(digest)
    return {**rest, FRAMES_KEY: digests, TIMES_KEY: [float(t) for t in clip.timestamps]}


def _attached(part: Mapping[str, Any], pixels_of: Callable[[str], np.ndarray | None], where: str) -> dict:
    def pixels(digest: str) -> np.ndarray:
        return held(pixels_of, digest, where, "image", StoredImageError)

    if part["type"] == IMAGE_PART:
        rest = {k: v for k, v in part.items() if k != DIGEST_KEY}
        return {**rest, IMAGE_PART: pixels(part[DIGEST_KEY])}
    times = part.get(TIMES_KEY)
    frames = part[FRAMES_KEY]
    if not isinstance(times, list) or len(times) != len(frames):
        raise StoredImageError(f"{where}: a stored video's timestamps do not match its frames")
    rest = {k: v for k, v in part.items() if k not in (FRAMES_KEY, TIMES_KEY)}
    try:
        stacked = np.stack([pixels(d) for d in frames])
    except ValueError as exc:  # frames of different sizes
        raise StoredImageError(f"{where}: a stored video's frames do not fit together ({exc})") from None
    return {**rest, VIDEO_PART: (stacked, np.asarray(times, dtype=np.float64))}


def pixels_record(pixels: np.ndarray) -> tuple[int, int, bytes]:
    """The stored form of uint8 ``[H, W, 3]`` pixels: height, width, compressed bytes."""
    return int(pixels.shape[0]), int(pixels.shape[1]), zlib.compress(pixels.tobytes(), 1)


def pixels_from_record(
    digest: str, height: Any, width: Any, data: Any, max_bytes: int = MAX_STORED_IMAGE_BYTES
) -> np.ndarray:
    """Pixels read back from a stored record, checked: the size bound before inflating, the
    shape against the bytes, the digest against the pixels. Read-only (shared by readers)."""
    where = f"stored image {str(digest)[:16]}..."
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (height, width)):
        raise StoredImageError(f"{where}: its shape {height!r} x {width!r} is not an image's")
    size = height * width * 3
    if size > max_bytes:
        raise StoredImageError(f"{where}: {height} x {width} pixels, more than the store's {max_bytes} bytes")
    if not isinstance(data, bytes):
        raise StoredImageError(f"{where}: its pixels are not bytes")
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(data, size + 1)  # never inflates past what the shape allows
    except zlib.error as exc:
        raise StoredImageError(f"{where}: its pixels cannot be read ({exc})") from None
    if len(raw) != size or not inflater.eof:
        raise StoredImageError(f"{where}: its pixels do not fill {height} x {width} x 3")
    pixels = np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3)
    if image_digest(pixels) != digest:
        raise StoredImageError(f"{where}: its pixels do not match their sha256 (a damaged store?)")
    return pixels


def _checked_pixels(value: Any, where: str, max_bytes: int) -> np.ndarray:
    pixels = checked_array(image_arrays, value, where, StoredImageError)
    if pixels.nbytes > max_bytes:
        height, width = pixels.shape[:2]
        raise StoredImageError(
            f"{where}: the image is {width} x {height} pixels ({pixels.nbytes} bytes), more than the "
            f"{max_bytes} bytes a stored image may take (the store's max_image_bytes)"
        )
    return pixels


def _has_pixels(part: Any) -> bool:
    """An image or video part holding its pixels (what a session's history has)."""
    if not isinstance(part, Mapping):
        return False
    kind = part.get("type")
    return kind in (IMAGE_PART, VIDEO_PART) and kind in part


def _named_digests(part: Any) -> list[str]:
    """The digests a stored image or video part names (none: not a stored media part)."""
    if not isinstance(part, Mapping) or part.get("type") not in (IMAGE_PART, VIDEO_PART):
        return []
    if part["type"] in part:  # still holds its pixels
        return []
    if part["type"] == IMAGE_PART:
        return [part[DIGEST_KEY]] if isinstance(part.get(DIGEST_KEY), str) else []
    frames = part.get(FRAMES_KEY)
    if isinstance(frames, list) and frames and all(isinstance(d, str) for d in frames):
        return list(frames)
    return []


# An image (or a video's frames) detached by the uint8 pixels' digests (bound: MAX_STORED_IMAGE_BYTES).
STORED_IMAGES = StoredPartKind(_has_pixels, _detached, _attached, _named_digests, MAX_STORED_IMAGE_BYTES)
detach_images = STORED_IMAGES.detach
image_digests = STORED_IMAGES.digests
attach_images = STORED_IMAGES.attach
