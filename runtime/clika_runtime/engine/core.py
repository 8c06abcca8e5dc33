"""The engine core: synchronous continuous batching; add requests, then call ``step()``.

One step, in nano-vllm's shape: ask the drafters (speculative decoding), let
the scheduler pick the step's rows, run them (one ORT call), sample every row
at once, read each row's new tokens as text (the streaming detokenizer, then
the stop-string matcher), let the scheduler apply them, deliver. Nothing here
owns a thread: ``clika_runtime.engine.engine.Engine`` drives ``step()`` on its
own, and tests and benchmarks may call it directly.

Each request's output goes to its ``ReplySink``. Deltas wait in an outbox
until ``deliver_pending``: the threaded driver calls it right before the ORT
call (which releases the GIL, so a woken reader runs while the model computes)
and before it goes idle; a synchronous caller calls it after ``step()``. A
request's end is handed over at once, after the deltas before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.errors import QueueFullError
from clika_runtime.engine.kv.kv_cache import KVCacheManager
from clika_runtime.engine.logprobs import TokenLogprob, log_softmax
from clika_runtime.engine.options import EngineOptions
from clika_runtime.engine.output import (
    Delta,
    LiveReply,
    Outbox,
    ReplySink,
    grammar_complete,
    picked_logprobs,
    report_of,
)
from clika_runtime.engine.prompt_media import PromptMedia
from clika_runtime.engine.request_checks import RequestLimits, checked_prompt
from clika_runtime.engine.sampler import Sampler
from clika_runtime.engine.scheduler import Scheduler
from clika_runtime.engine.sequence import Sequence as Seq
from clika_runtime.engine.sequence import SequenceStatus
from clika_runtime.engine.spec_decode.drafting import (
    PROMPT_LOOKUP,
    Drafter,
    PromptLookupDrafter,
    confirmed_drafts,
    draft_limit,
    propose_drafts,
    record_draft,
)
from clika_runtime.engine.stage_record import StageRecorder
from clika_runtime.engine.stages import StageObserver
from clika_runtime.engine.step_grammar import dead_ends, grammar_masks
from clika_runtime.engine.step_plan import RowOutput, ScheduledRow, StepPlan
from clika_runtime.forwarded import Forwarded
from clika_runtime.grammar.matcher import GrammarMatcher
from clika_runtime.grammar.vocabulary import grammar_vocabulary
from clika_runtime.text.detokenizer import StreamingDetokenizer
from clika_runtime.text.stops import StopMatcher
from clika_runtime.text.tokenizer import Tokenizer


class StepRunner(Protocol):
    """Runs a step: the logits of the plan's sampling positions (every position of a draft row);
    ``timing.model_s`` is the last run's time inside the model (``executor.Executor`` is the real one)."""

    timing: Any

    def run(self, plan: StepPlan, before_call: Callable[[], None] | None = None) -> np.ndarray: ...


