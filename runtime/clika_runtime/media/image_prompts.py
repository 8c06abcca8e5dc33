"""A prompt's images made ready for the engine: vision graph, image tokens, embeddings.

``ImagePrompts`` belongs to a loaded model whose folder has a vision graph. It
takes a rendered prompt (one image marker per image, where the chat template
put them) and the images in that order, runs the vision graph on them (the
``vision`` stage an observer sees), expands each marker into the image's
tokens (Idefics3: ``<fake_token_around_image>``, row/column tokens and
``<image>`` per tile, then the global view), tokenizes the result and pairs
the image-token positions with the embeddings (``PromptMedia``). A checkpoint
that reads videos (SmolVLM2) takes them among the images as ``VideoInput``
items, each ``<video>`` marker expanded to its frames' text.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from clika_runtime.contract.manifest import ManifestError, VisionSpec
from clika_runtime.engine.prompt_media import PromptMedia, prompt_media
from clika_runtime.media.arguments import VideoInput
from clika_runtime.media.families import find_vision_family
from clika_runtime.media.media_prompts import MediaPrompts
from clika_runtime.media.mrope_positions import mrope_span
from clika_runtime.media.placeholders import expand_kinds, expand_markers
from clika_runtime.media.vision_tower import VisionTower, reads_video

# Images one request may carry (each is at least one tile of the vision graph).
MAX_IMAGES = 16
# Videos one request may carry (each is its sampled frames, at most the checkpoint's max_frames).
MAX_VIDEOS = 4


class ImagePrompts(MediaPrompts[VisionSpec, VisionTower]):
    """Prompts with images for one model folder (its vision graph opened on first use)."""

    open_tower = VisionTower.open

    def _bind(self) -> None:
        family = find_vision_family(self.spec.family)
        if family is None:
            raise ManifestError(f"images for the {self.spec.family} vision graph are not supported yet")
        if self.spec.image_token_id is None:
            raise ManifestError("the manifest's vision entry names no image token id")
        self.family = family
        self.marker = family.IMAGE_MARKER  # what the chat template emits for one image
        self.video_marker = family.VIDEO_MARKER  # and for one video (SmolVLM2's <video>, Qwen2-VL's pad)
        self._reads_video: bool | None = None

    @property
    def reads_video(self) -> bool:
        """True when the checkpoint reads videos through this graph (``vision_tower.reads_video``)."""
        if self._reads_video is None:
            self._reads_video = reads_video(self.folder, self.spec)
        return self._reads_video

    def encode(
        self, text: str, images: Sequence[Any], *, token_budget: int, request_id: int | None = None
    ) -> tuple[list[int], PromptMedia | None]:
        """Token ids of ``text`` with its markers expanded, and the images' embeddings for them.

        ``token_budget``: the prompt positions the context window leaves; images taking more
        are refused naming the image that overflows (as are bad shapes, dtypes, too many).
        """
        began = time.perf_counter()
        stills = [item for item in images if not isinstance(item, VideoInput)]
        clips = [item.pair for item in images if isinstance(item, VideoInput)]
        tower = self.tower()
        embeddings = tower.embed_images(stills, max_count=MAX_IMAGES, token_budget=token_budget)
        by_marker = {self.marker: embeddings}
        if clips:  # a video's tokens count against what the images left
            left = token_budget - sum(e.num_tokens for e in embeddings)
            by_marker[self.video_marker] = tower.embed_videos(clips, max_count=MAX_VIDEOS, token_budget=left)
        seconds = time.perf_counter() - began
        tokens = sum(e.num_tokens for found in by_marker.values() for e in found)
        # "cached": images whose embeddings an earlier request computed (the tower's cache).
        detail = {"images": len(embeddings), "cached": sum(e.cached for e in embeddings)}
        if clips:
            detail["videos"] = len(clips)
        self._observe("vision", request_id, seconds, tokens, detail)
        if self.reads_video:
            texts = {m: [e.prompt_text for e in found] for m, found in by_marker.items()}
            expanded, order = expand_kinds(
                text, {self.video_marker: [], **texts}, video_marker=self.video_marker
            )
            embeddings = [by_marker[marker][k] for marker, k in order]  # rows in prompt order
        else:
            expanded = expand_markers(text, self.marker, [e.prompt_text for e in embeddings])
        ids = self.tokenizer.encode(expanded)
        image_id = int(self.spec.image_token_id)  # type: ignore[arg-type]
        media = prompt_media(self._one_media_id(ids), image_id, [(e.embeds, e.digest) for e in embeddings])
        # Qwen2-VL (one <|image_pad|> per merged patch) rotates by M-RoPE: the prompt's positions.
        if media is not None and self.family.MROPE:
            grids = [e.grid for e in embeddings if e.grid is not None]
            media = dataclasses.replace(media, rope=mrope_span(len(ids), media.positions, grids))
        self._check_fits(ids, token_budget, "images", "images", "pass fewer or smaller images")
        return ids, media

    def _one_media_id(self, ids: list[int]) -> list[int]:
        """``ids`` with a video marker token of its own (Qwen2-VL's video pads) read as image pads: one
        run of media rows in prompt order."""
        if not self.family.VIDEO_TOKEN or not self.reads_video:
            return ids
        video_id, image_id = self.spec.video_token_id, self.spec.image_token_id
        return [image_id if token == video_id else token for token in ids]  # type: ignore[misc]
