"""The engine: a step loop on its own thread; submit, stream and cancel from any thread.

Each loop turn takes the requests and cancellations other threads posted, asks
the scheduler for a step, runs it (one ORT call), samples every row at once,
lets the scheduler append the tokens and end what finished, then turns each
new token into text: the streaming detokenizer, then the stop-string matcher
(a matched stop ends the sequence at once). Each request's pieces go to its
``RequestStream``, a queue the caller drains on its own thread, so a slow
reader never stalls the model.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clika_runtime.engine.assistant import AssistantDrafter
from clika_runtime.engine.executor import Executor
from clika_runtime.engine.kv_cache import KVCacheManager
from clika_runtime.engine.sampler import Sampler
from clika_runtime.engine.scheduler import Scheduler
from clika_runtime.engine.types import (
    EngineClosedError,
    GenerationConfig,
    GenerationReport,
    QueueFullError,
    Request,
    ScheduledRow,
    SequenceStatus,
    StageEvent,
    StageObserver,
    StepPlan,
)
from clika_runtime.engine.types import Sequence as Seq
from clika_runtime.text.detokenizer import StreamingDetokenizer
from clika_runtime.text.stops import StopMatcher
from clika_runtime.text.tokenizer import Tokenizer


@dataclass(frozen=True)
class EngineOptions:
    """Engine limits: ``max_active`` sequences decode together, ``max_queued`` wait beyond them,
    a step computes at most ``max_step_tokens`` tokens (a longer prompt runs in chunks).
    ``kv_cache_bytes`` caps a paged KV cache (None: the runtime's default budget) and what a
    continuous cache's running sequences may reserve (None: no cap)."""

    max_active: int = 8
    max_queued: int = 256
    max_step_tokens: int = 256
    prefix_reuse: bool = True
    kv_cache_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_active", "max_step_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.max_queued, bool) or not isinstance(self.max_queued, int) or self.max_queued < 0:
            raise ValueError(f"max_queued must be an integer >= 0, got {self.max_queued!r}")
        budget = self.kv_cache_bytes
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise ValueError(f"kv_cache_bytes must be an integer >= 1 or None, got {budget!r}")


@dataclass(frozen=True)
class Delta:
    """What one step added to a reply: its token ids and the text that became visible."""

    token_ids: tuple[int, ...]
    text: str


@dataclass
class EngineStats:
    """Totals over the engine's life: steps, tokens computed, time in ORT and in Python."""

    steps: int = 0
    tokens: int = 0
    model_s: float = 0.0
    host_s: float = 0.0

    @property
    def host_fraction(self) -> float:
        """Python's share of the step time (packing, sampling, bookkeeping, detokenizing)."""
        total = self.model_s + self.host_s
        return self.host_s / total if total else 0.0


_DONE = object()


class RequestStream:
    """One submitted request: iterate it for ``Delta``s; ``report`` is set once it ended.

    Closing it (or ``cancel``) before the end cancels the request: its decode
    stops at the next step and its slot is freed.
    """

    def __init__(self, engine: Engine, request_id: int) -> None:
        self.request_id = request_id
        self._engine = engine
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._done = threading.Event()
        self._drained = False
        self._report: GenerationReport | None = None
        self._text: list[str] = []

    # -- engine side ---------------------------------------------------------------

    def _put(self, delta: Delta) -> None:
        self._engine._outbox.append((self, delta))

    def _end(self, report: GenerationReport) -> None:
        self._report = report
        self._engine._outbox.append((self, _DONE))

    def _hand_over(self, item: Any) -> None:
        if item is _DONE:
            self._done.set()
        self._queue.put(item)

    # -- caller side ---------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    @property
    def report(self) -> GenerationReport | None:
        """How the request ended (None while it runs)."""
        return self._report if self._done.is_set() else None

    def __iter__(self) -> Iterator[Delta]:
        try:
            while not self._drained:
                item = self._queue.get()
                if item is _DONE:
                    self._drained = True
                    return
                self._text.append(item.text)
                yield item
        finally:
            if not self._drained:
                self.cancel()

    def texts(self) -> Iterator[str]:
        """The reply's text pieces (empty pieces skipped)."""
        for delta in self:
            if delta.text:
                yield delta.text

    def token_batches(self) -> Iterator[list[int]]:
        """The reply's token ids, one list per batch of deltas available when asked."""
        deltas = iter(self)
        try:
            for delta in deltas:
                ids = list(delta.token_ids)
                while not self._queue.empty():
                    following = next(deltas, None)
                    if following is None:
                        break
                    ids.extend(following.token_ids)
                if ids:
                    yield ids
        finally:
            deltas.close()  # type: ignore[attr-defined]

    def result(self) -> str:
        """Wait for the end; the whole visible text."""
        for _ in self:
            pass
        return "".join(self._text)

    def cancel(self) -> None:
        """Stop the request at the next step (no-op once it ended)."""
        if not self._done.is_set():
            self._engine.cancel(self.request_id)

    def close(self) -> None:
        self.cancel()

    def __enter__(self) -> RequestStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Live:
    """Engine-thread state of one request beyond its Sequence."""

    seq: Seq
    stream: RequestStream
    detok: StreamingDetokenizer | None
    stops: StopMatcher
    detok_s: float = 0.0
    flushed: bool = False
    text: list[str] = field(default_factory=list)


