"""KV cache managers: the only code that hands out cache storage.

``KVCacheManager`` is the interface the scheduler talks to: ``allocate`` a
sequence (or learn there is no room yet, a result and not an error),
``reserve`` room for a step's tokens, ``commit`` what a step computed, ``free``
it, and ``pack`` a step's inputs for the buffers the executor binds.
``clika_runtime.engine.kv.continuous_cache.ContinuousKVCache`` gives each
sequence one slot, a row of ``[slots, kv_heads, capacity, head_dim]`` NumPy
buffers per layer that the graph updates in place;
``clika_runtime.engine.kv.paged_cache.PagedKVCache`` keeps KV in a pool of
fixed-size blocks instead. Both lay their buffers out with ``kv_buffer``.
"""

from __future__ import annotations

import abc
import mmap
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from clika_runtime.engine.kv.kv_snapshot import KVSnapshot
from clika_runtime.engine.sequence import Sequence
from clika_runtime.engine.step_plan import ScheduledRow, StepPlan

# A prompt's last tokens computed again even when the cache holds them: the last one's logits
# start the reply, and a step of one token rounds differently from a step of more (ONNX Runtime's
# int4 products take another kernel for a single row), so with two a prompt found in the cache
# gives the logits, and a seeded request the text, of the same prompt computed whole.
RECOMPUTED_TAIL = 2


def reuse_limit(num_prompt_tokens: int) -> int:
    """How many of a prompt's leading tokens a cached prefix may cover."""
    return max(num_prompt_tokens - RECOMPUTED_TAIL, 0)


