"""The reasoning channel: ``<think>...</think>`` split from the visible reply, and its switch.

A reply may open with ``<think>``; or the chat template opens the block itself
(the prompt ends inside ``<think>``), so the reply starts inside it. Either
way :class:`ReasoningStream` routes text to the ``"reasoning"`` channel until
``</think>``, then to ``"content"``. A ``<think>`` later in the reply is plain
text: models open the block only at the start.

:class:`ReasoningProfile` says how a model's channel behaves (``mode``, read
from its chat template at load) and turns a request's ``enable_thinking`` /
``reasoning_effort`` into the template variables that switch it, refusing
what the model cannot do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

THINK_START = "<think>"
THINK_END = "</think>"
REASONING = "reasoning"
CONTENT = "content"

# "never": no channel; "always": no off switch (the template opens the block);
# "toggleable": on unless switched off; "opt_in": off unless switched on;
# "adaptive": the model decides for itself whether to open the block.
REASONING_MODES = ("never", "always", "toggleable", "opt_in", "adaptive")
DEFAULT_EFFORT_LEVELS = ("low", "medium", "high")
# Levels a template without a reasoning_effort variable still understands as on or off.
_SWITCH_EFFORT_LEVELS = ("none", "minimal", "low", "medium", "high")
_OFF_LEVEL = "none"


def prompt_opens_reasoning(prompt: str, start: str = THINK_START, end: str = THINK_END) -> bool:
    """True when the prompt ends inside an opened reasoning block (the reply starts in it)."""
    opened = prompt.rfind(start)
    return opened >= 0 and prompt.rfind(end) < opened and not prompt[opened + len(start) :].strip()


class ReasoningStream:
    """Splits a reply's text pieces into ``(channel, text)`` pieces, streaming-safe.

    Whitespace framing the block (after ``<think>``, before and after
    ``</think>``) is dropped; everything else arrives as the model wrote it.
    """

    def __init__(self, start_in_reasoning: bool = False) -> None:
        self._state = REASONING if start_in_reasoning else "start"
        self._buffer = ""
        self._strip_leading = start_in_reasoning
        self._finished = False

    @property
    def in_reasoning(self) -> bool:
        """True while the reply is inside the reasoning block."""
        return self._state == REASONING

    def feed(self, piece: str) -> list[tuple[str, str]]:
        """Add reply text; return the ``(channel, text)`` pieces now decided."""
        if self._finished:
            raise ValueError("this reasoning stream is finished; start a new one for the next reply")
        self._buffer += piece
        return self._process(final=False)

    def finish(self) -> list[tuple[str, str]]:
        """The reply ended: release what is held (an unclosed block stays reasoning)."""
        if self._finished:
            return []
        self._finished = True
        return self._process(final=True)

    def _process(self, final: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        while self._step(out, final):
            pass
        return out

    def _step(self, out: list[tuple[str, str]], final: bool) -> bool:
        if self._strip_leading:
            self._buffer = self._buffer.lstrip()
            if not self._buffer:
                return False
            self._strip_leading = False
        if self._state == "start":
            return self._at_start(final)
        if self._state == REASONING:
            return self._in_reasoning(out, final)
        self._send(out, CONTENT, self._buffer)
        self._buffer = ""
        return False

    def _at_start(self, final: bool) -> bool:
        head = self._buffer.lstrip()
        if head.startswith(THINK_START):
            self._buffer = head[len(THINK_START) :]
            self._state = REASONING
            self._strip_leading = True
            return True
        if THINK_START.startswith(head) and not final:
            return False  # blank, or the marker still arriving
        self._state = CONTENT
        return True

    def _in_reasoning(self, out: list[tuple[str, str]], final: bool) -> bool:
        close = self._buffer.find(THINK_END)
        if close >= 0:
            self._send(out, REASONING, self._buffer[:close].rstrip())
            self._buffer = self._buffer[close + len(THINK_END) :]
            self._state = CONTENT
            self._strip_leading = True
            return True
        if final:
            self._send(out, REASONING, self._buffer.rstrip())
            self._buffer = ""
            return False
        held = _marker_prefix_start(self._buffer, THINK_END)
        text = self._buffer[:held].rstrip()
        self._send(out, REASONING, text)
        self._buffer = self._buffer[len(text) :]
        return False

    @staticmethod
    def _send(out: list[tuple[str, str]], channel: str, text: str) -> None:
        if text:
            out.append((channel, text))


def _marker_prefix_start(text: str, marker: str) -> int:
    """Where a tail of ``text`` that may begin ``marker`` starts (len(text) when none)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return len(text) - size
    return len(text)


