"""The engine's vocabulary in one import, for callers that want all of it.

Each concept has its own module: ``config`` (the decode policy),
``sequence`` (a request and its live state), ``step_plan`` (what one ORT call
does), ``report`` (how a reply ended), ``stages`` (what a stage observer
sees) and ``errors`` (the engine's refusals). The chat layer's outcome is
``clika_runtime.chat.outcome.ChatOutcome``.
"""

from clika_runtime.engine.config import (
    CONFIG_FIELDS,
    MAX_DRAFT_TOKENS,
    GenerationConfig,
    config_from_checkpoint,
)
from clika_runtime.engine.errors import EngineClosedError, QueueFullError
from clika_runtime.engine.report import GenerationReport
from clika_runtime.engine.sequence import Request, Sequence, SequenceStatus
from clika_runtime.engine.stages import StageEvent, StageObserver
from clika_runtime.engine.step_plan import ScheduledRow, StepPlan

__all__ = [
    "CONFIG_FIELDS",
    "MAX_DRAFT_TOKENS",
    "EngineClosedError",
    "GenerationConfig",
    "GenerationReport",
    "QueueFullError",
    "Request",
    "ScheduledRow",
    "Sequence",
    "SequenceStatus",
    "StageEvent",
    "StageObserver",
    "StepPlan",
    "config_from_checkpoint",
]