def kv_buffer(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A zeroed KV buffer whose memory is committed page by page as its rows are written.

    Transparent huge pages would back it with 2 MB pages, each zeroed whole at the first
    write anywhere in it, so RSS and first-touch time would follow the buffer's size rather
    than the tokens held (8 slots x 768 positions of SmolLM2-135M: +170 MB peak RSS and
    0.4-0.6 s of page faults in the first steps).
    """
    count = int(np.prod(shape))
    nbytes = count * np.dtype(dtype).itemsize
    if not nbytes or not hasattr(mmap, "MADV_NOHUGEPAGE"):
        return np.zeros(shape, dtype=dtype)
    memory = mmap.mmap(-1, nbytes)  # anonymous memory reads as zeros; the array keeps it alive
    try:
        memory.madvise(mmap.MADV_NOHUGEPAGE)
    except OSError:  # a kernel without transparent huge pages
        pass
    return np.frombuffer(memory, dtype=dtype, count=count).reshape(shape)


def release_positions(buf: np.ndarray, slot: int, start: int) -> None:
    """Give the memory of ``buf[slot, :, start:]`` back to the system (it reads as zeros after).

    ``buf`` is a ``kv_buffer`` ``[slots, heads, capacity, head_dim]``: each (slot, head) row
    is contiguous, so whole pages past ``start`` in each row are dropped (MADV_DONTNEED).
    """
    memory = buf
    while memory is not None and not isinstance(memory, mmap.mmap):
        memory = memory.obj if isinstance(memory, memoryview) else getattr(memory, "base", None)
    if memory is None or not hasattr(mmap, "MADV_DONTNEED"):
        return  # a plain NumPy buffer: its memory stays until the buffer goes
    _, heads, capacity, head_dim = buf.shape
    position = head_dim * buf.itemsize
    for head in range(heads):
        row = (slot * heads + head) * capacity * position
        begin = -(-(row + start * position) // mmap.PAGESIZE) * mmap.PAGESIZE
        end = (row + capacity * position) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > begin:
            memory.madvise(mmap.MADV_DONTNEED, begin, end - begin)


@dataclass(frozen=True)
class Allocation:
    """Where a sequence's KV lives and how many of its leading tokens are already there."""

    slot: int
    cached_tokens: int


@dataclass(frozen=True)
class PackedStep:
    """One step's graph inputs (the KV buffers aside) and where the sampled rows' logits land."""

    feeds: dict[str, np.ndarray]
    num_logits: int
    sample_logits: list[int]  # the logits row of each of ``plan.sample_rows``, in order (a draft row: all)


def sampled_logits(plan: StepPlan, rows_of: list[slice]) -> list[int]:
    """The logits rows the sampler reads, from each of ``plan.sample_rows``' slice ``rows_of``:
    its last one, or every one of a row with a draft (each verifies a guessed token)."""
    if plan.has_drafts:
        return [i for rows in rows_of for i in range(rows.start, rows.stop)]
    return [rows.start for rows in rows_of]


@dataclass(frozen=True)
class CacheShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float32"


class KVCacheManager(abc.ABC):
    """What the scheduler and executor need from a KV cache.

    Every cache binds per-layer key and value buffers to a graph of ``num_rows`` rows; ``_version``
    counts the times a cache replaced them.
    """

    def __init__(self, shape: CacheShape, *, num_slots: int, max_seq: int, prefix_reuse: bool) -> None:
        self.shape = shape
        self.max_seq = max_seq
        self.prefix_reuse = prefix_reuse
        self._num_slots = num_slots
        self._keys: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._version = 0

    @abc.abstractmethod
    def allocate(self, seq: Sequence) -> Allocation | None:
        """Reserve storage for ``seq``'s whole reply, or None when there is no room now."""

    @abc.abstractmethod
    def free(self, seq: Sequence) -> None:
        """Release ``seq``'s storage (what it computed may serve a later prefix)."""

    def reserve(self, seq: Sequence, num_new: int) -> bool:
        """Make room for ``seq``'s next ``num_new`` tokens; False when there is none now."""
        return True

    def commit(self, seq: Sequence) -> None:  # noqa: B027 - optional hook: most caches record nothing
        """Record what a step computed for ``seq`` (its ``num_computed_tokens`` advanced)."""

    @abc.abstractmethod
    def pack(self, plan: StepPlan, context_window: int | None) -> PackedStep:
        """The graph inputs of ``plan`` over this cache's layout."""

    def packing_order(self, plan: StepPlan) -> list[ScheduledRow]:
        """The plan's rows in the order ``pack`` lays their tokens along ``T``."""
        return list(plan.rows)

    def snapshot(self, token_ids: list[int]) -> KVSnapshot | None:
        """The KV held for the longest cached prefix of ``token_ids`` (None: none, or a cache that
        keeps no snapshots: only the paged cache does, ``clika_runtime.engine.kv.kv_snapshot``)."""
        return None

    def install(self, snapshot: KVSnapshot) -> int:
        """Hold ``snapshot`` as the cached prefix of its tokens; how many tokens it holds (0: none)."""
        return 0

    @abc.abstractmethod
    def ensure_slots(self, num_slots: int) -> None:
        """Let ``num_slots`` sequences hold storage at once."""

    @property
    @abc.abstractmethod
    def token_capacity(self) -> int:
        """The most tokens one sequence could ever hold (a longer request can never run)."""

    @property
    @abc.abstractmethod
    def nbytes(self) -> int:
        """Bytes of KV buffers allocated now."""

    def usage(self) -> dict[str, int]:
        """What the cache holds, for ``residency`` reports."""
        return {"kv_cache_bytes": self.nbytes, "slots": self.num_rows, "capacity": self.capacity}

    @property
    @abc.abstractmethod
    def num_free(self) -> int:
        """Sequences that could be allocated now."""

    @property
    def num_rows(self) -> int:
        """The batch size of the graph's KV inputs (rows a step may address)."""
        return self._num_slots

    @property
    @abc.abstractmethod
    def capacity(self) -> int:
        """The sequence dimension of the bound buffers (what a row's past plus a step must fit)."""

    @property
    def version(self) -> int:
        """Changes whenever the buffers are replaced (the executor then rebinds them)."""
        return self._version

    def buffers(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per-layer key and value buffers, bound as both past and present."""
        return self._keys, self._values

    @abc.abstractmethod
    def check_integrity(self, live: Mapping[int, int]) -> None:
        """Raise AssertionError when the bookkeeping disagrees with ``live`` (request id -> slot)."""
