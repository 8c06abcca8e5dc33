"""The paged KV cache: per layer one NumPy pool of fixed-size blocks, a block table per sequence.

The pools ``[kv_heads, num_blocks, block_size, head_dim]`` (head-major: a
row's gathered blocks are one contiguous sequence per head) are bound to the
paged step graph as both past and present; the graph writes each new token's
K/V into the slot ``slot_mapping`` names and reads a row's KV through its
block table (``clika_export.graph.paged_attention``).

Memory grows with the tokens held: the pools start empty and double (up to
``max_bytes``) when no block is free, so finished sequences' blocks stay
cached until the budget needs them; then the least recently used cached block
is evicted. A request is admitted only when its whole prompt fits next to the
running sequences (one spare block each), so prompts do not preempt each
other in turns; when a running sequence still finds no block the scheduler
preempts another one.

Prefix reuse (``clika_runtime.engine.kv.prefix_cache``): a block is indexed by its
chain key once full (so concurrent requests share a system prompt as soon as
the first has computed it; a block computed twice in the same step is merged
into the indexed one), a finished sequence's last unfilled block is indexed
as a partial entry, and a new sequence shares the full blocks of its longest
cached prefix and copies the partial continuation into a private block: a
shared block is never written (copy on write).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from clika_runtime.contract.paged_step_graph import PagedRow, pack_paged_step
from clika_runtime.engine.bounds import require_at_least
from clika_runtime.engine.kv.block_pool import BlockPool
from clika_runtime.engine.kv.kv_cache import (
    Allocation,
    CacheShape,
    KVCacheManager,
    PackedStep,
    kv_buffer,
    reuse_limit,
    sampled_logits,
)
from clika_runtime.engine.kv.kv_snapshot import KVSnapshot, install_snapshot, take_snapshot
from clika_runtime.engine.kv.prefix_cache import ROOT_HASH, PrefixIndex, PrefixMatch, chain_hash
from clika_runtime.engine.sequence import Sequence
from clika_runtime.engine.step_plan import StepPlan

# The pools' first allocation, in blocks (then doubling).
INITIAL_BLOCKS = 16


class PagedKVCache(KVCacheManager):
    """Block tables over per-layer block pools, with a prefix cache and a byte budget."""

    def __init__(
        self,
        shape: CacheShape,
        *,
        block_size: int,
        max_bytes: int,
        num_slots: int,
        max_seq: int,
        prefix_reuse: bool = True,
    ) -> None:
        require_at_least(1, block_size=block_size, num_slots=num_slots)
        super().__init__(shape, num_slots=num_slots, max_seq=max_seq, prefix_reuse=prefix_reuse)
        self.block_size = block_size
        itemsize = np.dtype(shape.dtype).itemsize
        self.block_bytes = 2 * shape.num_layers * shape.num_kv_heads * block_size * shape.head_dim * itemsize
        self.max_blocks = int(max_bytes) // self.block_bytes
        if self.max_blocks < 1:
            raise ValueError(
                f"a KV budget of {max_bytes} bytes holds no block: one block of {block_size} tokens "
                f"takes {self.block_bytes} bytes"
            )
        self.max_bytes = int(max_bytes)
        self.index = PrefixIndex(block_size)
        self.pool = BlockPool(self.index)
        self._free_slots: list[int] = list(range(num_slots))
        self._tables: dict[int, list[int]] = {}  # request id -> blocks, in position order
        self._hashes: dict[int, list[int]] = {}  # request id -> prefix hash after each indexed full block
        self._seqs: dict[int, Sequence] = {}
        self.num_merged = 0  # blocks computed twice in one step and merged into the indexed copy

    # -- the interface -------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        return len(self._free_slots)

    @property
    def capacity(self) -> int:
        return self.max_seq

    @property
    def nbytes(self) -> int:
        return self.pool.num_blocks * self.block_bytes

    @property
    def token_capacity(self) -> int:
        return min(self.max_seq, self.max_blocks * self.block_size)

    def ensure_slots(self, num_slots: int) -> None:
        if num_slots > self._num_slots:
            self._free_slots.extend(range(self._num_slots, num_slots))
            self._num_slots = num_slots

    def usage(self) -> dict[str, int]:
        return {
            "kv_cache_bytes": self.nbytes,
            "kv_cache_budget_bytes": self.max_bytes,
            "slots": self.num_rows,
            "capacity": self.capacity,
            "block_size": self.block_size,
            "blocks": self.pool.num_blocks,
            "blocks_owned": self.pool.num_owned,
            "blocks_cached": self.pool.num_cached,
            "blocks_free": self.pool.num_free,
            "kv_bytes_owned": self.pool.num_owned * self.block_bytes,
            "kv_bytes_cached": self.pool.num_cached * self.block_bytes,
        }

    def table(self, seq: Sequence) -> list[int]:
        """``seq``'s block table (a copy)."""
        return list(self._tables[seq.request_id])

    def allocate(self, seq: Sequence) -> Allocation | None:
        if not self._free_slots:
            return None
        tokens = seq.cache_ids
        match = self.index.match(tokens, reuse_limit(len(tokens))) if self.prefix_reuse else PrefixMatch()
        if not self._fits(tokens, match):
            # Copying a partial match takes one block more than computing it: without it the
            # request fits whenever it fits at all (no deadlock when the budget is just enough).
            match = PrefixMatch(match.blocks, match.hashes)
            if not self._fits(tokens, match):
                return None
        for block in match.blocks:
            self.pool.share(block)
        table = list(match.blocks)
        if match.partial_tokens:
            table.append(self._copied(match))
        rid = seq.request_id
        self._tables[rid] = table
        self._hashes[rid] = list(match.hashes)
        self._seqs[rid] = seq
        slot = self._free_slots.pop(0)
        return Allocation(slot=slot, cached_tokens=match.num_tokens(self.block_size))

    def reserve(self, seq: Sequence, num_new: int) -> bool:
        table = self._tables[seq.request_id]
        needed = self._blocks_for(seq.num_computed_tokens + num_new)
        while len(table) < needed:
            block = self.take_block()
            if block is None:
                return False
            table.append(block)
        return True

    def commit(self, seq: Sequence) -> None:
        """Index the blocks ``seq`` filled; a block someone else already indexed replaces ours."""
        if not self.prefix_reuse:
            return
        rid = seq.request_id
        table, hashes = self._tables[rid], self._hashes[rid]
        bs = self.block_size
        keyed = seq.cache_ids
        for i in range(len(hashes), seq.num_computed_tokens // bs):
            parent = hashes[-1] if hashes else ROOT_HASH
            tokens = tuple(keyed[i * bs : (i + 1) * bs])
            indexed = self.index.find_full(parent, tokens)
            if indexed is None:
                self.index.add(table[i], parent, tokens)
            elif indexed != table[i]:
                self.pool.share(indexed)
                self.pool.release(table[i])
                table[i] = indexed
                self.num_merged += 1
            hashes.append(chain_hash(parent, tokens))

    def free(self, seq: Sequence) -> None:
        rid = seq.request_id
        assert rid in self._tables and seq.slot is not None, f"{seq} holds no blocks"
        self.commit(seq)
        table, hashes = self._tables.pop(rid), self._hashes.pop(rid)
        del self._seqs[rid]
        self._keep_partial_tail(seq, table, hashes)
        # Tail first: a later eviction takes a sequence's last blocks before its (more shared) prefix.
        for block in reversed(table):
            self.pool.release(block)
        self._free_slots.append(seq.slot)

    def snapshot(self, token_ids: list[int]) -> KVSnapshot | None:
        return take_snapshot(self, token_ids)

    def install(self, snapshot: KVSnapshot) -> int:
        return install_snapshot(self, snapshot)

    def pack(self, plan: StepPlan, context_window: int | None) -> PackedStep:
        rows = [
            PagedRow(r.start, r.new_token_ids, self._tables[r.seq.request_id], bool(r.draft))
            for r in plan.rows
        ]
        packed = pack_paged_step(rows, block_size=self.block_size, context_window=context_window)
        position = {id(r): i for i, r in enumerate(plan.rows)}
        sample = sampled_logits(plan, [packed.logits_rows[position[id(r)]] for r in plan.sample_rows])
        return PackedStep(packed.feeds(), len(packed.logits_index), sample)

    # -- blocks ------------------------------------------------------------------------

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _fits(self, tokens: list[int], match: PrefixMatch) -> bool:
        """Room for the whole prompt now, next to one spare block per running sequence."""
        needed = self._blocks_for(len(tokens)) - len(match.blocks)
        # Cached blocks this match reuses (or copies from) are not free for the new blocks.
        pinned = [*match.blocks, *([match.partial_block] if match.partial_block is not None else [])]
        idle_matched = sum(1 for b in pinned if self.pool.refcount[b] == 0)
        growable = self.max_blocks - self.pool.num_blocks
        available = self.pool.num_available - idle_matched + growable
        return needed + len(self._tables) <= available

    def take_block(self) -> int | None:
        """A fresh block: a free one (growing the pools under the budget first), else evict the LRU one."""
        if self.pool.num_free == 0 and self.pool.num_blocks < self.max_blocks:
            self._grow()
        return self.pool.allocate()

    def _copied(self, match: PrefixMatch) -> int:
        """A private block holding ``match``'s partial continuation (copy on write)."""
        source = match.partial_block
        assert source is not None
        self.pool.share(source)  # pinned: allocating the copy must not evict its source
        block = self.take_block()
        assert block is not None, "admission checked there was room"
        n = match.partial_tokens
        for pools in (self._keys, self._values):
            for pool in pools:
                pool[:, block, :n] = pool[:, source, :n]
        self.pool.release(source)
        return block

    def _keep_partial_tail(self, seq: Sequence, table: list[int], hashes: list[int]) -> None:
        """Index the unfilled last block a sequence leaves (a chat's next turn continues from it)."""
        full, rest = divmod(seq.num_computed_tokens, self.block_size)
        if not self.prefix_reuse or not rest or full >= len(table) or len(hashes) != full:
            return
        block = table[full]
        if self.pool.refcount[block] == 1:
            start = full * self.block_size
            self.index.add(
                block, hashes[-1] if hashes else ROOT_HASH, tuple(seq.cache_ids[start : start + rest])
            )

    def _grow(self) -> None:
        """Double the pools (at least ``INITIAL_BLOCKS``, at most the budget); content is kept."""
        old = self.pool.num_blocks
        new = min(self.max_blocks, max(INITIAL_BLOCKS, 2 * old))
        s = self.shape
        full = (s.num_kv_heads, new, self.block_size, s.head_dim)

        def grown(previous: np.ndarray | None) -> np.ndarray:
            # Zeros: attention masks stale positions, but masked values must still be finite.
            # kv_buffer commits memory as blocks are written, as the continuous cache does.
            array = kv_buffer(full, s.dtype)
            if previous is not None:
                array[:, :old] = previous
            return array

        self._keys = [grown(k) for k in (self._keys or [None] * s.num_layers)]
        self._values = [grown(v) for v in (self._values or [None] * s.num_layers)]
        self.pool.add_blocks(new - old)
        self._version += 1

    # -- checks --------------------------------------------------------------------------

    def check_integrity(self, live: Mapping[int, int]) -> None:
        assert set(self._tables) == set(live) == set(self._seqs), "block tables and live sequences disagree"
        used_slots = [self._seqs[rid].slot for rid in self._tables]
        assert sorted(used_slots + self._free_slots) == list(range(self._num_slots)), "slots drifted"
        holders: dict[int, int] = {}
        for rid, table in self._tables.items():
            seq = self._seqs[rid]
            assert len(table) >= self._blocks_for(seq.num_computed_tokens), f"{seq} has too few blocks"
            if self.prefix_reuse:
                assert len(self._hashes[rid]) == seq.num_computed_tokens // self.block_size, "unindexed block"
            for block in table:
                holders[block] = holders.get(block, 0) + 1
        for block, count in holders.items():
            if count > 1:
                assert block in self.index and self.index.is_full(block), f"shared block {block} is not full"
        self.pool.check_integrity(holders)
        for pools in (self._keys, self._values):
            for pool in pools:
                assert pool.shape[1] == self.pool.num_blocks, "pool arrays and block ids disagree"
        assert self.pool.num_blocks <= self.max_blocks, "the pools outgrew the budget"
