"""Export progress on stderr: one line per stage, a bar per layer (tqdm)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

from tqdm import tqdm


class Progress:
    """Reports stages and per-layer steps; silent when disabled."""

    def __init__(self, enabled: bool = True, prefix: str = "clika-export") -> None:
        self.enabled = enabled
        self.prefix = prefix
        self.timings: dict[str, float] = {}

    def note(self, text: str) -> None:
        if self.enabled:
            tqdm.write(f"{self.prefix}: {text}", file=sys.stderr)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage and report its start and its duration."""
        self.note(f"{name} ...")
        start = time.perf_counter()
        yield
        self.timings[name] = time.perf_counter() - start
        self.note(f"{name} done in {self.timings[name]:.1f} s")

    @contextlib.contextmanager
    def steps(self, name: str, total: int, unit: str = "layer") -> Iterator[Callable[[int], None]]:
        """A stage with a bar; the callback is told each finished step's index."""
        self.note(f"{name} ...")
        start = time.perf_counter()
        bar = tqdm(
            total=total, desc=f"{self.prefix}: {name}", unit=unit, file=sys.stderr, disable=not self.enabled
        )
        try:
            yield lambda _index: bar.update(1)
        finally:
            bar.close()
        self.timings[name] = time.perf_counter() - start
        self.note(f"{name} done in {self.timings[name]:.1f} s")
