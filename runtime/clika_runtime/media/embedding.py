"""What a media tower returns for one item: its embedding rows, prompt text and content digest.

The digest keys a prefix cache (and a tower's cache of recent items) on the
media's content; ``check_token_budget`` refuses items past the prompt positions
the context window leaves, naming the item that overflows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from clika_runtime.engine.errors import CONTEXT_LENGTH_EXCEEDED, TurnError


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
