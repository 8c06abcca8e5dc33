"""The engine's output processing: a request's deltas, its report, and the text state between them.

The core reads each step's tokens through a ``LiveReply`` (the streaming
detokenizer, then the stop-string matcher; the grammar says when a structured
reply is complete) and queues what they add in an ``Outbox``, handed to the
requests' ``ReplySink``s at ``deliver``. ``report_of`` writes a finished
sequence's ``GenerationReport``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from clika_runtime.engine.logprobs import TokenLogprob, token_logprob
from clika_runtime.engine.report import GenerationReport
from clika_runtime.engine.sequence import Sequence as Seq
from clika_runtime.grammar.matcher import GrammarMatcher
from clika_runtime.text.detokenizer import StreamingDetokenizer
from clika_runtime.text.stops import StopMatcher


@dataclass(frozen=True)
class Delta:
    """What one step added to a reply: its token ids, the text that became visible and, when the
    request asked for them, the tokens' log-probabilities."""

    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


class ReplySink(Protocol):
    """Where a request's output goes: its deltas in order, then its report once."""

    def put(self, delta: Delta) -> None: ...

    def end(self, report: GenerationReport) -> None: ...


@dataclass
class LiveReply:
    """One running request's output state beyond its Sequence: its sink, its text so far and what
    turns its tokens into text (detokenizer, stop strings, grammar)."""

    seq: Seq
    sink: ReplySink
    detok: StreamingDetokenizer | None
    stops: StopMatcher
    detok_s: float = 0.0
    flushed: bool = False
    text: list[str] = field(default_factory=list)
    grammar: GrammarMatcher | None = None  # the reply's grammar state (structured output)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # when the request asked for them

    def text_of(self, token: int) -> str:
        """The text ``token`` makes visible (none for a stop id, or while a stop string may be forming)."""
        if self.detok is None or token in self.seq.stop_ids:
            return ""
        began = time.perf_counter()
        text = self.detok.push(token)
        piece = self.stops.push(text) if text else ""
        self.detok_s += time.perf_counter() - began
        return piece

    def flush(self) -> str:
        """The text held back at the end of a reply (an unfinished character, a partial stop)."""
        if self.flushed or self.detok is None or self.stops.matched is not None:
            return ""
        self.flushed = True
        began = time.perf_counter()
        tail = self.detok.flush()
        text = (self.stops.push(tail) if tail else "") + self.stops.flush()
        self.detok_s += time.perf_counter() - began
        return text


class Outbox:
    """Deltas and reports waiting for their sinks, in the order they were made."""

    def __init__(self) -> None:
        self._items: list[tuple[ReplySink, Delta | GenerationReport]] = []

    def put(self, sink: ReplySink, item: Delta | GenerationReport) -> None:
        self._items.append((sink, item))

    def deliver(self) -> None:
        """Hand every waiting item to its sink (a report ends its sink's reply)."""
        items, self._items = self._items, []
        for sink, item in items:
            if isinstance(item, Delta):
                sink.put(item)
            else:
                sink.end(item)


def picked_logprobs(
    logprobs: np.ndarray | None, tokens: tuple[int, ...], top: int | None
) -> tuple[TokenLogprob, ...]:
    """The first token's log-probability entry, when the request asked for ``top`` of them."""
    if logprobs is None or not tokens or top is None:
        return ()
    return (token_logprob(logprobs, tokens[0], top),)


def grammar_complete(grammar: GrammarMatcher, token: int) -> bool:
    """Advance ``grammar`` past ``token``: True once the grammar allows nothing more."""
    grammar.accept(token)
    return grammar.finished


def report_of(seq: Seq, stop_string: str | None, logprobs: tuple[TokenLogprob, ...] = ()) -> GenerationReport:
    """How ``seq`` ended: its finish reason, token counts and timings."""
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
        logprobs=logprobs,
    )