def split_reasoning(text: str, start_in_reasoning: bool = False) -> tuple[str, str]:
    """A whole reply as ``(reasoning, content)`` (the streaming splitter fed once)."""
    stream = ReasoningStream(start_in_reasoning)
    pieces = stream.feed(text) + stream.finish()
    reasoning = "".join(piece for channel, piece in pieces if channel == REASONING)
    content = "".join(piece for channel, piece in pieces if channel == CONTENT)
    return reasoning, content


def effort_levels_in(template_source: str) -> tuple[str, ...]:
    """The reasoning_effort levels a template compares against, plus the standard three."""
    quoted = r"""["']([A-Za-z_]+)["']"""
    found = re.findall(rf"reasoning_effort\s*(?:==|!=)\s*{quoted}", template_source)
    found += re.findall(rf"{quoted}\s*(?:==|!=)\s*reasoning_effort", template_source)
    return tuple(dict.fromkeys([*DEFAULT_EFFORT_LEVELS, *found]))


@dataclass(frozen=True)
class ReasoningProfile:
    """How a model's reasoning channel behaves and which template variables switch it."""

    mode: str = "never"
    switch_variables: tuple[str, ...] = ()  # e.g. ("enable_thinking",)
    effort_levels: tuple[str, ...] = ()  # non-empty when the template reads reasoning_effort

    def __post_init__(self) -> None:
        if self.mode not in REASONING_MODES:
            raise ValueError(f"unknown reasoning mode {self.mode!r}; known modes: {REASONING_MODES}")

    @property
    def supports_thinking(self) -> bool:
        return self.mode != "never"

    def template_variables(
        self, enable_thinking: bool | None = None, reasoning_effort: str | None = None
    ) -> dict[str, Any]:
        """The template variables for a request's switch; ValueError for what the model cannot do."""
        if enable_thinking is not None and not isinstance(enable_thinking, bool):
            raise ValueError(f"enable_thinking must be True, False or None, got {enable_thinking!r}")
        wanted = self._wanted_state(enable_thinking, reasoning_effort)
        if wanted is True and self.mode == "never":
            raise ValueError("this model has no reasoning channel; it cannot switch thinking on")
        if wanted is False and self.mode in ("always", "adaptive"):
            raise ValueError(
                f"this model's reasoning channel has no off switch (reasoning_mode {self.mode!r}); "
                "enable_thinking=False / reasoning_effort='none' cannot be honoured"
            )
        variables: dict[str, Any] = {}
        if wanted is not None and self.mode in ("toggleable", "opt_in"):
            variables.update(dict.fromkeys(self.switch_variables, wanted))
        if reasoning_effort is not None and self.effort_levels and reasoning_effort != _OFF_LEVEL:
            variables["reasoning_effort"] = reasoning_effort
        return variables

    def _wanted_state(self, enable_thinking: bool | None, reasoning_effort: str | None) -> bool | None:
        if reasoning_effort is None:
            return enable_thinking
        known = self._known_levels()
        if reasoning_effort not in known:
            raise ValueError(f"unknown reasoning_effort {reasoning_effort!r}; this model knows {list(known)}")
        by_effort = reasoning_effort != _OFF_LEVEL
        if enable_thinking is not None and enable_thinking != by_effort:
            raise ValueError(
                f"enable_thinking={enable_thinking} contradicts reasoning_effort={reasoning_effort!r}"
            )
        return by_effort

    def _known_levels(self) -> tuple[str, ...]:
        if self.effort_levels:
            return (*self.effort_levels, _OFF_LEVEL)
        if self.mode == "never":
            return (_OFF_LEVEL,)
        return _SWITCH_EFFORT_LEVELS
