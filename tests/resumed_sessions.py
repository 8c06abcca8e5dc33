"""Conversations saved to a real SQLite file by one loaded model and resumed by a freshly loaded one
(a new engine, as in a new process): the set-up the session tests with images and with audio share.
``media`` is what ``send`` takes for the first turn (``{"images": [...]}``, ``{"audio": [...]}``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clika_runtime import modelverse
from clika_runtime.sessions import AsyncChat, SQLiteStore

# Six greedy tokens past the end of text: replies long enough to compare, the same on every run.
GREEDY = {"max_new_tokens": 6, "temperature": 0.0, "ignore_eos": True}


@contextmanager
def loaded(folder: Path) -> Iterator[modelverse.GenerativeModel]:
    """The model in ``folder`` on one thread, closed afterwards."""
    model = modelverse.load(folder, threads=1)
    try:
        yield model
    finally:
        model.close()


def first_process(
    folder: Path,
    path: Path,
    session_id: str,
    turns: tuple[str, str],
    media: dict[str, Any],
    options: dict[str, Any],
    *,
    with_kv: bool,
    count: Callable[[SQLiteStore], int],
) -> tuple[str, int]:
    """Send ``turns[0]`` with ``media``, save the session (with its KV or without), and the unbroken
    session's reply to ``turns[1]`` (a fork, saved under its own id), with ``count(store)``."""
    question, follow_up = turns

    async def run():
        with loaded(folder) as model, SQLiteStore(path) as store:
            chat = AsyncChat(model, store=store)
            session = chat.create_session(session_id=session_id)
            await session.send(question, **media, **options)
            await session.save(with_kv=with_kv)
            unbroken = await session.fork().send(follow_up, **options)
            return unbroken.result, count(store)

    return asyncio.run(run())


def second_process(
    folder: Path,
    path: Path,
    session_id: str,
    follow_up: str,
    options: dict[str, Any],
    *,
    with_kv: bool,
    then: str | None = None,
) -> tuple[list[dict[str, Any]], Any, Any, list[int]]:
    """Reopen the conversation from the store in a fresh model and send ``follow_up`` (then ask
    ``then`` of it, reopened from the store, when given): the history it opened with, the
    follow-up's result, ``then``'s (None without it) and the tokens the history renders to."""

    async def run():
        with loaded(folder) as model, SQLiteStore(path) as store:
            chat = AsyncChat(model, store=store)
            session = await chat.open(session_id, with_kv=with_kv)
            history = session.messages
            result = await session.send(follow_up, **options)
            again = None if then is None else await chat.ask(then, id=session_id, **options)
            return history, result, again, model.chat_session(messages=history).transcript_tokens()

    return asyncio.run(run())
