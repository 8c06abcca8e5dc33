"""Block ids, reference counts, the free list and eviction of the paged KV cache.

Every block is in exactly one state:

* **free**: holds nothing worth keeping;
* **owned**: referenced by one or more live sequences (``refcount > 0``); a
  full block may be shared by several, a block being written has one owner;
* **cached**: referenced by nobody but indexed by the prefix cache (a finished
  or preempted sequence's KV); reusable by a later prompt, evicted least
  recently used first when a block is needed and none is free.

The pool hands out block *ids*; the KV arrays live in
``clika_runtime.engine.kv.paged_cache.PagedKVCache``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping

from clika_runtime.engine.kv.prefix_cache import PrefixIndex


class BlockPool:
    """Reference-counted block ids with a free list and an LRU of cached blocks."""

    def __init__(self, index: PrefixIndex, num_blocks: int = 0) -> None:
        self.index = index
        self.refcount: list[int] = []
        self._free: deque[int] = deque()
        self._cached: OrderedDict[int, None] = OrderedDict()  # least recently released first
        self.num_evictions = 0
        self.add_blocks(num_blocks)

    @property
    def num_blocks(self) -> int:
        return len(self.refcount)

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_owned(self) -> int:
        return self.num_blocks - self.num_free - self.num_cached

    @property
    def num_available(self) -> int:
        """Blocks ``allocate`` can hand out now (free, then cached ones by eviction)."""
        return len(self._free) + len(self._cached)

    @property
    def eviction_order(self) -> list[int]:
        """Cached blocks, the next to be evicted first."""
        return list(self._cached)

    def add_blocks(self, count: int) -> None:
        """Append ``count`` new free blocks (ids continue after the last)."""
        start = self.num_blocks
        self.refcount.extend([0] * count)
        self._free.extend(range(start, start + count))

    def allocate(self) -> int | None:
        """A block owned once by the caller: a free one, else the least recently used cached one."""
        if self._free:
            block = self._free.popleft()
        elif self._cached:
            block, _ = self._cached.popitem(last=False)
            self.index.remove(block)
            self.num_evictions += 1
        else:
            return None
        self.refcount[block] = 1
        return block

    def share(self, block: int) -> None:
        """Take one more reference to an owned or cached block."""
        if self.refcount[block] == 0:
            assert block in self._cached, f"block {block} is free: there is nothing to share"
            del self._cached[block]
        self.refcount[block] += 1

    def release(self, block: int) -> None:
        """Drop one reference; the last one makes the block cached (if indexed) or free."""
        assert self.refcount[block] > 0, f"block {block} released more often than taken"
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            if block in self.index:
                self._cached[block] = None
            else:
                self._free.append(block)

    def check_integrity(self, holders: Mapping[int, int]) -> None:
        """Raise AssertionError unless every block is free, cached or owned exactly as ``holders``
        (block -> references the live sequences hold) says."""
        free, cached = set(self._free), set(self._cached)
        assert len(free) == len(self._free), "a block is free twice"
        assert not free & cached, f"blocks both free and cached: {sorted(free & cached)}"
        for block, count in enumerate(self.refcount):
            held = holders.get(block, 0)
            assert count == held, f"block {block} has refcount {count} but {held} holders"
            if count:
                assert block not in free and block not in cached, f"owned block {block} is also free/cached"
            else:
                assert (block in free) != (block in cached), (
                    f"unowned block {block} is neither free nor cached"
                )
        assert set(holders) <= set(range(self.num_blocks)), "a sequence holds a block the pool does not have"
        assert cached <= self.index.blocks, "a cached block is not in the prefix index"
        assert not free & self.index.blocks, "a free block is still in the prefix index"
