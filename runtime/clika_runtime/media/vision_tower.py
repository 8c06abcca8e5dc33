"""Run a model folder's vision graph: images in, text-width embeddings out.

``VisionTower.open`` reads the manifest's ``vision`` entry and the folder's
processor config; ``embed_images`` (and ``embed_videos`` for a family that
reads clips) checks the argument, preprocesses, runs the graph and returns
one ``MediaEmbedding`` per item: its rows (in placeholder order), the prompt
text its marker expands to, and a digest of its pixels, so a prefix cache can
key on the media's content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clika_runtime.engine.errors import CONTEXT_LENGTH_EXCEEDED, TurnError
from clika_runtime.manifest import Manifest, ManifestError, VisionSpec
from clika_runtime.media.arguments import VideoClip, image_arrays, video_clips
from clika_runtime.media.idefics3 import Idefics3Settings, preprocess_idefics3
from clika_runtime.media.placeholders import QWEN2_VL_VIDEO, idefics3_image_text, qwen2_vl_image_text
from clika_runtime.media.processor_config import read_processor_settings
from clika_runtime.media.qwen2_5_vl_windows import window_inputs
from clika_runtime.media.qwen2_vl import (
    Qwen2VLPatches,
    Qwen2VLSettings,
    preprocess_qwen2_vl,
    preprocess_qwen2_vl_video,
)
from clika_runtime.media.qwen2_vl_positions import frame_attention_bias, rotary_tables
from clika_runtime.media.qwen2_vl_video import Qwen2VLVideoSettings, read_video_settings
from clika_runtime.media.smolvlm_video import clip_duration, preprocess_smolvlm_frames, smolvlm_video_text
from clika_runtime.media.video import sample_frames
from clika_runtime.model_folder import open_session, session_options
from clika_runtime.step_graph import takes_media

_SETTINGS = {"idefics3": Idefics3Settings, "qwen2_vl": Qwen2VLSettings}
# Embeddings of the latest images kept by their digest: a conversation renders its images on
# every turn, and the tower is by far the costliest stage (seconds per tile on a CPU).
EMBEDDING_CACHE_SIZE = 32
_VIDEO_FAMILIES = ("qwen2_vl",)


@dataclass(frozen=True)
class MediaEmbedding:
    """One image's (or video clip's) embeddings and how the prompt refers to them."""

    embeds: np.ndarray  # float32 [tokens, text_hidden], in the order of the prompt's media tokens
    prompt_text: str  # what the media's marker expands to
    digest: str  # sha256 of the pixels (and a clip's timestamps)
    timestamps: tuple[float, ...] = ()  # a clip's: the start of each temporal patch, in seconds
    cached: bool = False  # taken from the tower's cache of recent images (no graph run)
    grid: tuple[int, int, int] | None = None  # Qwen2-VL: (t, h, w) of its merged patches (M-RoPE)

    @property
    def num_tokens(self) -> int:
        return int(self.embeds.shape[0])


def image_digest(image: np.ndarray, timestamps: np.ndarray | None = None) -> str:
    """sha256 over the shape and uint8 pixels (and a clip's timestamps): equal media, equal keys."""
    digest = hashlib.sha256(repr(image.shape).encode())
    digest.update(np.ascontiguousarray(image).data)
    if timestamps is not None:
        digest.update(np.ascontiguousarray(timestamps, dtype=np.float64).data)
    return digest.hexdigest()


def check_token_budget(
    embeddings: list[MediaEmbedding], budget: int | None, argument: str
) -> list[MediaEmbedding]:
    """``embeddings`` when their tokens fit ``budget``; else a ValueError naming the item that overflows."""
    if budget is None:
        return embeddings
    used = 0
    for i, embedding in enumerate(embeddings):
        used += embedding.num_tokens
        if used > budget:
            raise TurnError(
                f"{argument}[{i}]: the media take {used} prompt tokens by this item, more than the "
                f"{budget} the context window leaves; pass fewer or smaller ones",
                code=CONTEXT_LENGTH_EXCEEDED,
            )
    return embeddings


def is_windowed(spec: VisionSpec) -> bool:
    """A Qwen2.5-VL tower (window attention): its videos' positions count seconds, not built yet."""
    return "window_bias" in spec.inputs


def reads_video(folder: str | Path, spec: VisionSpec | None) -> bool:
    """True when ``videos=`` ride a user turn of this folder's model: an Idefics3 tower whose
    processor config has SmolVLM2's ``video_sampling``, or a Qwen2-VL tower whose manifest names
    its ``<|video_pad|>`` token (not Qwen2.5-VL's windowed one: its video positions count
    seconds). The one answer ``supports_video`` and :func:`media_support` give. An unreadable
    processor config reads False: the first image's request names its problem."""
    if spec is not None and spec.family == "qwen2_vl":
        return spec.video_token_id is not None and not is_windowed(spec)
    if spec is None or spec.family != "idefics3":
        return False
    try:
        settings = read_processor_settings(folder)
    except ValueError:
        return False
    return getattr(settings, "video", None) is not None


def media_support(folder: str | Path, manifest: Manifest | None = None) -> dict[str, bool]:
    """What a folder's model reads, as its ``supports_vision`` / ``supports_video`` /
    ``supports_audio`` say: ``vision`` (a vision graph, and step graphs that take media
    embeddings), ``video`` (that, and :func:`reads_video`), ``audio`` (an audio graph, and those
    step graphs); ``manifest``: the folder's, when already read."""
    manifest = Manifest.read(folder) if manifest is None else manifest
    graphs = manifest.graphs.values()
    takes = bool(graphs) and all(takes_media(graph.inputs) for graph in graphs)
    vision = takes and manifest.vision is not None
    return {
        "vision": vision,
        "video": vision and reads_video(folder, manifest.vision),
        "audio": takes and manifest.audio is not None,
    }


class VisionTower:
    """A folder's vision graph with its processor (one ORT session)."""

    def __init__(
        self,
        folder: Path,
        spec: VisionSpec,
        settings: Any,
        threads: int | None = None,
        video: Qwen2VLVideoSettings | None = None,
    ) -> None:
        if spec.family not in _SETTINGS:
            raise ManifestError(
                f"vision family {spec.family!r} is not supported (supported: {sorted(_SETTINGS)})"
            )
        if not isinstance(settings, _SETTINGS[spec.family]):
            raise ManifestError(
                f"{spec.processor_file} names another model's processor than the {spec.family} graph"
            )
        window = spec.details.get("window_size")
        if is_windowed(spec) and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
            raise ManifestError(f"{spec.file}: the manifest's window_size must be a positive integer")
        self.spec = spec
        self.settings = settings
        # Qwen2-VL: how clips are sampled and resized (the video processor's own bounds).
        self.video = (
            video if video is not None or spec.family != "qwen2_vl" else read_video_settings(folder, settings)
        )
        # The tower computes its own positions inside its graph: no manifest table is supplied.
        self.session = open_session(folder / spec.file, session_options(threads), ())
        self._embedded: OrderedDict[str, MediaEmbedding] = OrderedDict()
        self._embedded_lock = threading.Lock()
        names = [i.name for i in self.session.get_inputs()]
        if set(names) != set(spec.inputs):
            raise ManifestError(f"{spec.file} takes {names}, the manifest names {list(spec.inputs)}")

    @classmethod
    def open(cls, folder: str | Path, *, threads: int | None = None) -> VisionTower:
        folder = Path(folder)
        manifest = Manifest.read(folder)
        if manifest.vision is None:
            raise ManifestError(f"{folder.name} has no vision graph: this model reads text only")
        return cls(folder, manifest.vision, read_processor_settings(folder), threads)

    def embed_images(
        self, images: Any, *, max_count: int | None = None, token_budget: int | None = None
    ) -> list[MediaEmbedding]:
        """One embedding per image; ``token_budget``: the prompt positions the context leaves for them."""
        arrays = image_arrays(images, max_count=max_count)
        if not arrays:
            return []
        if self.spec.family == "idefics3":
            embeddings = [self._cached_idefics3(image) for image in arrays]
        else:
            embeddings = self._cached_qwen2_vl(arrays)
        return check_token_budget(embeddings, token_budget, "images")

    def embed_videos(
        self,
        videos: Any,
        *,
        fps: float | None = None,
        max_frames: int | None = None,
        max_count: int | None = None,
        token_budget: int | None = None,
    ) -> list[MediaEmbedding]:
        """One embedding per (frames, timestamps) clip, its frames sampled at ``fps`` (at most
        ``max_frames``; by default the checkpoint's video processor's, Qwen2-VL's 2 a second; an
        Idefics3 tower: at the rate and count its ``video_sampling`` names, SmolVLM2's)."""
        if self.spec.family == "idefics3" and self.settings.video is not None:
            clips = video_clips(videos, max_count=max_count)
            return check_token_budget([self._smolvlm_clip(c) for c in clips], token_budget, "videos")
        if self.spec.family not in _VIDEO_FAMILIES or is_windowed(self.spec):
            raise ValueError(f"videos: the {self.spec.family} vision tower takes images only")
        assert self.video is not None
        fps = self.video.fps if fps is None else fps
        max_frames = self.video.max_frames if max_frames is None else max_frames
        clips = [
            sample_frames(c, fps=fps, max_frames=max_frames) for c in video_clips(videos, max_count=max_count)
        ]
        return check_token_budget([self._cached_qwen2_vl_clip(c) for c in clips], token_budget, "videos")

    def _smolvlm_clip(self, clip: VideoClip) -> MediaEmbedding:
        sampling = self.settings.video
        duration = clip_duration(clip.timestamps)  # the whole clip's, as the prompt states it
        clip = sample_frames(clip, fps=sampling.fps, max_frames=sampling.max_frames)
        digest = image_digest(clip.frames, clip.timestamps)
        with self._embedded_lock:  # a conversation renders its videos on every turn, too
            found = self._embedded.get(digest)
        if found is not None:
            return dataclasses.replace(found, cached=True)
        frames = preprocess_smolvlm_frames(clip, self.settings)
        (out,) = self.session.run([self.spec.embeds_output], {"pixel_values": frames})
        text = smolvlm_video_text(clip.timestamps, duration, int(out.shape[1]))
        times = tuple(float(t) for t in clip.timestamps)
        embedding = MediaEmbedding(out.reshape(-1, out.shape[-1]), text, digest, times)
        self._remember(digest, embedding)
        return embedding

    def _cached_qwen2_vl_clip(self, clip: VideoClip) -> MediaEmbedding:
        digest = image_digest(clip.frames, clip.timestamps)
        with self._embedded_lock:  # a conversation renders its videos on every turn
            found = self._embedded.get(digest)
        if found is not None:
            return dataclasses.replace(found, cached=True)
        embedding = self._qwen2_vl_clip(clip, digest)
        self._remember(digest, embedding)
        return embedding

    def _qwen2_vl_clip(self, clip: VideoClip, digest: str) -> MediaEmbedding:
        """A sampled clip's frames paired into temporal patches, embedded in one graph run."""
        assert self.video is not None
        patches = preprocess_qwen2_vl_video(clip.frames, self.video.pixels)
        (out,) = self.session.run([self.spec.embeds_output], self._qwen2_vl_feeds([patches]))
        starts = clip.timestamps[:: self.video.pixels.temporal_patch_size]
        merge = self.video.pixels.merge_size
        t, h, w = patches.grid_thw
        text = QWEN2_VL_VIDEO * int(out.shape[0])
        times = tuple(float(s) for s in starts)
        return MediaEmbedding(out, text, digest, times, grid=(int(t), int(h) // merge, int(w) // merge))

    def _qwen2_vl_feeds(self, patches: list[Qwen2VLPatches]) -> dict[str, np.ndarray]:
        grids = [p.grid_thw for p in patches]
        d = self.spec.details
        cos, sin = rotary_tables(grids, head_dim=d["head_dim"], merge=d["merge_size"], theta=d["rope_theta"])
        feeds = {
            "pixel_values": np.concatenate([p.pixel_values for p in patches]),
            "rotary_cos": cos,
            "rotary_sin": sin,
            "attention_bias": frame_attention_bias(grids),
        }
        if is_windowed(self.spec):  # Qwen2.5-VL: its blocks attend in windows of merged patches
            feeds.update(window_inputs(grids, merge=d["merge_size"], window=d["window_size"]).feeds())
        return feeds

    def _cached_idefics3(self, image: np.ndarray) -> MediaEmbedding:
        digest = image_digest(image)
        with self._embedded_lock:
            found = self._embedded.get(digest)
            if found is not None:
                self._embedded.move_to_end(digest)
                return dataclasses.replace(found, cached=True)
        embedding = self._idefics3(image)
        self._remember(digest, embedding)
        return embedding

    def _remember(self, digest: str, embedding: MediaEmbedding) -> None:
        with self._embedded_lock:
            self._embedded[digest] = embedding
            while len(self._embedded) > EMBEDDING_CACHE_SIZE:
                self._embedded.popitem(last=False)

    def _idefics3(self, image: np.ndarray) -> MediaEmbedding:
        tiles = preprocess_idefics3(image, self.settings)
        (out,) = self.session.run([self.spec.embeds_output], {"pixel_values": tiles.pixel_values})
        per_tile = int(out.shape[1])
        text = idefics3_image_text(tiles.rows, tiles.cols, per_tile)
        return MediaEmbedding(out.reshape(-1, out.shape[-1]), text, image_digest(image))

    def _qwen2_vl(self, images: list[np.ndarray]) -> list[MediaEmbedding]:
        # All images of a request in one call: the frame mask keeps them apart.
        patches = [preprocess_qwen2_vl(image, self.settings) for image in images]
        (out,) = self.session.run([self.spec.embeds_output], self._qwen2_vl_feeds(patches))
        merge = int(self.spec.details["merge_size"])
        counts = [p.num_tokens // merge**2 for p in patches]
        rows = np.split(out, np.cumsum(counts)[:-1])
        grids = [(int(t), int(h) // merge, int(w) // merge) for t, h, w in (p.grid_thw for p in patches)]
        return [
            MediaEmbedding(r, qwen2_vl_image_text(n), image_digest(image), grid=grid)
            for r, n, image, grid in zip(rows, counts, images, grids, strict=True)
        ]

    def _cached_qwen2_vl(self, images: list[np.ndarray]) -> list[MediaEmbedding]:
        """The images' embeddings, those not kept from earlier requests in one graph run."""
        digests = [image_digest(image) for image in images]
        found: dict[str, MediaEmbedding] = {}
        with self._embedded_lock:
            for digest in digests:
                kept = self._embedded.get(digest)
                if kept is not None:
                    self._embedded.move_to_end(digest)
                    found[digest] = dataclasses.replace(kept, cached=True)
        missing = {
            digest: image for digest, image in zip(digests, images, strict=True) if digest not in found
        }
        if missing:
            computed = self._qwen2_vl(list(missing.values()))
            with self._embedded_lock:
                for embedding in computed:
                    found[embedding.digest] = self._embedded[embedding.digest] = embedding
                while len(self._embedded) > EMBEDDING_CACHE_SIZE:
                    self._embedded.popitem(last=False)
        return [found[digest] for digest in digests]
