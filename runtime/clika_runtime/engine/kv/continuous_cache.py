"""The continuous KV cache: one slot per sequence, a row of every layer's buffers.

Prefix reuse: a freed slot remembers which tokens its KV holds, and a later
sequence whose prompt starts with those tokens takes that slot and skips
computing the shared prefix (a chat's next turn). When a slot still running
holds a longer prefix (a system prompt shared by concurrent requests), its rows
are copied into the new sequence's slot (about 1 ms per 128 tokens on
SmolLM2-135M, far below computing them). ``slot_prefix`` picks the slot.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from clika_runtime.contract.step_graph import StepRow, pack_step
from clika_runtime.engine.bounds import require_at_least
from clika_runtime.engine.decode_packer import DecodePacker
from clika_runtime.engine.kv.kv_cache import (
    Allocation,
    CacheShape,
    KVCacheManager,
    PackedStep,
    kv_buffer,
    release_positions,
    sampled_logits,
)
from clika_runtime.engine.kv.kv_snapshot import KVSnapshot
from clika_runtime.engine.kv.slot_prefix import best_free_slot, best_running_prefix, shared_length
from clika_runtime.engine.sequence import Sequence
from clika_runtime.engine.step_plan import ScheduledRow, StepPlan

# Capacity grows in these steps so a growing conversation rarely reallocates.
CAPACITY_ALIGN = 256
# Positions an idle cache keeps in each free slot but the last freed (a shared system prompt's worth).
IDLE_KEEP_POSITIONS = 256


class ContinuousKVCache(KVCacheManager):
    """One slot per sequence; buffers grow (slots, capacity) on demand up to ``max_seq + slack``.

    Memory follows the tokens held: buffer pages are committed as positions are
    written, a slot taken by a new sequence drops what it held past the reused
    prefix, and when the last running sequence ends every free slot but the
    most recently freed one (a chat's next turn reuses it) gives back all but
    its first ``IDLE_KEEP_POSITIONS``.
    ``max_bytes`` caps the KV the running sequences may reserve (prompt plus
    ``max_new_tokens`` each); a sequence that does not fit waits, except that
    one sequence alone always runs. None: no cap.
    """

    def __init__(
        self,
        shape: CacheShape,
        *,
        num_slots: int,
        max_seq: int,
        slack: int = 0,
        prefix_reuse: bool = True,
        max_bytes: int | None = None,
    ) -> None:
        require_at_least(1, num_slots=num_slots)
        super().__init__(shape, num_slots=num_slots, max_seq=max_seq, prefix_reuse=prefix_reuse)
        # The graph needs past_len + step width <= capacity for every active row:
        # ``slack`` (the widest step) keeps room above a sequence's last position.
        self.slack = slack
        self._capacity = 0
        self._owner: dict[int, int] = {}  # slot -> request id
        self._seqs: dict[int, Sequence] = {}  # slot -> the sequence running in it
        self._free: list[int] = list(range(num_slots))  # least recently freed first
        self._held: dict[int, np.ndarray] = {}  # free slot -> token ids its KV still holds
        self._written: dict[int, int] = {}  # slot -> leading positions whose memory may be committed
        self._reserved: dict[int, int] = {}  # running slot -> positions its sequence may reach
        self.max_bytes = max_bytes
        self._decode = DecodePacker()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._keys) + sum(a.nbytes for a in self._values)

    @property
    def token_capacity(self) -> int:
        return self.max_seq

    def ensure_slots(self, num_slots: int) -> None:
        """Grow to ``num_slots`` rows (existing slots keep their content)."""
        if num_slots <= self._num_slots:
            return
        self._free.extend(range(self._num_slots, num_slots))
        self._num_slots = num_slots
        if self.capacity:
            self._reallocate(num_slots, self.capacity)

    @property
    def bytes_per_position(self) -> int:
        """KV bytes of one token of one slot, over every layer (keys and values)."""
        s = self.shape
        return 2 * s.num_layers * s.num_kv_heads * s.head_dim * np.dtype(s.dtype).itemsize

    def allocate(self, seq: Sequence) -> Allocation | None:
        if not self._free:
            return None
        needed = min(self.max_seq, seq.num_prompt_tokens + seq.config.max_new_tokens) + self.slack
        if self._over_budget(needed):
            return None
        if needed > self.capacity:
            self._grow(needed)
        prompt = np.asarray(seq.cache_ids, dtype=np.int64)
        slot, cached, source = best_free_slot(self._free, self._held, prompt, prefix_reuse=self.prefix_reuse)
        if source >= 0:
            self._copy_prefix(source, slot, cached)
        if self.prefix_reuse:
            source, shared = best_running_prefix(self._seqs, prompt)
            if shared > cached:
                self._copy_prefix(source, slot, shared)
                cached = shared
        self._free.remove(slot)
        self._held.pop(slot, None)
        self._release(slot, cached)  # what the slot held past the reused prefix is stale
        self._owner[slot] = seq.request_id
        self._seqs[slot] = seq
        self._reserved[slot] = needed
        return Allocation(slot=slot, cached_tokens=cached)

    def free(self, seq: Sequence) -> None:
        slot = seq.slot
        assert slot is not None and self._owner.get(slot) == seq.request_id, f"{seq} does not own its slot"
        del self._owner[slot]
        del self._seqs[slot]
        del self._reserved[slot]
        self._free.append(slot)
        self._written[slot] = max(self._written.get(slot, 0), seq.num_computed_tokens)
        if self.prefix_reuse and seq.num_computed_tokens:
            self._held[slot] = np.asarray(seq.cache_ids[: seq.num_computed_tokens], dtype=np.int64)
        if not self._owner:
            self._release_idle()

    def snapshot(self, token_ids: list[int]) -> KVSnapshot | None:
        """The KV a free slot holds for the longest prefix of ``token_ids`` it starts with."""
        best, best_shared = -1, 0
        wanted = np.asarray(token_ids, dtype=np.int64)
        for slot in self._free:
            held = self._held.get(slot)
            if held is None:
                continue
            shared = shared_length(held, wanted)
            if shared > best_shared:
                best, best_shared = slot, shared
        if best < 0:
            return None
        rows = [np.ascontiguousarray(buf[best, :, :best_shared]) for buf in (*self._keys, *self._values)]
        layers = self.shape.num_layers
        return KVSnapshot(tuple(int(t) for t in wanted[:best_shared]), rows[:layers], rows[layers:])

    def install(self, snapshot: KVSnapshot) -> int:
        """Write ``snapshot`` into a free slot (an empty one first, else the least recently freed)
        that then holds its tokens, as a finished turn's slot does; 0 with no free slot or no reuse."""
        n = min(snapshot.num_tokens, self.max_seq)
        if not self.prefix_reuse or not self._free or not n:
            return 0
        if n + self.slack > self.capacity:
            self._grow(n + self.slack)
        empty = [slot for slot in self._free if slot not in self._held]
        slot = empty[0] if empty else self._free[0]
        self._release(slot, 0)
        for buffers, layers in ((self._keys, snapshot.keys), (self._values, snapshot.values)):
            for buf, layer in zip(buffers, layers, strict=True):
                buf[slot, :, :n] = layer[:, :n]
        self._free.remove(slot)
        self._free.append(slot)  # the most recently freed: kept whole while the cache idles
        self._held[slot] = np.asarray(snapshot.token_ids[:n], dtype=np.int64)
        self._written[slot] = n
        return n

    def _over_budget(self, needed: int) -> bool:
        if self.max_bytes is None or not self._owner:
            return False  # no cap, or a sequence alone: it always runs
        return (sum(self._reserved.values()) + needed) * self.bytes_per_position > self.max_bytes

    def _release_idle(self) -> None:
        """Nothing runs: every free slot but the last freed keeps at most IDLE_KEEP_POSITIONS.

        The last freed slot keeps all it holds (a chat's next turn continues it); the
        others keep a system prompt's worth of prefix (the next batch of a drafting
        assistant, or requests sharing one, still find it) and give the rest back.
        """
        for slot in self._free[:-1]:
            held = self._held.get(slot)
            if held is not None and len(held) > IDLE_KEEP_POSITIONS:
                self._held[slot] = held[:IDLE_KEEP_POSITIONS]
            self._release(slot, 0 if held is None else len(self._held[slot]))

    def _release(self, slot: int, keep: int) -> None:
        """Drop the memory of ``slot``'s positions from ``keep`` on, in every layer."""
        if self._written.get(slot, 0) <= keep:
            return
        for buf in (*self._keys, *self._values):
            release_positions(buf, slot, keep)
        self._written[slot] = keep

    def pack(self, plan: StepPlan, context_window: int | None) -> PackedStep:
        if plan.is_decode:
            packed = self._pack_decode(plan, context_window)
            if packed is not None:
                return packed
        rows = [StepRow(0, ())] * self.num_rows
        for row in plan.rows:
            rows[row.slot] = StepRow(row.start, row.new_token_ids, bool(row.draft))
        packed = pack_step(rows, capacity=self.capacity, context_window=context_window)
        sample = sampled_logits(plan, [packed.logits_rows[r.slot] for r in plan.sample_rows])
        return PackedStep(packed.feeds(), len(packed.logits_index), sample)

    def packing_order(self, plan: StepPlan) -> list[ScheduledRow]:
        """Slot order: ``pack`` gives each slot its grid row, the packed tokens follow them."""
        return sorted(plan.rows, key=lambda row: row.slot)

    def _pack_decode(self, plan: StepPlan, context_window: int | None) -> PackedStep | None:
        """A step of one token per row (rows in slot order): the packer's fast path."""
        rows = plan.rows
        tokens = [r.seq.token_ids[r.start] for r in rows]
        feeds = self._decode.pack(
            self.num_rows,
            [r.slot for r in rows],
            [r.start for r in rows],
            tokens,
            capacity=self.capacity,
            context_window=context_window,
        )
        if feeds is None:
            return None
        # Each row's logits sit at its rank in slot order.
        sample = [i for i, r in enumerate(rows) if r.sample]
        return PackedStep(feeds, len(rows), sample)

    def _copy_prefix(self, source: int, slot: int, num_tokens: int) -> None:
        """Copy the first ``num_tokens`` positions of ``source``'s KV into ``slot`` (every layer)."""
        for buffers in (self._keys, self._values):
            for buf in buffers:
                buf[slot, :, :num_tokens] = buf[source, :, :num_tokens]
        self._written[slot] = max(self._written.get(slot, 0), num_tokens)

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * self.capacity)
        capacity = -(-capacity // CAPACITY_ALIGN) * CAPACITY_ALIGN
        self._reallocate(self._num_slots, min(capacity, self.max_seq + self.slack))

    def _reallocate(self, num_slots: int, capacity: int) -> None:
        s = self.shape
        full = (num_slots, s.num_kv_heads, capacity, s.head_dim)
        # Each slot's own held positions are copied: the rest are zeros already, and
        # copying them would commit memory for rows no sequence has reached.
        held = {slot: self._positions_of(slot) for slot in range(self._num_slots)}

        def grown(old: np.ndarray | None) -> np.ndarray:
            new = kv_buffer(full, s.dtype)
            if old is not None:
                for slot, used in held.items():
                    if used and slot < old.shape[0]:
                        new[slot, :, :used] = old[slot, :, :used]
            return new

        old_keys = self._keys or [None] * s.num_layers
        old_values = self._values or [None] * s.num_layers
        self._keys = [grown(k) for k in old_keys]
        self._values = [grown(v) for v in old_values]
        self._capacity = capacity
        self._version += 1

    def _positions_of(self, slot: int) -> int:
        """The leading positions ``slot`` holds KV for (running, or kept for a prefix)."""
        seq = self._seqs.get(slot)
        held = seq.num_computed_tokens if seq is not None else len(self._held.get(slot, ()))
        return min(held, self.capacity)

    def check_integrity(self, live: Mapping[int, int]) -> None:
        assert {rid: slot for slot, rid in self._owner.items()} == dict(live), "slot owners drifted"
        assert set(self._seqs) == set(self._owner), "running sequences and slot owners disagree"
        owned = set(self._owner)
        free = set(self._free)
        assert len(free) == len(self._free), "a slot is free twice"
        assert not owned & free, f"slots both owned and free: {sorted(owned & free)}"
        assert owned | free == set(range(self._num_slots)), "a slot is neither owned nor free"
        assert set(self._held) <= free, "an owned slot still advertises held tokens"
        assert set(self._reserved) == owned, "reservations and slot owners disagree"
        for buf in (*self._keys, *self._values):
            assert buf.shape[0] == self._num_slots and buf.shape[2] == self.capacity, "buffer shape drifted"
