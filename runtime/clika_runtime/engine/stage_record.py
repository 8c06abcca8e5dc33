"""What the engine core counts of its steps and tells its stage observer.

``EngineStats`` totals the steps, the tokens computed and the time spent in
ONNX Runtime and in Python; a ``StageRecorder`` adds each step to them and,
when an observer is set, hands it one ``StageEvent`` per stage: each step, a
request's prefill, its decode and its detokenizing.
"""

from __future__ import annotations

from dataclasses import dataclass

from clika_runtime.engine.output import LiveReply
from clika_runtime.engine.report import GenerationReport
from clika_runtime.engine.sequence import Sequence as Seq
from clika_runtime.engine.stages import StageEvent, StageObserver
from clika_runtime.engine.step_plan import StepPlan


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


class StageRecorder:
    """The core's stats and its observer (read at every event: it may be set or cleared any time)."""

    def __init__(self, observer: StageObserver | None) -> None:
        self.observer = observer
        self.stats = EngineStats()

    def _emit(self, event: StageEvent) -> None:
        observer = self.observer
        if observer is not None:
            observer(event)

    def step(self, plan: StepPlan, seconds: float, model_s: float) -> None:
        """A step ran in ``seconds``, ``model_s`` of them inside the model."""
        host = max(seconds - model_s, 0.0)
        self.stats.steps += 1
        self.stats.tokens += plan.num_tokens
        self.stats.model_s += model_s
        self.stats.host_s += host
        if self.observer is not None:
            detail = {"rows": len(plan.rows), "model_s": model_s, "host_s": host}
            self._emit(StageEvent("step", None, seconds, plan.num_tokens, detail=detail))

    def prefill(self, seq: Seq) -> None:
        """``seq`` has its first token: its prompt's computed part took from scheduling to now."""
        if self.observer is not None and seq.first_scheduled_time is not None and seq.first_token_time:
            computed = seq.num_prompt_tokens - seq.num_cached_tokens
            seconds = seq.first_token_time - seq.first_scheduled_time
            self._emit(StageEvent("prefill", seq.request_id, seconds, computed))

    def end(self, live: LiveReply, report: GenerationReport) -> None:
        """A reply ended: its decode time and its detokenizing time, with the text it made."""
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
