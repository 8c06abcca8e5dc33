"""Export progress on stderr: one numbered line per stage ("[3/6] quantizing ..."), a bar for the
stages that go step by step (layers, matrices: tqdm's bar gives the count, the total and the time left)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

from tqdm import tqdm


class Progress:
    """Reports stages and per-step progress; silent when disabled.

    ``stages``: how many stages the whole run has, so that each says how far
    along it is (None: stages are not numbered).
    """

    def __init__(self, enabled: bool = True, prefix: str = "clika-export", stages: int | None = None) -> None:
        self.enabled = enabled
        self.prefix = prefix
        self.stages = stages
        self.timings: dict[str, float] = {}
        self._began = 0

    def note(self, text: str) -> None:
        if self.enabled:
            tqdm.write(f"{self.prefix}: {text}", file=sys.stderr)

    def _numbered(self, name: str) -> str:
        self._began += 1
        return f"[{self._began}/{self.stages}] {name}" if self.stages else name

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage and report its start and its duration."""
        self.note(f"{self._numbered(name)} ...")
        start = time.perf_counter()
        yield
        self.timings[name] = time.perf_counter() - start
        self.note(f"{name} done in {self.timings[name]:.1f} s")

    @contextlib.contextmanager
    def steps(
        self, name: str, total: int, unit: str = "layer", *, numbered: bool = True
    ) -> Iterator[Callable[..., None]]:
        """A stage with a bar of ``total`` steps; the callback is called once per finished step
        (``total=`` on a call sets the total a stage learns under way). ``numbered=False``: a part
        of the stage before it, not a stage of its own."""
        self.note(f"{self._numbered(name) if numbered else name} ...")
        start = time.perf_counter()
        bar = tqdm(
            total=total, desc=f"{self.prefix}: {name}", unit=unit, file=sys.stderr, disable=not self.enabled
        )

        def step(*_done: object, total: int | None = None) -> None:
            if total is not None and total != bar.total:  # the stage learned its total under way
                bar.total = total
                bar.refresh()
            bar.update(1)

        try:
            yield step
        finally:
            bar.close()
        self.timings[name] = time.perf_counter() - start
        self.note(f"{name} done in {self.timings[name]:.1f} s")
