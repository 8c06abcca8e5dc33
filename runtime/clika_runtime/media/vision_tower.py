"""Run a model folder's vision graph: images in, text-width embeddings out.

``VisionTower.open`` reads the manifest's ``vision`` entry and the folder's
processor config; ``embed_images`` (and ``embed_videos`` for a family that
reads clips) checks the argument, has the family (``media.families``)
preprocess and run the graph and returns one ``MediaEmbedding`` per item: its
rows (in placeholder order), the prompt text its marker expands to, and a
digest of its pixels, so a prefix cache can key on the media's content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clika_runtime.contract.manifest import Manifest, ManifestError, VisionSpec
from clika_runtime.contract.step_graph import takes_media
from clika_runtime.media.arguments import image_arrays, video_clips
from clika_runtime.media.embedding import MediaEmbedding, check_token_budget
from clika_runtime.media.embedding_cache import EmbeddingCache
from clika_runtime.media.families import find_vision_family, vision_family
from clika_runtime.media.processor_config import read_processor_settings
from clika_runtime.media.tower_session import open_tower_session
from clika_runtime.media.vision_graph import VisionGraph


def reads_video(folder: str | Path, spec: VisionSpec | None) -> bool:
    """True when ``videos=`` ride a user turn of this folder's model: an Idefics3 tower whose
    processor config has SmolVLM2's ``video_sampling``, or a Qwen2-VL tower whose manifest names
    its ``<|video_pad|>`` token (not Qwen2.5-VL's windowed one: its video positions count
    seconds), as the family's ``reads_video`` says. The one answer ``supports_video`` and
    :func:`media_support` give. An unreadable processor config reads False: the first image's
    request names its problem."""
    if spec is None:
        return False
    family = find_vision_family(spec.family)
    return family is not None and family.reads_video(Path(folder), spec)


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
        video: Any = None,
    ) -> None:
        self.family = vision_family(spec.family)
        if not isinstance(settings, self.family.SETTINGS):
            raise ManifestError(
                f"{spec.processor_file} names another model's processor than the {spec.family} graph"
            )
        self.family.check_spec(spec)
        self.spec = spec
        self.settings = settings
        # How clips are sampled and resized beyond the image processor (Qwen2-VL's video processor).
        self.video = video if video is not None else self.family.video_settings(folder, settings)
        self.session = open_tower_session(folder, spec, threads)
        self._graph = VisionGraph(spec, settings, self.video, self.session, EmbeddingCache())

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
        return check_token_budget(self.family.embed_images(self._graph, arrays), token_budget, "images")

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
        if not self.family.embeds_videos(self.spec, self.settings):
            raise ValueError(f"videos: the {self.spec.family} vision tower takes images only")
        clips = video_clips(videos, max_count=max_count)
        embeddings = self.family.embed_videos(self._graph, clips, fps=fps, max_frames=max_frames)
        return check_token_budget(embeddings, token_budget, "videos")
