"""``clika chat`` driven as a person would, through a pseudo-terminal (pexpect), on SmolLM2-135M-Instruct.

Two turns that share the conversation, ``/reset`` forgetting it, Ctrl-C
stopping a reply while the chat goes on, then Ctrl-C twice at the prompt
leaving. Input parsing (continued lines, blocks) is checked without a model.
"""

from __future__ import annotations

import builtins
import os
import re
import sys

import pytest

from clika_cli.chat_command import ChatRepl, read_message
from clika_runtime import modelverse

PROMPT = ">>> "
STATS = re.compile(r"(\d+) tokens, [\d.]+ tokens/s")


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


def test_a_line_ending_in_a_backslash_continues(monkeypatch):
    shown = typed(monkeypatch, "first \\", "second\\", "third")
    assert read_message() == "first \nsecond\nthird" and shown == [">>> ", "... ", "... "]


def test_a_triple_quoted_block_spans_lines(monkeypatch):
    shown = typed(monkeypatch, '"""', "line one", "", "  line three", '"""')
    assert read_message() == "line one\n\n  line three" and shown == [">>> ", "... ", "... ", "... ", "... "]
    typed(monkeypatch, '"""opened here', 'closed here"""')
    assert read_message() == "opened here\nclosed here"
    typed(monkeypatch, '"""all on one line"""')
    assert read_message() == "all on one line"


def test_commands_change_the_session_and_eof_leaves(monkeypatch, capsys, tiny_llama_model):
    model = modelverse.load(tiny_llama_model, threads=1)
    repl = ChatRepl(model, system=None, budget=4, overrides={"temperature": 0.0})
    typed(monkeypatch, "hello", "/system Be brief.", "/system", "again", "/nope", "/help", "/reset")
    try:
        repl.run()  # returns at the end of input (EOF)
        history = repl.session.messages
    finally:
        repl.close()
        model.close()
    err = capsys.readouterr().err
    assert "system prompt: 'Be brief.'" in err and "unknown command /nope" in err and "/reset" in err
    assert len(re.findall(r"^4 tokens, ", err, flags=re.M)) == 2  # a statistics line after each reply
    assert history == [{"role": "system", "content": "Be brief."}]  # /system began anew, /reset kept it


@pytest.mark.slow
def test_a_person_chats_resets_interrupts_and_leaves(smollm2_gguf):
    pexpect = pytest.importorskip("pexpect")
    command = [
        "-m",
        "clika_cli.main",
        "chat",
        "smollm2-135m-instruct",
        # The float export decodes exactly as the reference does, so what the model
        # recalls does not move with the int4 scheme.
        "--precision",
        "fp32",
        "--temperature",
        "0",
        "--max-tokens",
        "200",
    ]
    chat = pexpect.spawn(
        sys.executable, command, env={**os.environ, "TERM": "dumb"}, encoding="utf-8", timeout=900
    )
    try:
        chat.expect_exact(PROMPT)  # the first run pulls the model: fetch, verify, export
        chat.timeout = 120

        def turn(text: str) -> tuple[str, int]:
            chat.sendline(text)
            chat.expect_exact(text)  # the terminal's echo of the typed line
            chat.expect(STATS)
            reply, tokens = chat.before, int(chat.match.group(1))
            chat.expect_exact(PROMPT)
            return reply, tokens

        turn("My name is Ada. Please remember it.")
        assert "Ada" in turn("What is my name?")[0]  # the second turn sees the first

        chat.sendline("/reset")
        chat.expect_exact("conversation cleared")
        chat.expect_exact(PROMPT)
        assert "Ada" not in turn("What is my name?")[0]

        chat.sendline("Write a very long story about a dragon and a knight.")
        chat.expect_exact("knight.")
        chat.expect(r"\w+ \w+ \w+")  # the reply has begun
        chat.sendintr()
        chat.expect_exact("[stopped]")
        chat.expect(STATS)
        assert int(chat.match.group(1)) < 200  # stopped early, not at its budget
        chat.expect_exact(PROMPT)

        assert "Paris" in turn("What is the capital of France?")[0]  # the chat goes on

        chat.sendintr()
        chat.expect_exact("again")
        chat.sendintr()
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert chat.exitstatus == 0
