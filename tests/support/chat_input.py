"""Typing into ``clika chat`` from a test: ``input()`` fed line by line, the REPL run to the end."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@contextlib.contextmanager
def chat_repl(folder: Path, tmp_path: Path, *, budget: int, overrides: dict) -> Iterator[tuple[Any, Any]]:
    """(model, ``clika chat``'s REPL) on ``folder``, saving chats under ``tmp_path``; both closed on leaving."""
    from clika_cli.chat_repl import ChatRepl
    from clika_cli.conversations import Conversations
    from clika_runtime import modelverse

    model = modelverse.load(folder, threads=1)
    repl = ChatRepl(
        model, system=None, budget=budget, overrides=overrides, conversations=Conversations(tmp_path / "c.db")
    )
    try:
        yield model, repl
    finally:
        repl.close()
        model.close()


def repl_errors(monkeypatch: pytest.MonkeyPatch, capsys, folder: Path, tmp_path: Path, *lines: str) -> str:
    """What ``clika chat`` on ``folder`` writes to stderr for ``lines`` typed in (no sampling overrides)."""
    typed(monkeypatch, *lines)
    with chat_repl(folder, tmp_path, budget=2, overrides={}) as (_, repl):
        repl.run()
    return capsys.readouterr().err
