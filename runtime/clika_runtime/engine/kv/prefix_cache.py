"""The prefix cache index: which pool blocks hold the KV of which token prefixes.

A block's KV depends on its tokens and on every token before it, so a block
is known by its chain key ``(hash of the prefix before it, its tokens)``; the
hash of that key is the prefix hash of the next block. Looking up a prompt
walks its full blocks key by key (Python's dict compares the keys themselves,
so a hash collision can never hand out the wrong block).

Besides full blocks the index holds *partial* entries: the last, unfilled
block a finished sequence leaves behind (the end of a chat turn). After the
full-block walk stops, the children of the matched prefix (full or partial)
are compared token by token, so a new request reuses everything up to the
first token where it differs, not just whole blocks. Such a partial match is
always copied into a private block before the request writes after it.

The index only names blocks; reference counts, the free list and eviction
belong to ``clika_runtime.engine.kv.block_pool.BlockPool``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from clika_runtime.engine.bounds import require_at_least

# The prefix hash before a sequence's first block.
ROOT_HASH = 0

BlockKey = tuple[int, tuple[int, ...]]


def chain_hash(parent: int, tokens: tuple[int, ...]) -> int:
    """The prefix hash after a block of ``tokens`` that follows the prefix hashed ``parent``."""
    return hash((parent, tokens))


@dataclass
class PrefixMatch:
    """What the cache holds of a token sequence.

    ``blocks`` are full blocks to share as they are, ``hashes`` the prefix hash
    after each; ``partial_block``'s first ``partial_tokens`` tokens continue the
    match (to be copied, never shared).
    """

    blocks: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    partial_block: int | None = None
    partial_tokens: int = 0

    def num_tokens(self, block_size: int) -> int:
        return len(self.blocks) * block_size + self.partial_tokens


class PrefixIndex:
    """Chain keys of cached blocks: full blocks by key, every entry by its parent prefix."""

    def __init__(self, block_size: int) -> None:
        require_at_least(1, block_size=block_size)
        self.block_size = block_size
        self._full: dict[BlockKey, int] = {}
        self._partial: dict[BlockKey, int] = {}
        self._children: dict[int, dict[int, BlockKey]] = {}  # parent hash -> {block: key}
        self._key_of: dict[int, BlockKey] = {}

    def __contains__(self, block: int) -> bool:
        return block in self._key_of

    def __len__(self) -> int:
        return len(self._key_of)

    @property
    def blocks(self) -> set[int]:
        return set(self._key_of)

    def is_full(self, block: int) -> bool:
        return len(self._key_of[block][1]) == self.block_size

    def find_full(self, parent: int, tokens: tuple[int, ...]) -> int | None:
        """The cached full block holding ``tokens`` after the prefix hashed ``parent``, if any."""
        return self._full.get((parent, tokens))

    def add(self, block: int, parent: int, tokens: tuple[int, ...]) -> bool:
        """Index ``block`` as holding ``tokens`` after ``parent``; False (nothing changed) when
        the block is already indexed or another block holds the same key."""
        key = (parent, tokens)
        table = self._full if len(tokens) == self.block_size else self._partial
        if block in self._key_of or key in table or not 0 < len(tokens) <= self.block_size:
            return False
        table[key] = block
        self._children.setdefault(parent, {})[block] = key
        self._key_of[block] = key
        return True

    def remove(self, block: int) -> None:
        """Forget ``block`` (it is being evicted or rewritten)."""
        key = self._key_of.pop(block)
        table = self._full if len(key[1]) == self.block_size else self._partial
        del table[key]
        siblings = self._children[key[0]]
        del siblings[block]
        if not siblings:
            del self._children[key[0]]

    def match(self, tokens: Sequence[int], limit: int) -> PrefixMatch:
        """The longest cached prefix of ``tokens[:limit]``: full blocks, then a partial continuation."""
        bs = self.block_size
        found = PrefixMatch()
        parent = ROOT_HASH
        for start in range(0, limit - bs + 1, bs):
            key = (parent, tuple(tokens[start : start + bs]))
            block = self._full.get(key)
            if block is None:
                break
            parent = chain_hash(*key)
            found.blocks.append(block)
            found.hashes.append(parent)
        start = len(found.blocks) * bs
        rest = tuple(tokens[start : min(limit, start + bs)])
        for block, (_, held) in self._children.get(parent, {}).items():
            shared = _common_prefix(held, rest)
            if shared > found.partial_tokens:
                found.partial_block, found.partial_tokens = block, shared
        return found


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
