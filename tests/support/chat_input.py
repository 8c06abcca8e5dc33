"""Typing into ``clika chat`` from a test: ``input()`` fed line by line, the REPL run to the end."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest


def typed(monkeypatch: pytest.MonkeyPatch, *lines: str) -> list[str]:
    """Make ``input()`` return ``lines`` one by one; returns the prompts it was shown."""
    shown: list[str] = []
    feed = iter(lines)

    def fake_input(prompt: str = "") -> str:
        shown.append(prompt)
        line = next(feed, None)
        if line is None:
            raise EOFError  # Ctrl-D
        return line

    monkeypatch.setattr(builtins, "input", fake_input)
    return shown


def repl_errors(monkeypatch: pytest.MonkeyPatch, capsys, folder: Path, tmp_path: Path, *lines: str) -> str:
    """What ``clika chat`` on ``folder`` writes to stderr for ``lines`` typed in (no sampling overrides)."""
    from clika_cli.chat_repl import ChatRepl
    from clika_cli.conversations import Conversations
    from clika_runtime import modelverse

    model = modelverse.load(folder, threads=1)
    repl = ChatRepl(
        model, system=None, budget=2, overrides={}, conversations=Conversations(tmp_path / "c.db")
    )
    typed(monkeypatch, *lines)
    try:
        repl.run()
    finally:
        repl.close()
        model.close()
    return capsys.readouterr().err
