"""The block pool and the prefix index, with exact block ids."""

from __future__ import annotations

import pytest

from clika_runtime.engine.kv.block_pool import BlockPool
from clika_runtime.engine.kv.prefix_cache import ROOT_HASH, PrefixIndex, chain_hash

BS = 4


def pool_of(n: int) -> BlockPool:
    return BlockPool(PrefixIndex(BS), n)


def test_allocation_takes_free_blocks_in_order_and_refuses_when_none_is_left():
    pool = pool_of(3)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2]
    assert pool.allocate() is None
    assert pool.refcount == [1, 1, 1] and pool.num_owned == 3
    pool.add_blocks(2)
    assert pool.allocate() == 3 and pool.num_blocks == 5
    pool.check_integrity({0: 1, 1: 1, 2: 1, 3: 1})


def test_release_frees_an_unindexed_block_and_caches_an_indexed_one():
    pool = pool_of(4)
    a, b = pool.allocate(), pool.allocate()
    pool.index.add(a, ROOT_HASH, (1, 2, 3, 4))
    pool.release(a)
    pool.release(b)
    assert (pool.num_free, pool.num_cached) == (3, 1) and pool.eviction_order == [a]
    # Free blocks go first; the cached one is evicted only when nothing is free.
    assert [pool.allocate() for _ in range(3)] == [2, 3, b]
    assert pool.allocate() == a and a not in pool.index and pool.num_evictions == 1


def test_sharing_counts_references_and_revives_a_cached_block():
    pool = pool_of(2)
    a = pool.allocate()
    pool.index.add(a, ROOT_HASH, (1, 2, 3, 4))
    pool.share(a)
    assert pool.refcount[a] == 2
    pool.release(a)
    pool.release(a)
    assert pool.eviction_order == [a]
    pool.share(a)  # a new sequence reuses the cached prefix block
    assert pool.refcount[a] == 1 and pool.num_cached == 0
    pool.check_integrity({a: 1})
    with pytest.raises(AssertionError, match="nothing to share"):
        pool.share(1)


def test_eviction_is_least_recently_released_first():
    pool = pool_of(4)
    blocks = [pool.allocate() for _ in range(4)]
    for i, block in enumerate(blocks):
        pool.index.add(block, ROOT_HASH, (i, i, i, i))
    for block in (2, 0, 3, 1):
        pool.release(block)
    assert pool.eviction_order == [2, 0, 3, 1]
    pool.share(0)  # used again, then released again: now the most recent
    pool.release(0)
    assert [pool.allocate() for _ in range(4)] == [2, 3, 1, 0]
    assert len(pool.index) == 0


def test_integrity_check_catches_drift():
    pool = pool_of(3)
    a = pool.allocate()
    with pytest.raises(AssertionError, match="refcount 1 but 2 holders"):
        pool.check_integrity({a: 2})
    pool.refcount[2] = 1  # owned by nobody, yet not free
    with pytest.raises(AssertionError, match="block 2"):
        pool.check_integrity({a: 1})


def test_a_full_block_is_found_only_after_the_same_prefix():
    index = PrefixIndex(BS)
    first, second = (1, 2, 3, 4), (5, 6, 7, 8)
    h1 = chain_hash(ROOT_HASH, first)
    assert index.add(10, ROOT_HASH, first) and index.add(11, h1, second)
    match = index.match([1, 2, 3, 4, 5, 6, 7, 8, 9], limit=8)
    assert match.blocks == [10, 11] and match.hashes == [h1, chain_hash(h1, second)]
    assert match.num_tokens(BS) == 8
    # The same tokens after another prefix are other KV: no match.
    assert index.match([9, 9, 9, 9, 5, 6, 7, 8, 1], limit=8).blocks == []
    # The limit keeps the last prompt token out: the second block then matches only partly (copied).
    match = index.match([1, 2, 3, 4, 5, 6, 7, 8], limit=7)
    assert match.blocks == [10] and (match.partial_block, match.partial_tokens) == (11, 3)


def test_partial_entries_continue_a_match_token_by_token():
    index = PrefixIndex(BS)
    first = (1, 2, 3, 4)
    h1 = chain_hash(ROOT_HASH, first)
    index.add(0, ROOT_HASH, first)
    index.add(1, h1, (5, 6))  # a finished turn's unfilled last block
    index.add(2, h1, (5, 7, 7, 7))
    match = index.match([1, 2, 3, 4, 5, 6, 9, 9, 9], limit=8)
    assert match.blocks == [0] and (match.partial_block, match.partial_tokens) == (1, 2)
    match = index.match([1, 2, 3, 4, 5, 7, 7, 1, 1], limit=8)
    assert (match.partial_block, match.partial_tokens) == (2, 3)
    assert not index.add(3, h1, (5, 6)), "a second block with the same key is not indexed"
    index.remove(1)
    assert index.match([1, 2, 3, 4, 5, 6, 9], limit=6).partial_tokens == 1  # block 2 still shares the 5
    assert 1 not in index and len(index) == 2
