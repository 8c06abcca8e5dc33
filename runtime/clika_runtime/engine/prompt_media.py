"""A request's media: embeddings for its prompt's media positions, and the ids its KV is keyed by.

The vision graph turns each image into rows of the text model's width; the
prompt holds one placeholder token per row (the chat layer expanded each
image's marker). ``PromptMedia`` pairs the placeholder positions with those
rows, and gives every position a key id made from its image's sha256: the
caches compare ``Sequence.cache_ids`` (the token ids, each media position's
id replaced by its key id), so two prompts whose placeholders are the same
tokens but whose images differ never share KV, and the same image on a
second turn is reused.

A model rotating by M-RoPE (Qwen2-VL) also needs each token's three rotary
positions where they are not its KV index: ``rope`` (a ``step_graph.RopeSpan``,
``clika_runtime.media.mrope_positions``). They follow from the prompt's tokens
and images alone, so a prefix the caches share has the same positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clika_runtime.contract.step_graph import MediaSpan, RopeSpan

# Key ids are negative (no token id is), 60 bits of the digest: distinct images never meet.
_KEY_BITS = 60
MEDIA_KEY_FLOOR = -(2**_KEY_BITS)  # the smallest key id (a file of keyed ids is checked against it)


def media_key_id(digest: str) -> int:
    """The id every position of the image hashed ``digest`` (sha256 hex) is keyed by."""
    return -1 - (int(digest[: _KEY_BITS // 4], 16))


@dataclass(frozen=True, eq=False)
class PromptMedia:
    """``embeds[m]`` fills prompt position ``positions[m]``; ``key_ids[m]`` keys its KV."""

    positions: np.ndarray  # int64 [M], ascending
    embeds: np.ndarray  # float32 [M, hidden]
    key_ids: np.ndarray  # int64 [M]
    rope: RopeSpan | None = None  # M-RoPE models: the prompt's positions off their KV index

    @property
    def span(self) -> MediaSpan:
        return MediaSpan(self.positions, self.embeds)

    @property
    def hidden_size(self) -> int:
        return int(self.embeds.shape[1])

    def keyed(self, token_ids: Sequence[int]) -> list[int]:
        """``token_ids`` with each media position's id replaced by its key id."""
        keyed = list(token_ids)
        for position, key in zip(self.positions.tolist(), self.key_ids.tolist(), strict=True):
            if position < len(keyed):
                keyed[position] = key
        return keyed


def prompt_media(
    prompt_ids: Sequence[int],
    media_token_id: int,
    items: Sequence[tuple[np.ndarray, str]],
    *,
    argument: str = "images",
) -> PromptMedia | None:
    """The media of a prompt whose ``media_token_id`` positions take ``items``' rows in order.

    ``items``: per image, its embeddings ``[tokens, hidden]`` and digest. The prompt must
    hold exactly as many media tokens as the items have rows (else a ValueError naming
    ``argument``); no items and no media tokens: None.
    """
    positions = np.flatnonzero(np.asarray(prompt_ids, dtype=np.int64) == media_token_id)
    rows = sum(int(embeds.shape[0]) for embeds, _ in items)
    if len(positions) != rows:
        raise ValueError(
            f"{argument}: the media take {rows} prompt tokens but the prompt holds {len(positions)} "
            f"media tokens (id {media_token_id}); a media token typed into the text counts as another"
        )
    if not items:
        return None
    widths = {int(embeds.shape[1]) for embeds, _ in items}
    if len(widths) != 1:
        raise ValueError(f"{argument}: the embeddings have different widths {sorted(widths)}")
    keys = np.concatenate(
        [np.full(int(embeds.shape[0]), media_key_id(digest), dtype=np.int64) for embeds, digest in items]
    )
    embeds = np.ascontiguousarray(np.concatenate([e for e, _ in items]), dtype=np.float32)
    return PromptMedia(positions.astype(np.int64), embeds, keys)
