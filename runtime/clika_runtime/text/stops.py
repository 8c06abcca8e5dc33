"""Find stop strings in streamed text, across piece boundaries, without ever showing them.

Text that could be the start of a stop string is held back until the next
piece proves it is not (then it is released) or completes the stop (then the
reply ends just before it).
"""

from __future__ import annotations

from collections.abc import Iterable


class StopMatcher:
    """Feed text pieces; get back the text safe to show and the stop string once one matched."""

    __slots__ = ("stops", "_held", "matched")

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched: str | None = None

    def push(self, piece: str) -> str:
        """The part of ``held + piece`` that can be shown; sets ``matched`` when a stop completes."""
        if self.matched is not None:
            return ""
        if not self.stops:
            return piece
        text = self._held + piece
        found = self._earliest(text)
        if found is not None:
            at, stop = found
            self._held = ""
            self.matched = stop
            return text[:at]
        hold = self._partial_suffix(text)
        self._held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        """Release the held-back text (the reply ended without completing a stop)."""
        held, self._held = self._held, ""
        return held if self.matched is None else ""

    def _earliest(self, text: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self.stops:
            at = text.find(stop)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, stop)
        return best

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest end of ``text`` that begins some stop string."""
        longest = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:size]):
                    longest = size
                    break
        return longest