class Engine:
    """Continuous batching over one model's step graph, on the engine's own thread."""

    def __init__(
        self,
        executor: Executor,
        cache: KVCacheManager,
        tokenizer: Tokenizer,
        *,
        max_seq: int,
        vocab_size: int,
        eos_token_ids: Iterable[int] = (),
        options: EngineOptions | None = None,
        observer: StageObserver | None = None,
        name: str = "clika-engine",
        assistant: AssistantDrafter | None = None,
    ) -> None:
        self.options = options or EngineOptions()
        self.executor = executor
        self.cache = cache
        self.tokenizer = tokenizer
        self.max_seq = max_seq
        self.vocab_size = vocab_size
        self.eos_token_ids = frozenset(eos_token_ids)
        self.observer = observer
        self.scheduler = Scheduler(
            cache,
            max_seq=max_seq,
            max_active=self.options.max_active,
            max_queued=self.options.max_queued,
            max_step_tokens=self.options.max_step_tokens,
            assistant=assistant,
        )
        self.sampler = Sampler(vocab_size)
        self.stats = EngineStats()
        self._live: dict[int, _Live] = {}
        # Deltas wait here until the engine is about to release the GIL (the next ORT call, or
        # going idle): a reader woken then runs while the model computes instead of stalling it.
        self._outbox: list[tuple[RequestStream, Any]] = []
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._posted = 0  # submissions in the inbox, not yet queued by the scheduler
        self._waiting = 0  # the scheduler's queue length, as last seen
        self._free_slots = self.options.max_active  # slots a request could take now, as last seen
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # -- any thread ------------------------------------------------------------------

    def new_request_id(self) -> int:
        return next(self._ids)

    def submit(
        self,
        prompt_ids: Sequence[int],
        config: GenerationConfig,
        *,
        request_id: int | None = None,
        skip_special_tokens: bool = True,
        detokenize: bool = True,
    ) -> RequestStream:
        """Queue a request; its stream yields the reply. Bad input raises ValueError, a full queue QueueFullError."""
        prompt = self._checked_prompt(prompt_ids, config)
        rid = self.new_request_id() if request_id is None else request_id
        seq = Seq(Request(rid, prompt, config, self.eos_token_ids))
        stream = RequestStream(self, rid)
        detok = None
        if detokenize or config.stop:
            detok = self.tokenizer.streaming_decoder(
                skip_special_tokens=skip_special_tokens, prompt_ids=prompt
            )
        live = _Live(seq, stream, detok, StopMatcher(config.stop))
        with self._lock:
            if self._closed:
                raise EngineClosedError("the engine is closed; it takes no more requests")
            if self._posted + self._waiting >= self.options.max_queued + self._free_slots:
                raise QueueFullError(
                    f"the request queue is full ({self.options.max_queued} waiting); retry once some finish"
                )
            self._posted += 1
            self._inbox.put(("add", live))
        return stream

    def _checked_prompt(self, prompt_ids: Sequence[int], config: GenerationConfig) -> tuple[int, ...]:
        prompt = tuple(int(t) for t in prompt_ids)
        if not prompt:
            raise ValueError("the prompt is empty: there is nothing to continue")
        if len(prompt) >= self.max_seq:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens; the context window is {self.max_seq} tokens "
                f"and the reply needs room for at least one more"
            )
        if len(prompt) >= self.cache.token_capacity:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens; the KV cache holds at most "
                f"{self.cache.token_capacity} tokens of one request and the reply needs room for one more"
            )
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})")
        bad = [t for t in config.stop_token_ids if t >= self.vocab_size]
        if bad:
            raise ValueError(
                f"stop_token_ids holds {bad[0]}, outside the vocabulary (0..{self.vocab_size - 1})"
            )
        if config.num_assistant_tokens and self.scheduler.assistant is None:
            raise ValueError(
                "num_assistant_tokens needs an assistant model: attach one with set_assistant() "
                "or load(..., assistant_model=)"
            )
        return prompt

    def cancel(self, request_id: int) -> None:
        """Cancel a request (waiting or running) at the next step; unknown or ended ids are ignored."""
        self._inbox.put(("cancel", request_id))

    def set_max_active(self, max_active: int) -> None:
        """Let ``max_active`` sequences decode together from the next step on (the cache grows its
        slots when needed; a lower cap lets running sequences finish and admits fewer)."""
        if isinstance(max_active, bool) or not isinstance(max_active, int) or max_active < 1:
            raise ValueError(f"max_active must be an integer >= 1, got {max_active!r}")
        self._inbox.put(("active", max_active))

    def check_integrity(self, timeout: float | None = 60.0) -> None:
        """Check the engine's bookkeeping on its own thread (between steps); AssertionError when it drifted."""
        done: Future[None] = Future()
        self._inbox.put(("check", done))
        done.result(timeout)

    def close(self) -> None:
        """Cancel everything and stop the engine's thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._inbox.put(("stop", None))
        if threading.current_thread() is not self._thread:
            self._thread.join()
        if self.scheduler.assistant is not None:
            self.scheduler.assistant.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_active(self) -> int:
        return self.scheduler.max_active

    # -- the engine thread -------------------------------------------------------------

    def _loop(self) -> None:
        while self._drain(block=not self.scheduler.has_work):
            if not self.scheduler.has_work:
                continue
            try:
                if not self._step() and not self._drain(block=True):
                    break  # nothing could be scheduled, then the engine was closed while waiting
            except Exception as exc:  # a failed step ends its requests, not the engine
                self._fail_all(f"{type(exc).__name__}: {exc}")
        for live in list(self._live.values()):
            self.scheduler.finish(live.seq, SequenceStatus.FINISHED_CANCELLED)
            self._finalize(live)
        self._hand_over()

    def _hand_over(self) -> None:
        """Give the waiting deltas to their streams' readers."""
        outbox, self._outbox = self._outbox, []
        for stream, item in outbox:
            stream._hand_over(item)

    def _drain(self, *, block: bool) -> bool:
        """Apply posted commands; False once the engine must stop."""
        if block:
            self._hand_over()
            item = self._inbox.get()
        elif self._inbox.empty():  # the usual case between steps: no exception raised and caught
            return True
        else:
            item = self._inbox.get_nowait()  # this thread alone takes from the inbox: never empty here
        while True:
            kind, value = item
            if kind == "stop":
                return False
            if kind == "add":
                self._add(value)
            elif kind == "cancel":
                self._cancel(value)
            elif kind == "active":
                self._set_active(value)
            elif kind == "check":
                self._check(value)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                self._note_waiting()
                return True

    def _add(self, live: _Live) -> None:
        with self._lock:
            self._posted -= 1
            self._waiting += 1
        rid = live.seq.request_id
        if rid in self._live:  # a caller-chosen id already in use: refuse it, touch nothing else
            self.scheduler.reject(live.seq, f"request id {rid} is already in the engine")
            live.stream._end(_report(live.seq, None))
            return
        self._live[rid] = live
        try:
            self.scheduler.add(live.seq)
        except QueueFullError as exc:
            self.scheduler.reject(live.seq, str(exc))
            self._finalize(live)

    def _cancel(self, request_id: int) -> None:
        seq = self.scheduler.cancel(request_id)
        if seq is not None:
            self._finalize(self._live[request_id])

    def _check(self, done: Future[None]) -> None:
        try:
            self.scheduler.check_integrity()
            live = {s.request_id for s in self.scheduler.running} | {
                s.request_id for s in self.scheduler.waiting
            }
            assert live == set(self._live), "the engine's live requests and the scheduler's disagree"
            assert self.sampler.num_states <= len(self.scheduler.running), (
                "sampler state outlived its request"
            )
        except AssertionError as exc:
            done.set_exception(exc)
        else:
            done.set_result(None)

    def _set_active(self, max_active: int) -> None:
        self.cache.ensure_slots(max_active)
        self.scheduler.max_active = max_active

    def _step(self) -> bool:
        start = time.perf_counter()
        plan = self.scheduler.schedule()
        for seq in self.scheduler.take_ended():  # outgrew the KV budget
            self._finalize(self._live[seq.request_id])
        self._note_waiting()
        if plan is None:
            return False
        try:
            logits = self.executor.run(plan, before_call=self._hand_over)
            if plan.has_drafts:
                appended = self.scheduler.update_drafted(plan, self._picks(plan, logits))
            else:
                appended = self.scheduler.update(plan, self._sample(plan.sample_rows, logits).tolist())
        except Exception as exc:  # the step's own requests end with the error
            self._fail(plan, f"{type(exc).__name__}: {exc}")
            return True
        if plan.has_drafts:
            self._deliver_runs(appended)
        else:
            for seq, token in appended:
                self._deliver(self._live[seq.request_id], token)
        self._note_waiting()
        self._account(plan, time.perf_counter() - start)
        return True

    def _sample(self, rows: tuple[ScheduledRow, ...] | list[ScheduledRow], logits: np.ndarray) -> np.ndarray:
        return self.sampler.sample(
            logits,
            [r.seq.request_id for r in rows],
            [r.seq.config for r in rows],
            [r.seq.request.prompt_ids for r in rows],
        )

    def _picks(self, plan: StepPlan, logits: np.ndarray) -> list[list[int]]:
        """Per sample row: the greedy pick after each token of a draft row, else the sampled token."""
        starts, at = [], 0
        for row in plan.sample_rows:
            starts.append(at)
            at += row.num_new if row.draft else 1
        picks: list[list[int]] = [[] for _ in starts]
        plain = [i for i, row in enumerate(plan.sample_rows) if not row.draft]
        if plain:
            sampled = self._sample([plan.sample_rows[i] for i in plain], logits[[starts[i] for i in plain]])
            for i, token in zip(plain, sampled.tolist(), strict=True):
                picks[i] = [token]
        for i, row in enumerate(plan.sample_rows):
            if row.draft:
                picks[i] = np.argmax(logits[starts[i] : starts[i] + row.num_new], axis=1).tolist()
        return picks

    def _deliver_runs(self, appended: list[tuple[Seq, int]]) -> None:
        """Deliver a step that gave some sequences several tokens, in order.

        A stop string met mid-run ends the reply there: the run's later tokens
        are dropped from the sequence before its report is made.
        """
        left = collections.Counter(seq.request_id for seq, _ in appended)
        for seq, token in appended:
            left[seq.request_id] -= 1
            live = self._live.get(seq.request_id)
            if live is not None:  # None: a stop string ended it earlier in this run
                self._deliver(live, token, unread=left[seq.request_id])

    def _deliver(self, live: _Live, token: int, unread: int = 0) -> None:
        seq = live.seq
        piece = ""
        if live.detok is not None and token not in seq.stop_ids:
            began = time.perf_counter()
            text = live.detok.push(token)
            piece = live.stops.push(text) if text else ""
            live.detok_s += time.perf_counter() - began
            if live.stops.matched is not None:
                self.scheduler.stop_at_string(seq, unread)
                unread = 0
        if seq.num_completion_tokens == 1:
            self._observe_prefill(seq)
        ended = seq.finished and not unread  # else more tokens of this step's run follow
        if ended:
            piece += self._flush(live)
        live.text.append(piece)
        live.stream._put(Delta((token,), piece))
        if ended:
            self._finalize(live)

    def _flush(self, live: _Live) -> str:
        """The text held back at the end of a reply (an unfinished character, a partial stop)."""
        if live.flushed or live.detok is None or live.stops.matched is not None:
            return ""
        live.flushed = True
        began = time.perf_counter()
        tail = live.detok.flush()
        text = (live.stops.push(tail) if tail else "") + live.stops.flush()
        live.detok_s += time.perf_counter() - began
        return text

    def _finalize(self, live: _Live) -> None:
        seq = live.seq
        tail = self._flush(live)  # a reply cancelled or failed mid-way still shows what it made
        if tail:
            live.text.append(tail)
            live.stream._put(Delta((), tail))
        report = _report(seq, live.stops.matched)
        self._observe_end(live, report)
        self.sampler.release(seq.request_id)
        self._live.pop(seq.request_id, None)
        live.stream._end(report)

    def _fail(self, plan: StepPlan, error: str) -> None:
        for row in plan.rows:
            live = self._live.get(row.seq.request_id)
            if live is not None and not row.seq.finished:
                self.scheduler.finish(row.seq, SequenceStatus.FINISHED_ERROR, error)
                self._finalize(live)

    def _fail_all(self, error: str) -> None:
        for live in list(self._live.values()):
            if not live.seq.finished:
                self.scheduler.finish(live.seq, SequenceStatus.FINISHED_ERROR, error)
            self._finalize(live)
        self._note_waiting()

    def _note_waiting(self) -> None:
        """Publish the queue length and free slots that ``submit`` checks a new request against."""
        with self._lock:
            self._waiting = len(self.scheduler.waiting)
            self._free_slots = max(self.scheduler.max_active - len(self.scheduler.running), 0)

    # -- observation -------------------------------------------------------------------

    def _emit(self, event: StageEvent) -> None:
        observer = self.observer
        if observer is not None:
            observer(event)

    def _account(self, plan: StepPlan, seconds: float) -> None:
        timing = self.executor.timing
        host = max(seconds - timing.model_s, 0.0)
        self.stats.steps += 1
        self.stats.tokens += plan.num_tokens
        self.stats.model_s += timing.model_s
        self.stats.host_s += host
        if self.observer is not None:
            detail = {"rows": len(plan.rows), "model_s": timing.model_s, "host_s": host}
            self._emit(StageEvent("step", None, seconds, plan.num_tokens, detail=detail))

    def _observe_prefill(self, seq: Seq) -> None:
        if self.observer is not None and seq.first_scheduled_time is not None and seq.first_token_time:
            computed = seq.num_prompt_tokens - seq.num_cached_tokens
            seconds = seq.first_token_time - seq.first_scheduled_time
            self._emit(StageEvent("prefill", seq.request_id, seconds, computed))

    def _observe_end(self, live: _Live, report: GenerationReport) -> None:
        if self.observer is None:
            return
        seq = live.seq
        if seq.first_token_time is not None and seq.finish_time is not None:
            decode_s = seq.finish_time - seq.first_token_time
            self._emit(StageEvent("decode", seq.request_id, decode_s, report.completion_tokens))
        text = "".join(live.text)
        self._emit(
            StageEvent("detokenize", seq.request_id, live.detok_s, report.completion_tokens, text=text)
        )


def _report(seq: Seq, stop_string: str | None) -> GenerationReport:
    arrival = seq.request.arrival_time
    finish = seq.finish_time or time.perf_counter()
    first = seq.first_token_time
    completion = seq.num_completion_tokens
    rate = None
    if first is not None and completion > 1 and finish > first:
        rate = (completion - 1) / (finish - first)
    return GenerationReport(
        finish_reason=seq.status.finish_reason or "error",
        prompt_tokens=seq.num_prompt_tokens,
        completion_tokens=completion,
        cached_tokens=seq.num_cached_tokens,
        time_to_first_token_s=None if first is None else first - arrival,
        decode_tokens_per_s=rate,
        total_s=finish - arrival,
        queue_s=(seq.first_scheduled_time or finish) - arrival,
        stop_string=stop_string,
        error=seq.error,
        draft_tokens=seq.num_draft_tokens,
        accepted_draft_tokens=seq.num_accepted_draft_tokens,
    )
