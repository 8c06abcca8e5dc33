"""What a stage observer receives: one ``StageEvent`` per pipeline stage of a request."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StageEvent:
    """One pipeline stage of one request, as a stage observer sees it.

    ``stage`` is "tokenize", "prefill" (admission to first token), "decode"
    (first token to the end), "detokenize" (``text`` holds the final text) or
    "vision" (a request's images through the vision graph; ``detail["images"]`` counts them),
    "audio" (a request's clips through the audio graph; ``detail["clips"]`` counts them)
    or "step" (one engine step, ``request_id`` None; ``detail`` splits its time
    into ``model_s`` inside ONNX Runtime and ``host_s`` in Python).
    """

    stage: str
    request_id: int | None
    seconds: float
    tokens: int = 0
    text: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


StageObserver = Callable[[StageEvent], None]
