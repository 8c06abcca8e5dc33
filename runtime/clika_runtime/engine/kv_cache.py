"""KV cache managers: the only code that hands out cache storage.

``KVCacheManager`` is the interface the scheduler talks to: ``allocate`` a
sequence (or learn there is no room yet, a result and not an error), ``free``
it, and read the buffers the executor binds. ``ContinuousKVCache`` gives each
sequence one slot, a row of ``[slots, kv_heads, capacity, head_dim]`` NumPy
buffers per layer that the graph updates in place. The paged block pool will
implement the same interface.

A freed slot remembers which tokens its KV holds. A later sequence whose
prompt starts with those tokens takes that slot and skips computing the
shared prefix (a chat's next turn, a repeated system prompt).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from clika_runtime.engine.types import Sequence

# Capacity grows in these steps so a growing conversation rarely reallocates.
CAPACITY_ALIGN = 256


@dataclass(frozen=True)
class Allocation:
    """Where a sequence's KV lives and how many of its leading tokens are already there."""

    slot: int
    cached_tokens: int


@dataclass(frozen=True)
class CacheShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float32"


class KVCacheManager(abc.ABC):
    """What the scheduler and executor need from a KV cache."""

    @abc.abstractmethod
    def allocate(self, seq: Sequence) -> Allocation | None:
        """Reserve storage for ``seq``'s whole reply, or None when there is no room now."""

    @abc.abstractmethod
    def free(self, seq: Sequence) -> None:
        """Release ``seq``'s storage (what it computed may serve a later prefix)."""

    @property
    @abc.abstractmethod
    def num_free(self) -> int:
        """Sequences that could be allocated now."""

    @property
    @abc.abstractmethod
    def num_rows(self) -> int:
        """The batch size of the graph's KV inputs (rows a step may address)."""

    @property
    @abc.abstractmethod
    def capacity(self) -> int:
        """The sequence dimension of the bound buffers (what a row's past plus a step must fit)."""

    @property
    @abc.abstractmethod
    def version(self) -> int:
        """Changes whenever the buffers are replaced (the executor then rebinds them)."""

    @abc.abstractmethod
    def buffers(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per-layer key and value buffers, bound as both past and present."""

    @abc.abstractmethod
    def check_integrity(self, live: Mapping[int, int]) -> None:
        """Raise AssertionError when the bookkeeping disagrees with ``live`` (request id -> slot)."""


class ContinuousKVCache(KVCacheManager):
    """One slot per sequence; buffers grow (slots, capacity) on demand up to ``max_seq + slack``."""

    def __init__(
        self, shape: CacheShape, *, num_slots: int, max_seq: int, slack: int = 0, prefix_reuse: bool = True
    ) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        self.shape = shape
        self.max_seq = max_seq
        # The graph needs past_len + step width <= capacity for every active row:
        # ``slack`` (the widest step) keeps room above a sequence's last position.
        self.slack = slack
        self.prefix_reuse = prefix_reuse
        self._capacity = 0
        self._num_slots = num_slots
        self._keys: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._version = 0
        self._owner: dict[int, int] = {}  # slot -> request id
        self._free: list[int] = list(range(num_slots))  # least recently freed first
        self._held: dict[int, np.ndarray] = {}  # free slot -> token ids its KV still holds

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_rows(self) -> int:
        return self._num_slots

    @property
    def version(self) -> int:
        return self._version

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._keys) + sum(a.nbytes for a in self._values)

    def buffers(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return self._keys, self._values

    def ensure_slots(self, num_slots: int) -> None:
        """Grow to ``num_slots`` rows (existing slots keep their content)."""
        if num_slots <= self._num_slots:
            return
        self._free.extend(range(self._num_slots, num_slots))
        self._num_slots = num_slots
        if self.capacity:
            self._reallocate(num_slots, self.capacity)

    def allocate(self, seq: Sequence) -> Allocation | None:
        if not self._free:
            return None
        needed = min(self.max_seq, seq.num_prompt_tokens + seq.config.max_new_tokens) + self.slack
        if needed > self.capacity:
            self._grow(needed)
        prompt = np.asarray(seq.request.prompt_ids, dtype=np.int64)
        slot, cached = self._best_slot(prompt)
        self._free.remove(slot)
        self._held.pop(slot, None)
        self._owner[slot] = seq.request_id
        return Allocation(slot=slot, cached_tokens=cached)

    def free(self, seq: Sequence) -> None:
        slot = seq.slot
        assert slot is not None and self._owner.get(slot) == seq.request_id, f"{seq} does not own its slot"
        del self._owner[slot]
        self._free.append(slot)
        if self.prefix_reuse and seq.num_computed_tokens:
            self._held[slot] = np.asarray(seq.token_ids[: seq.num_computed_tokens], dtype=np.int64)

    def _best_slot(self, prompt: np.ndarray) -> tuple[int, int]:
        """The free slot sharing the longest prefix with ``prompt``.

        Without a shared prefix: an empty slot, else the least recently freed one.
        """
        empty = [slot for slot in self._free if slot not in self._held]
        best_slot, best = (empty[0] if empty else self._free[0]), 0
        if not self.prefix_reuse:
            return best_slot, 0
        # At least the prompt's last token is computed again: its logits start the reply.
        limit = len(prompt) - 1
        for slot in self._free:
            held = self._held.get(slot)
            if held is None:
                continue
            n = min(limit, len(held))
            differ = np.flatnonzero(held[:n] != prompt[:n])
            shared = int(differ[0]) if differ.size else n
            if shared > best:
                best_slot, best = slot, shared
        return best_slot, best

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * self.capacity)
        capacity = -(-capacity // CAPACITY_ALIGN) * CAPACITY_ALIGN
        self._reallocate(self._num_slots, min(capacity, self.max_seq + self.slack))

    def _reallocate(self, num_slots: int, capacity: int) -> None:
        s = self.shape
        full = (num_slots, s.num_kv_heads, capacity, s.head_dim)

        def grown(old: np.ndarray | None) -> np.ndarray:
            new = np.zeros(full, dtype=s.dtype)
            if old is not None:
                new[: old.shape[0], :, : old.shape[2]] = old
            return new

        old_keys = self._keys or [None] * s.num_layers
        old_values = self._values or [None] * s.num_layers
        self._keys = [grown(k) for k in old_keys]
        self._values = [grown(v) for v in old_values]
        self._capacity = capacity
        self._version += 1

    def check_integrity(self, live: Mapping[int, int]) -> None:
        assert {rid: slot for slot, rid in self._owner.items()} == dict(live), "slot owners drifted"
        owned = set(self._owner)
        free = set(self._free)
        assert len(free) == len(self._free), "a slot is free twice"
        assert not owned & free, f"slots both owned and free: {sorted(owned & free)}"
        assert owned | free == set(range(self._num_slots)), "a slot is neither owned nor free"
        assert set(self._held) <= free, "an owned slot still advertises held tokens"
        for buf in (*self._keys, *self._values):
            assert buf.shape[0] == self._num_slots and buf.shape[2] == self.capacity, "buffer shape drifted"
