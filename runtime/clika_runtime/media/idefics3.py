"""The Idefics3 / SmolVLM image processor: resize, split into tiles, normalize.

An image is resized so its longest edge is ``size.longest_edge`` (aspect kept,
the other edge rounded up to even), then up to a whole number of
``max_image_size`` tiles per edge; it is cut into those tiles (row-major) and
a global view (the whole image at one tile's size) follows them. The chat
template lays out ``rows x cols`` tile placeholders plus the global one, so
``rows`` and ``cols`` travel with the pixels (both 0 for an unsplit image).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from clika_runtime.media.pixels import normalized_chw
from clika_runtime.media.resample import resize_uint8

# The processor's absolute cap on an edge after the first resize (4k).
_MAX_EDGE = 4096


@dataclass(frozen=True)
class VideoSampling:
    """SmolVLM2's ``video_sampling``: frames per second, at most ``max_frames``, each frame's
    longest edge first resized to ``longest_edge`` (then to one tile, unsplit)."""

    fps: float = 1.0
    max_frames: int = 64
    longest_edge: int = 512


@dataclass(frozen=True)
class Idefics3Settings:
    """The processor config fields this pipeline reads (``preprocessor_config.json``)."""

    longest_edge: int | None = 4 * 364  # None: no first resize (do_resize false)
    tile_edge: int = 364  # max_image_size.longest_edge, the vision tower's input size
    split: bool = True
    resample: int = 1  # Pillow's LANCZOS
    rescale_factor: float | None = 1 / 255
    mean: tuple[float, float, float] | None = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] | None = (0.5, 0.5, 0.5)
    video: VideoSampling | None = None  # SmolVLM2 checkpoints read videos (None: images only)


@dataclass(frozen=True)
class Idefics3Image:
    """One image ready for the vision tower: tiles then the global view."""

    pixel_values: np.ndarray  # float32 [tiles, 3, tile_edge, tile_edge]
    rows: int
    cols: int


def _longest_edge_size(height: int, width: int, longest: int) -> tuple[int, int]:
    """Longest edge to ``longest``, the other scaled and rounded up to even, then capped at 4k."""
    aspect = width / height
    if width >= height:
        width = longest
        height = int(width / aspect)
        height += height % 2
    else:
        height = longest
        width = int(height * aspect)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    aspect = width / height
    if width >= height and width > _MAX_EDGE:
        width, height = _MAX_EDGE, int(_MAX_EDGE / aspect)
    elif height > width and height > _MAX_EDGE:
        height, width = _MAX_EDGE, int(_MAX_EDGE * aspect)
    return max(height, 1), max(width, 1)


def _whole_tiles_size(height: int, width: int, tile: int) -> tuple[int, int]:
    """Both edges up to multiples of ``tile``, the shorter one following the aspect first."""
    aspect = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / aspect) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * aspect) / tile) * tile
    return height, width


def _resize(image: np.ndarray, size: tuple[int, int], resample: int) -> np.ndarray:
    return resize_uint8(image, size[0], size[1], resample)


def _tiles(image: np.ndarray, s: Idefics3Settings) -> tuple[list[np.ndarray], int, int]:
    image = _resize(image, _whole_tiles_size(image.shape[0], image.shape[1], s.tile_edge), s.resample)
    height, width = image.shape[:2]
    edge = s.tile_edge
    if height <= edge and width <= edge:
        return [image], 0, 0
    rows, cols = (height - edge) // edge + 1, (width - edge) // edge + 1
    tiles = [
        image[r * edge : (r + 1) * edge, c * edge : (c + 1) * edge] for r in range(rows) for c in range(cols)
    ]
    tiles.append(_resize(image, (edge, edge), s.resample))
    return tiles, rows, cols


def preprocess_idefics3(image: np.ndarray, settings: Idefics3Settings) -> Idefics3Image:
    """uint8 [H, W, 3] -> the tiles and global view the Idefics3 vision tower reads."""
    if settings.longest_edge is not None:
        size = _longest_edge_size(image.shape[0], image.shape[1], settings.longest_edge)
        image = _resize(image, size, settings.resample)
    if settings.split:
        tiles, rows, cols = _tiles(image, settings)
    else:
        tiles, rows, cols = [_resize(image, (settings.tile_edge,) * 2, settings.resample)], 0, 0
    pixels = [
        normalized_chw(t, rescale_factor=settings.rescale_factor, mean=settings.mean, std=settings.std)
        for t in tiles
    ]
    return Idefics3Image(np.stack(pixels), rows, cols)
