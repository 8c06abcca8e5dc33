"""What prompts with images and prompts with audio share: the model folder, its tower opened once
on first use, the stage an observer sees, and the refusal of a prompt the window cannot hold.

``ImagePrompts`` and ``AudioPrompts`` differ in the tower they open and in how markers expand;
the rest of a media prompt's life is here, so both word their stage and their overflow alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from clika_runtime.engine.errors import CONTEXT_LENGTH_EXCEEDED, TurnError
from clika_runtime.engine.stages import StageEvent
from clika_runtime.text.tokenizer import Tokenizer

Tower = TypeVar("Tower")
Spec = TypeVar("Spec")


class MediaPrompts(Generic[Spec, Tower]):
    """Prompts with one kind of media for one model folder (its tower opened on first use).

    A subclass names its tower's ``open_tower(folder, threads=)`` and reads what it needs from the
    manifest entry and the tokenizer in ``_bind`` (raising ManifestError when they disagree).
    """

    open_tower: Callable[..., Tower]

    def __init__(
        self,
        folder: Path,
        spec: Spec,
        tokenizer: Tokenizer,
        *,
        threads: int | None = None,
        observer: Callable[[], Callable[[StageEvent], None] | None] = lambda: None,
    ) -> None:
        self.folder, self.spec, self.tokenizer = folder, spec, tokenizer
        self._threads = threads
        self._observer = observer
        self._tower: Tower | None = None
        self._lock = threading.Lock()
        self._bind()

    def _bind(self) -> None:
        raise NotImplementedError

    def tower(self) -> Tower:
        with self._lock:
            if self._tower is None:
                self._tower = type(self).open_tower(self.folder, threads=self._threads)
            return self._tower

    def _observe(
        self, stage: str, request_id: int | None, seconds: float, tokens: int, detail: dict[str, Any]
    ) -> None:
        observer = self._observer()
        if observer is not None:
            observer(StageEvent(stage, request_id, seconds, tokens, detail=detail))

    @staticmethod
    def _check_fits(ids: list[int], token_budget: int, argument: str, items: str, advice: str) -> None:
        """Refuse a prompt that takes more positions with its ``items`` than the window leaves."""
        if len(ids) >= token_budget + 1:
            raise TurnError(
                f"{argument}: the prompt takes {len(ids)} tokens with its {items}, more than the context "
                f"window leaves ({token_budget + 1}); {advice}",
                code=CONTEXT_LENGTH_EXCEEDED,
            )