class EngineCore:
    """Continuous batching over one model's step graph, one ``step()`` at a time (see the module docstring).

    ``drafters`` adds drafters by name to prompt lookup's (``"assistant"``: an assistant model's).
    """

    def __init__(
        self,
        executor: StepRunner,
        cache: KVCacheManager,
        tokenizer: Tokenizer | None,
        *,
        max_seq: int,
        vocab_size: int,
        eos_token_ids: Iterable[int] = (),
        options: EngineOptions | None = None,
        observer: StageObserver | None = None,
        drafters: Mapping[str, Drafter] | None = None,
    ) -> None:
        self.options = options or EngineOptions()
        self.executor = executor
        self.cache = cache
        self.tokenizer = tokenizer
        self.max_seq = max_seq
        self.vocab_size = vocab_size
        self.eos_token_ids = frozenset(eos_token_ids)
        self._recorder = StageRecorder(observer)
        self.drafters: dict[str, Drafter] = {PROMPT_LOOKUP: PromptLookupDrafter(), **(drafters or {})}
        self.scheduler = Scheduler(
            cache,
            max_seq=max_seq,
            max_active=self.options.max_active,
            max_queued=self.options.max_queued,
            max_step_tokens=self.options.max_step_tokens,
        )
        self.sampler = Sampler(vocab_size)
        self.stats = self._recorder.stats
        self._live: dict[int, LiveReply] = {}
        self._outbox = Outbox()

    # Called with every stage's timing (None: no one is watching); may be set at any time.
    observer = Forwarded[StageObserver | None]("_recorder", writable=True)
    has_work = Forwarded[bool]("scheduler")

    # -- requests ------------------------------------------------------------------------

    def check_request(
        self, prompt_ids: Sequence[int], config: GenerationConfig, media: PromptMedia | None = None
    ) -> tuple[int, ...]:
        """``prompt_ids`` as a tuple, or ValueError naming what this engine cannot run (any thread)."""
        limits = RequestLimits(
            self.max_seq, self.cache.token_capacity, self.vocab_size, frozenset(self.drafters)
        )
        return checked_prompt(prompt_ids, config, media, limits, self.executor)

    def decoder_for(
        self, prompt: Sequence[int], config: GenerationConfig, *, skip_special_tokens: bool, detokenize: bool
    ) -> StreamingDetokenizer | None:
        """The streaming detokenizer a request needs (None: ids only, no stop strings to match)."""
        if self.tokenizer is None or not (detokenize or config.stop):
            return None
        return self.tokenizer.streaming_decoder(skip_special_tokens=skip_special_tokens, prompt_ids=prompt)

    def grammar_for(self, config: GenerationConfig) -> GrammarMatcher | None:
        """The grammar state a request with ``config.response_format`` starts from (any thread)."""
        if config.response_format is None:
            return None
        if self.tokenizer is None:
            raise ValueError("response_format needs the model's tokenizer; this engine has none")
        return GrammarMatcher(config.response_format, grammar_vocabulary(self.tokenizer, self.vocab_size))

    def add(
        self,
        seq: Seq,
        sink: ReplySink,
        decoder: StreamingDetokenizer | None = None,
        grammar: GrammarMatcher | None = None,
    ) -> Seq:
        """Queue a new sequence (``Sequence(request)``); its output goes to ``sink``. A refused one ends
        at once with an error (an id already live, a full queue). Returns ``seq``."""
        assert seq.status is SequenceStatus.WAITING and seq.num_computed_tokens == 0, "not a new sequence"
        if grammar is None and seq.config.response_format is not None:
            grammar = self.grammar_for(seq.config)
        live = LiveReply(seq, sink, decoder, StopMatcher(seq.config.stop), grammar=grammar)
        rid = seq.request_id
        if rid in self._live:  # a caller-chosen id already in use: refuse it, touch nothing else
            self.scheduler.reject(seq, f"request id {rid} is already in the engine")
            self._outbox.put(sink, report_of(seq, None))
            return seq
        self._live[rid] = live
        try:
            self.scheduler.add(seq)
        except QueueFullError as exc:
            self.scheduler.reject(seq, str(exc))
            self._finalize(live)
        return seq

    def cancel(self, request_id: int) -> None:
        """End a waiting or running request as cancelled (unknown or ended ids are ignored)."""
        seq = self.scheduler.cancel(request_id)
        if seq is not None:
            self._finalize(self._live[request_id])

    def set_max_active(self, max_active: int) -> None:
        """Let ``max_active`` sequences decode together from the next step on."""
        self.cache.ensure_slots(max_active)
        self.scheduler.max_active = max_active

    # -- the step ------------------------------------------------------------------------

    def step(self) -> StepPlan | None:
        """Run one step: drafts, schedule, run, sample, read, update, deliver; None when nothing could run."""
        began = time.perf_counter()
        wanted = self.scheduler.draft_requests(lambda seq: draft_limit(seq, self.max_seq))
        drafts = self._allowed_drafts(propose_drafts(self.drafters, wanted))
        plan = self.scheduler.schedule(drafts)
        for seq in self.scheduler.take_ended():  # outgrew the KV budget
            self._finalize(self._live[seq.request_id])
        if plan is None:
            return None
        try:
            masks = grammar_masks(plan, self._live, self.vocab_size).start()  # computed while the model runs
            logits = self.executor.run(plan, before_call=self.deliver_pending)
            raw = self._raw_logprobs(plan, logits)  # before any mask: the model's own view
            dead = dead_ends(plan, masks.apply(logits), logits)
            picks = self._picks(plan, logits)
            outputs, texts = self._read(plan, picks, dead)
            _record_drafts(plan, outputs)
            self.scheduler.update(plan, outputs)
            self._end_dead_ends(dead)
        except Exception as exc:  # the step's own requests end with the error
            self._fail(plan, f"{type(exc).__name__}: {exc}")
            return plan
        for row, out, pieces in zip(plan.sample_rows, outputs, texts, strict=True):
            chances = picked_logprobs(raw.get(row.seq.request_id), out.tokens, row.seq.config.logprobs)
            self._deliver(self._live[row.seq.request_id], out.tokens, pieces, chances)
        self._recorder.step(plan, time.perf_counter() - began, self.executor.timing.model_s)
        return plan

    def deliver_pending(self) -> None:
        """Hand the waiting deltas and reports to their sinks."""
        self._outbox.deliver()

    def _sample(self, rows: Sequence[ScheduledRow], logits: np.ndarray) -> np.ndarray:
        return self.sampler.sample(
            logits,
            [r.seq.request_id for r in rows],
            [r.seq.config for r in rows],
            [r.seq.request.prompt_ids for r in rows],
        )

    def _picks(self, plan: StepPlan, logits: np.ndarray) -> list[list[int]]:
        """Per sample row: the greedy pick after each token of a draft row, else the sampled token."""
        if not plan.has_drafts:
            return [[token] for token in self._sample(plan.sample_rows, logits).tolist()]
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

    # -- structured output -------------------------------------------------------------

    def _raw_logprobs(self, plan: StepPlan, logits: np.ndarray) -> dict[int, np.ndarray]:
        """By request id: the log-probabilities of the position a plain sample row picks from,
        for the rows whose request asked for logprobs (such requests never draft)."""
        wanted: dict[int, np.ndarray] = {}
        at = 0
        for row in plan.sample_rows:
            if row.seq.config.logprobs is not None and not row.draft:
                wanted[row.seq.request_id] = log_softmax(logits[at])
            at += row.num_new if row.draft else 1
        return wanted

    def _allowed_drafts(self, drafts: dict[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
        """Drafts of constrained sequences cut to what their grammar allows; none for a request
        that reports logprobs (one distribution per step)."""
        for rid, draft in list(drafts.items()):
            if self._live[rid].seq.config.logprobs is not None:
                del drafts[rid]
                continue
            grammar = self._live[rid].grammar
            if grammar is not None:
                drafts[rid] = draft[: grammar.accepted_prefix(draft)]
        return drafts

    def _end_dead_ends(self, dead: set[int]) -> None:
        for rid in dead:
            message = "the reply's grammar allows no token of this model's vocabulary here"
            self.scheduler.finish(self._live[rid].seq, SequenceStatus.FINISHED_GRAMMAR, message)

    def _read(
        self,
        plan: StepPlan,
        picks: list[list[int]],
        dead: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> tuple[list[RowOutput], list[list[str]]]:
        """Each sample row's output tokens and their text pieces, cut where the reply ends.

        A draft row keeps its confirmed drafts and the model's pick after them; the
        scheduler's stop rule and a stop string met in the text end the run early, so
        the scheduler is handed only tokens the sequence keeps.
        """
        outputs: list[RowOutput] = []
        texts: list[list[str]] = []
        for row, picked in zip(plan.sample_rows, picks, strict=True):
            live = self._live[row.seq.request_id]
            if row.seq.request_id in dead:
                outputs.append(RowOutput(()))
                texts.append([])
                continue
            accepted = confirmed_drafts(row.draft, picked)
            tokens = [*row.draft[:accepted], picked[accepted]]
            tokens = tokens[: self.scheduler.tokens_taken(row.seq, tokens)]
            pieces: list[str] = []
            complete = False
            for token in tokens:
                pieces.append(live.text_of(token))
                complete = live.grammar is not None and grammar_complete(live.grammar, token)
                if live.stops.matched is not None or complete:
                    break
            hit = live.stops.matched is not None or complete  # a complete grammar ends the reply
            outputs.append(RowOutput(tuple(tokens[: len(pieces)]), accepted, hit))
            texts.append(pieces)
        return outputs, texts

    def _deliver(
        self,
        live: LiveReply,
        tokens: tuple[int, ...],
        pieces: list[str],
        chances: tuple[TokenLogprob, ...] = (),
    ) -> None:
        seq = live.seq
        if seq.num_completion_tokens == len(tokens):
            self._recorder.prefill(seq)
        for i, (token, piece) in enumerate(zip(tokens, pieces, strict=True)):
            if seq.finished and i == len(tokens) - 1:
                piece += live.flush()
            live.text.append(piece)
            live.logprobs.extend(chances[i : i + 1])
            self._outbox.put(live.sink, Delta((token,), piece, chances[i : i + 1]))
        if seq.finished:
            self._finalize(live)

    def _finalize(self, live: LiveReply) -> None:
        seq = live.seq
        tail = live.flush()  # a reply cancelled or failed mid-way still shows what it made
        if tail:
            live.text.append(tail)
            self._outbox.put(live.sink, Delta((), tail))
        report = report_of(seq, live.stops.matched, tuple(live.logprobs))
        self._recorder.end(live, report)
        self.sampler.release(seq.request_id)
        self._live.pop(seq.request_id, None)
        self._outbox.put(live.sink, report)
        # An end is handed over at once (with what waited before it): whoever counts running
        # requests by their ends (a server's admission) must not see one end late.
        self.deliver_pending()

    def _fail(self, plan: StepPlan, error: str) -> None:
        for row in plan.rows:
            live = self._live.get(row.seq.request_id)
            if live is not None and not row.seq.finished:
                self.scheduler.finish(row.seq, SequenceStatus.FINISHED_ERROR, error)
                self._finalize(live)

    def fail_all(self, error: str) -> None:
        """End every live request with ``error`` (a step failed outside its rows' own work)."""
        for live in list(self._live.values()):
            if not live.seq.finished:
                self.scheduler.finish(live.seq, SequenceStatus.FINISHED_ERROR, error)
            self._finalize(live)

    def cancel_all(self) -> None:
        """End every live request as cancelled and deliver (the engine is closing)."""
        for live in list(self._live.values()):
            self.scheduler.finish(live.seq, SequenceStatus.FINISHED_CANCELLED)
            self._finalize(live)
        self.deliver_pending()

    def close(self) -> None:
        """Release the drafters (an assistant model's engine)."""
        for drafter in self.drafters.values():
            drafter.close()

    def check_integrity(self) -> None:
        """Raise AssertionError when the core's requests, the scheduler and the cache disagree."""
        self.scheduler.check_integrity()
        live = {s.request_id for s in self.scheduler.running} | {s.request_id for s in self.scheduler.waiting}
        assert live == set(self._live), "the engine's live requests and the scheduler's disagree"
        assert self.sampler.num_states <= len(self.scheduler.running), "sampler state outlived its request"


def _record_drafts(plan: StepPlan, outputs: Sequence[RowOutput]) -> None:
    """Tally each draft row's guess and size its next one (before the update may end its sequence)."""
    for row, out in zip(plan.sample_rows, outputs, strict=True):
        if row.draft:
            record_draft(row.seq, len(row.draft), out.accepted)
