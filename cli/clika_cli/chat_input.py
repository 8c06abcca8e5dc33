"""What ``clika chat`` reads: line editing and history (GNU readline), messages of one or many lines.

A line ending in ``\\`` continues on the next; a ``\"\"\"`` line opens a block
that the next ``\"\"\"`` closes. In a terminal the arrow keys edit the line and
walk the history, which persists across runs in one file (the lines of every
chat, appended when a chat ends, so that two chats at once lose nothing).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

PROMPT, MORE = ">>> ", "... "
BLOCK = '"""'
HISTORY_LINES = 2000  # the history file is cut to this many lines


def read_message() -> str:
    """One message: a line, continued lines (``\\``), or a triple-quoted block; stripped."""
    line = input(PROMPT)
    stripped = line.strip()
    if stripped.startswith(BLOCK):
        return _read_block(stripped[len(BLOCK) :])
    lines = []
    while line.endswith("\\"):
        lines.append(line[:-1])
        line = input(MORE)
    lines.append(line)
    return "\n".join(lines).strip()


def _read_block(first: str) -> str:
    if first.endswith(BLOCK):  # """one line"""
        return first[: -len(BLOCK)].strip()
    lines = [first] if first else []
    while True:
        line = input(MORE)
        if line.rstrip().endswith(BLOCK):
            lines.append(line.rstrip()[: -len(BLOCK)])
            return "\n".join(lines).strip()
        lines.append(line)


@contextlib.contextmanager
def line_editing(history_file: Path) -> Iterator[str | None]:
    """Turn on readline for ``input()`` with ``history_file``'s lines to recall; yields a warning or None.

    Importing ``readline`` is what makes ``input()`` edit lines. A history file
    that cannot be read or written costs the history, never the chat.
    """
    try:
        import readline
    except ImportError:  # a Python built without readline: plain input
        yield "line editing is unavailable (this Python has no readline module)"
        return
    warning = _read_history(readline, history_file)
    readline.set_auto_history(True)
    before = readline.get_current_history_length()
    try:
        yield warning
    finally:
        _append_history(readline, history_file, readline.get_current_history_length() - before)


def _read_history(readline, history_file: Path) -> str | None:
    readline.clear_history()
    if not history_file.exists():
        return None
    try:
        readline.read_history_file(history_file)
    except (OSError, UnicodeDecodeError) as exc:
        return f"chat history {history_file} not read: {exc}"
    return None


def _append_history(readline, history_file: Path, added: int) -> None:
    if added <= 0:
        return
    try:
        history_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        history_file.touch(mode=0o600, exist_ok=True)
        readline.append_history_file(added, history_file)
        readline.set_history_length(HISTORY_LINES)
        readline.clear_history()
        readline.read_history_file(history_file)
        readline.write_history_file(history_file)  # cut to HISTORY_LINES
    except OSError as exc:  # the chat is over; its lines missing from the history is all that happens
        print(f"chat history not saved to {history_file}: {exc}", file=sys.stderr)
