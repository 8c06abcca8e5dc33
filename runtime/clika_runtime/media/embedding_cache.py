"""A tower's embeddings of its latest media, kept by content digest.

A conversation renders its images (and clips) on every turn, and a tower is by
far the costliest stage (seconds per tile on a CPU): an item seen recently is
taken from here, marked ``cached``. The oldest entry goes first past the size.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable

from clika_runtime.media.embedding import MediaEmbedding

EMBEDDING_CACHE_SIZE = 32


class EmbeddingCache:
    """At most ``size`` embeddings by digest, safe to share between request threads."""

    def __init__(self, size: int = EMBEDDING_CACHE_SIZE) -> None:
        self.size = size
        self._kept: OrderedDict[str, MediaEmbedding] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str, *, refresh: bool = True) -> MediaEmbedding | None:
        """The kept embedding (marked ``cached``), or None; ``refresh``: count this as a recent use."""
        with self._lock:
            found = self._kept.get(digest)
            if found is not None and refresh:
                self._kept.move_to_end(digest)
        return None if found is None else dataclasses.replace(found, cached=True)

    def put(self, digest: str, embedding: MediaEmbedding) -> None:
        with self._lock:
            self._kept[digest] = embedding
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def one(
        self, digest: str, compute: Callable[[], MediaEmbedding], *, refresh: bool = True
    ) -> MediaEmbedding:
        """The kept embedding of ``digest``, else ``compute()``'s, kept from now on."""
        found = self.get(digest, refresh=refresh)
        if found is not None:
            return found
        embedding = compute()
        self.put(digest, embedding)
        return embedding
