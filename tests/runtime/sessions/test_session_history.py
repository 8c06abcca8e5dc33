"""A session's history edited by hand: ChatSession and AsyncSession take a new ``messages``
and run on from it, as seed 000's ``respond()`` on "a history edited by hand" says."""

from __future__ import annotations

import asyncio

import pytest

from clika_runtime.chat.session import ChatSession
from clika_runtime.sessions import AsyncChat

GREEDY = {"temperature": 0.0, "max_new_tokens": 8}
EDITED = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "my name is Ada"},
    {"role": "assistant", "content": "hello Ada"},
    {"role": "user", "content": "what is my name?"},
]


def test_a_chat_session_runs_on_from_an_assigned_history(tiny_model):
    with ChatSession(tiny_model, default_budget=8) as chat:
        chat.send("something else entirely", **GREEDY)
        chat.messages = EDITED
        EDITED[0]["content"] = "changed after assignment"  # the session kept its own copy
        reply = chat.respond(**GREEDY)
        history = chat.messages
    EDITED[0]["content"] = "You are terse."
    assert history[:4] == EDITED and history[4] == {"role": "assistant", "content": reply}
    assert reply == tiny_model.generate(messages=EDITED, **GREEDY)


def test_an_async_session_runs_on_from_an_edited_history(tiny_model):
    async def main():
        chat = AsyncChat(tiny_model)
        session = chat.create_session()
        await session.send("first", **GREEDY)
        edited = session.messages
        edited[0]["content"] = "FIRST, edited"
        session.messages = edited
        result = await session.respond(**GREEDY)
        chat.close()
        return edited, result

    edited, result = asyncio.run(main())
    assert [m["content"] for m in result.messages[:2]] == ["FIRST, edited", edited[1]["content"]]
    assert result.result == tiny_model.generate(messages=edited, **GREEDY)


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("hello", "messages must be a list of message dicts, got str"),
        ([{"role": "robot", "content": "x"}], r"messages\[0\] has role 'robot'"),
        ([{"role": "user", "content": "x"}, 7], r"messages\[1\] must be a dict, got int"),
        ([{"role": "user", "content": 5}], r"messages\[0\]: content must be a string or a list of parts"),
    ],
)
def test_a_bad_history_is_refused_when_assigned_and_the_old_one_kept(tiny_model, bad, problem):
    with ChatSession(tiny_model, system="kept") as chat:
        with pytest.raises(ValueError, match=problem):
            chat.messages = bad
        assert chat.messages == [{"role": "system", "content": "kept"}]
