"""A copy of the KV the paged cache holds for a token prefix, and its way back in as cached blocks.

A conversation that keeps its KV next to its transcript (``clika_runtime.engine.kv.kv_file``)
takes a snapshot of the blocks its tokens' prefix cache entries name: per layer
``[kv_heads, tokens, head_dim]``, token-contiguous, so a snapshot does not depend
on the block size it was taken at. Installing it writes fresh blocks and indexes
them exactly as a finished sequence's blocks would be (full blocks by chain key,
the unfilled last one as a partial entry), then releases them: they are *cached*
blocks, so the next request on those tokens finds them as its cached prefix, and
the budget evicts them like any other when room is needed.

Both functions run on the engine's thread between steps (``Engine.between_steps``):
they read and write the pools the step graph is bound to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from clika_runtime.engine.kv.block_pool import BlockPool
from clika_runtime.engine.kv.prefix_cache import ROOT_HASH, PrefixIndex, chain_hash


class SnapshotBlocks(Protocol):
    """The block cache as a snapshot reads and fills it (``paged_cache.PagedKVCache``, which imports this)."""

    block_size: int
    prefix_reuse: bool
    index: PrefixIndex
    pool: BlockPool

    def buffers(self) -> tuple[list[np.ndarray], list[np.ndarray]]: ...

    def take_block(self) -> int | None: ...


@dataclass(frozen=True)
class KVSnapshot:
    """The KV of ``token_ids``: ``keys[layer]`` / ``values[layer]`` are ``[kv_heads, len(token_ids), head_dim]``."""

    token_ids: tuple[int, ...]
    keys: list[np.ndarray]
    values: list[np.ndarray]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def take_snapshot(cache: SnapshotBlocks, token_ids: Sequence[int]) -> KVSnapshot | None:
    """The KV the prefix cache holds for the longest cached prefix of ``token_ids`` (None: none)."""
    if not cache.prefix_reuse or not token_ids:
        return None
    match = cache.index.match(token_ids, len(token_ids))
    n = match.num_tokens(cache.block_size)
    if n == 0:
        return None
    blocks = list(match.blocks)
    if match.partial_block is not None:
        blocks.append(match.partial_block)
    keys_pools, values_pools = cache.buffers()

    def gathered(pool: np.ndarray) -> np.ndarray:
        heads, _, block_size, head_dim = pool.shape
        rows = pool[:, blocks]  # [kv_heads, blocks, block_size, head_dim], a copy
        return np.ascontiguousarray(rows.reshape(heads, len(blocks) * block_size, head_dim)[:, :n])

    return KVSnapshot(
        tuple(int(t) for t in token_ids[:n]),
        [gathered(pool) for pool in keys_pools],
        [gathered(pool) for pool in values_pools],
    )


def install_snapshot(cache: SnapshotBlocks, snapshot: KVSnapshot) -> int:
    """Write ``snapshot`` into fresh blocks indexed as its tokens' cached prefix; how many tokens
    the cache now holds for it (fewer when the budget has no room for all of it, 0 without prefix reuse).

    Blocks the cache already holds for the same tokens are kept as they are (not written twice).
    """
    if not cache.prefix_reuse or not snapshot.num_tokens:
        return 0
    bs = cache.block_size
    tokens = snapshot.token_ids
    held: list[int] = []  # blocks written here, owned until the end, then released as cached
    parent, installed = ROOT_HASH, 0
    try:
        for start in range(0, len(tokens), bs):
            chunk = tokens[start : start + bs]
            if len(chunk) == bs:
                found = cache.index.find_full(parent, chunk)
                if found is not None:
                    cache.pool.share(found)  # pinned: taking the next blocks must not evict it
                    held.append(found)
                else:
                    block = _written_block(cache, snapshot, start, bs, held)
                    if block is None:
                        break
                    cache.index.add(block, parent, chunk)
                parent = chain_hash(parent, chunk)
            else:
                block = _written_block(cache, snapshot, start, len(chunk), held)
                if block is None:
                    break
                if not cache.index.add(block, parent, chunk):  # an entry already holds these tokens
                    cache.pool.release(held.pop())
            installed = start + len(chunk)
    finally:
        for block in reversed(held):  # tail first: evicted before the prefix, as ``free`` leaves them
            cache.pool.release(block)
    return installed


def _written_block(
    cache: SnapshotBlocks, snapshot: KVSnapshot, start: int, count: int, held: list[int]
) -> int | None:
    """A fresh block holding the snapshot's tokens ``[start, start + count)`` (None: no room)."""
    block = cache.take_block()
    if block is None:
        return None
    held.append(block)
    keys_pools, values_pools = cache.buffers()
    for pools, source in ((keys_pools, snapshot.keys), (values_pools, snapshot.values)):
        for pool, layer in zip(pools, source, strict=True):
            pool[:, block, :count] = layer[:, start : start + count]
    return block
