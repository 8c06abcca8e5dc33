"""Pick each step's work under a token budget; the only code that changes a sequence's status.

There are no prefill and decode phases. Every running sequence has tokens
whose KV is not computed yet (the rest of its prompt, or the one token it
sampled last); a step gives each of them a share of the budget:

1. sequences with one pending token (decoding) first, one token each, so a
   long prompt never freezes the streams already talking;
2. sequences still in their prompt next, as large a chunk as the budget
   leaves (chunked prefill falls out of this);
3. then waiting sequences, first come first served, while a slot is free and
   budget is left. A cache with no room is a result (they keep waiting).

Each row first reserves room for its tokens (a paged cache allocates blocks
step by step). When the cache has none left, the sequence admitted last
that is not yet in the step is preempted: its blocks go back to the cache
(they stay reusable as a cached prefix) and it waits at the head of the
queue to recompute what it had. A sequence that finds no room with nobody
else to take it from has outgrown the whole budget: it ends with "length".

After the ORT call ``update`` advances the computed counts, appends sampled
tokens and ends sequences on a stop id, ``max_new_tokens`` or a full context.

Speculative decoding (a request's ``prompt_lookup_num_tokens`` or
``num_assistant_tokens``): ``draft_requests`` names the decoding sequences that
may draft this step and how many tokens each (sharing the step's spare
budget); the engine asks its drafters (``clika_runtime.engine.spec_decode.drafting``) and
hands the drafts to ``schedule``, which runs each as the sequence's pending
token plus the draft in one row. ``update`` is one path for every row: the
computed count advances by the row's tokens minus the rejected drafts, and the
row's output tokens (the confirmed drafts and the model's next pick) join the
sequence.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seqs
from operator import attrgetter

from clika_runtime.engine.bounds import require_at_least
from clika_runtime.engine.errors import QueueFullError
from clika_runtime.engine.kv.kv_cache import KVCacheManager
from clika_runtime.engine.sequence import Sequence, SequenceStatus
from clika_runtime.engine.step_plan import RowOutput, ScheduledRow, StepPlan


class Scheduler:
    """Admission, the per-step token budget and every status change of the engine's sequences."""

    def __init__(
        self,
        cache: KVCacheManager,
        *,
        max_seq: int,
        max_active: int = 8,
        max_queued: int = 256,
        max_step_tokens: int = 256,
    ) -> None:
        require_at_least(1, max_active=max_active, max_step_tokens=max_step_tokens)
        require_at_least(0, max_queued=max_queued)
        self.cache = cache
        self.max_seq = max_seq
        self.max_active = max_active
        self.max_queued = max_queued
        self.max_step_tokens = max_step_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the last is preempted first
        self._by_id: dict[int, Sequence] = {}
        self._ended: list[Sequence] = []  # sequences ``schedule`` ended, for the engine to report
        self.num_preemptions = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def get(self, request_id: int) -> Sequence | None:
        return self._by_id.get(request_id)

    def add(self, seq: Sequence) -> None:
        """Queue ``seq``; a full queue raises QueueFullError and changes nothing."""
        # Requests a free slot will take at the next step do not count against the queue.
        free = max(self.max_active - len(self.running), 0)
        if len(self.waiting) >= self.max_queued + free:
            raise QueueFullError(f"the request queue is full ({self.max_queued} waiting); retry later")
        if seq.request_id in self._by_id:
            raise ValueError(f"request id {seq.request_id} is already in the engine")
        self.waiting.append(seq)
        self._by_id[seq.request_id] = seq

    def _split_running(self) -> tuple[list[Sequence], list[Sequence], int]:
        """The decoding and the prefilling sequences, and the budget the decode rows leave."""
        decoding: list[Sequence] = []
        prefilling: list[Sequence] = []
        for seq in self.running:
            (decoding if seq.num_pending_tokens == 1 else prefilling).append(seq)
        # Decode rows always run: a budget below the active count must not starve one.
        return decoding, prefilling, max(self.max_step_tokens, len(decoding)) - len(decoding)

    def draft_requests(self, limit_of: Callable[[Sequence], int]) -> list[tuple[Sequence, int]]:
        """The decoding sequences that may draft next step, each with the most tokens it may guess.

        ``limit_of(seq)`` is how many ``seq`` would guess (the drafting policy's word); the
        guesses share the step's spare budget, first come first served.
        """
        decoding, _, budget = self._split_running()
        wanted: list[tuple[Sequence, int]] = []
        for seq in decoding:
            limit = min(limit_of(seq), budget)
            if limit >= 1:
                wanted.append((seq, limit))
                budget -= limit
        return wanted

    def schedule(self, drafts: Mapping[int, Seqs[int]] | None = None) -> StepPlan | None:
        """This step's rows (sorted by slot, the order the graph packs them), or None when idle.

        ``drafts`` holds, by request id, tokens to guess after a decoding sequence's pending one
        (what the engine's drafters proposed for ``draft_requests``).
        """
        decoding, prefilling, budget = self._split_running()
        rows: list[ScheduledRow] = []
        drafts = drafts or {}
        for seq in decoding:
            if seq.status is not SequenceStatus.RUNNING:
                continue
            draft = tuple(drafts.get(seq.request_id, ()))[: max(budget, 0)]
            if draft and not self.cache.reserve(seq, 1 + len(draft)):
                draft = ()  # a guess never takes memory from another sequence
            # A decode row's one token is its last: it always samples.
            if self._make_room(seq, 1 + len(draft), rows):
                rows.append(ScheduledRow(seq, seq.slot, seq.num_computed_tokens, 1 + len(draft), True, draft))  # type: ignore[arg-type]
                budget -= len(draft)
        for seq in prefilling:
            if budget <= 0:
                break
            n = min(seq.num_pending_tokens, budget)
            if seq.status == SequenceStatus.RUNNING and self._make_room(seq, n, rows):
                rows.append(_row(seq, n))
                budget -= n
        while budget > 0 and self.waiting and len(self.running) < self.max_active:
            seq = self.waiting[0]
            if seq.num_tokens >= self.cache.token_capacity:  # could never run (submit refuses these)
                limit = self.cache.token_capacity
                self.finish(
                    seq,
                    SequenceStatus.FINISHED_ERROR,
                    f"{seq.num_tokens} tokens do not fit the KV cache ({limit})",
                )
                self._ended.append(seq)
                continue
            if not self._admit(seq):
                break
            n = min(seq.num_pending_tokens, budget)
            if self._make_room(seq, n, rows):
                rows.append(_row(seq, n))
                budget -= n
            else:
                break
        if not rows:
            return None
        rows.sort(key=_by_slot)
        return StepPlan(tuple(rows))

    def take_ended(self) -> list[Sequence]:
        """Sequences the last ``schedule`` ended (beyond the KV budget); each is returned once."""
        ended, self._ended = self._ended, []
        return ended

    def _make_room(self, seq: Sequence, num_new: int, rows: list[ScheduledRow]) -> bool:
        """Reserve cache room for ``seq``'s next tokens, preempting later-admitted sequences if needed.

        False when ``seq`` cannot run this step: it was preempted itself (others hold the
        memory) or, alone, has outgrown the budget and ended.
        """
        while not self.cache.reserve(seq, num_new):
            victim = self._victim(seq, rows)
            if victim is not None:
                self._preempt(victim)
            elif rows or len(self.running) > 1:
                self._preempt(seq)
                return False
            else:
                budget = self.cache.token_capacity
                self.finish(
                    seq, SequenceStatus.FINISHED_LENGTH, f"the KV cache budget ({budget} tokens) is full"
                )
                self._ended.append(seq)
                return False
        return True

    def _victim(self, seq: Sequence, rows: list[ScheduledRow]) -> Sequence | None:
        """The last-admitted running sequence admitted after ``seq`` and not in this step yet."""
        scheduled = {id(r.seq) for r in rows}
        for other in reversed(self.running):
            if other is seq:
                return None
            if id(other) not in scheduled:
                return other
        return None

    def _preempt(self, seq: Sequence) -> None:
        """Send a running sequence back to the head of the queue; it recomputes its tokens later."""
        self.running.remove(seq)
        self.cache.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.slot = None
        seq.num_computed_tokens = 0
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def _admit(self, seq: Sequence) -> bool:
        allocation = self.cache.allocate(seq)
        if allocation is None:
            return False
        self.waiting.popleft()
        seq.slot = allocation.slot
        seq.num_computed_tokens = allocation.cached_tokens
        if seq.first_scheduled_time is None:  # a preempted sequence keeps its first admission's figures
            seq.num_cached_tokens = allocation.cached_tokens
            seq.first_scheduled_time = time.perf_counter()
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        return True

    def tokens_taken(self, seq: Sequence, tokens: Seqs[int]) -> int:
        """How many of ``tokens`` ``seq`` would take before it ends (a stop id, its length, the context)."""
        completion, total = seq.num_completion_tokens, seq.num_tokens
        for taken, token in enumerate(tokens, 1):
            if token in seq.stop_ids or completion + taken >= seq.config.max_new_tokens:
                return taken
            if total + taken >= self.max_seq:
                return taken
        return len(tokens)

    def update(self, plan: StepPlan, outputs: Seqs[RowOutput]) -> list[tuple[Sequence, int]]:
        """Apply a finished step; ``outputs`` holds one RowOutput per ``plan.sample_rows`` row, in order.

        Every row's computed count advances by its tokens minus its rejected drafts;
        a sampling row's output tokens join its sequence, and a sequence that ends on
        one (a stop id, its length, a stop string) is finished, its slot free, when this
        returns. Returns ``(sequence, token)`` pairs in order.
        """
        by_row = {id(row): out for row, out in zip(plan.sample_rows, outputs, strict=True)}
        now = time.perf_counter()
        appended: list[tuple[Sequence, int]] = []
        for row in plan.rows:
            seq = row.seq
            out = by_row.get(id(row))
            accepted = out.accepted if out is not None else 0
            seq.num_computed_tokens += row.num_new - (len(row.draft) - accepted)  # refused guesses roll back
            status = None
            if out is not None:
                if seq.first_token_time is None:
                    seq.first_token_time = now
                for token in out.tokens:
                    seq.token_ids.append(token)
                    appended.append((seq, token))
                    status = self._stop_status(seq, token)
                    if status is not None:
                        break
                if out.stop_string:
                    status = SequenceStatus.FINISHED_STOPPED
                # Confirmed drafts after the end were computed but are not the sequence's.
                seq.num_computed_tokens = min(seq.num_computed_tokens, seq.num_tokens)
            self.cache.commit(seq)  # after the appends: a cache indexing full blocks reads their tokens
            if status is not None:
                self.finish(seq, status)
        return appended

    def _stop_status(self, seq: Sequence, token: int) -> SequenceStatus | None:
        if token in seq.stop_ids:
            return SequenceStatus.FINISHED_STOPPED
        if seq.num_completion_tokens >= seq.config.max_new_tokens or seq.num_tokens >= self.max_seq:
            return SequenceStatus.FINISHED_LENGTH
        return None

    def finish(self, seq: Sequence, status: SequenceStatus, error: str | None = None) -> None:
        """End ``seq`` with a finished ``status``; frees its slot. Finishing twice is a no-op."""
        assert status.finished, f"{status.name} is not a finished status"
        if seq.finished:
            return
        if seq.status == SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.cache.free(seq)
        else:
            self.waiting.remove(seq)
        self._by_id.pop(seq.request_id, None)
        seq.status = status
        seq.error = error
        seq.finish_time = time.perf_counter()

    def reject(self, seq: Sequence, error: str) -> None:
        """End a sequence that never entered the queues (``add`` refused it)."""
        assert seq.status == SequenceStatus.WAITING and self._by_id.get(seq.request_id) is not seq
        seq.status = SequenceStatus.FINISHED_ERROR
        seq.error = error
        seq.finish_time = time.perf_counter()

    def cancel(self, request_id: int) -> Sequence | None:
        """Cancel a waiting or running request; None when it is not here (finished or unknown)."""
        seq = self._by_id.get(request_id)
        if seq is not None:
            self.finish(seq, SequenceStatus.FINISHED_CANCELLED)
        return seq

    def check_integrity(self) -> None:
        """Raise AssertionError when sequences, slots and the cache disagree."""
        # A lowered max_active caps admission only: more may run until they finish.
        assert len(self.running) <= self.cache.num_rows, "more running than the cache has rows"
        slots = [s.slot for s in self.running]
        assert len(set(slots)) == len(slots), f"two running sequences share a slot: {slots}"
        for seq in self.running:
            assert seq.status == SequenceStatus.RUNNING and seq.slot is not None, f"bad running {seq}"
            assert 0 <= seq.num_computed_tokens <= seq.num_tokens, f"computed count out of range: {seq}"
        for seq in self.waiting:
            assert seq.status == SequenceStatus.WAITING and seq.slot is None, f"bad waiting {seq}"
        live = {s.request_id for s in self.running} | {s.request_id for s in self.waiting}
        assert live == set(self._by_id), "the id index disagrees with the queues"
        self.cache.check_integrity({s.request_id: s.slot for s in self.running})  # type: ignore[misc]


_by_slot = attrgetter("slot")


def _row(seq: Sequence, num_new: int) -> ScheduledRow:
    assert seq.slot is not None
    start = seq.num_computed_tokens
    return ScheduledRow(
        seq=seq, slot=seq.slot, start=start, num_new=num_new, sample=start + num_new == seq.num_tokens
    )
