"""``clika chat`` driven as a person would, through a pseudo-terminal (pexpect), on SmolLM2-135M-Instruct.

Two turns that share the conversation, ``/reset`` forgetting it, Ctrl-C
stopping a reply while the chat goes on, then Ctrl-C twice at the prompt
leaving. Input parsing (continued lines, blocks) is checked without a model.
"""

from __future__ import annotations

import os
import re
import sys

import pytest
from support.chat_input import typed

from clika_cli.chat_input import read_message
from clika_cli.chat_repl import ChatRepl
from clika_cli.conversations import Conversations
from clika_runtime import modelverse

PROMPT = ">>> "
STATS = re.compile(r"(\d+) tokens, [\d.]+ tokens/s")


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


def test_commands_change_the_session_and_eof_leaves(monkeypatch, capsys, tiny_llama_model, tmp_path):
    model = modelverse.load(tiny_llama_model, threads=1)
    repl = ChatRepl(
        model,
        system=None,
        budget=4,
        overrides={"temperature": 0.0},
        conversations=Conversations(tmp_path / "c.db"),
    )
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


def test_set_show_save_clear_and_load(monkeypatch, capsys, tiny_llama_model, tmp_path):
    model = modelverse.load(tiny_llama_model, threads=1)
    conversations = Conversations(tmp_path / "c.db")
    repl = ChatRepl(model, system=None, budget=4, overrides={"temperature": 0.0}, conversations=conversations)
    typed(
        monkeypatch,
        "hello",
        "/set max_tokens 3",
        "/set top_p 2",
        "/set top_k many",
        "/set warmth 1",
        "/set ignore_eos maybe",
        "/set ignore_eos on",
        "/set system Be brief.",
        "/set temperature 0",
        "/show",
        "/save first",
        "again",  # saved too: the chat is bound to "first" now
        "/clear",
        "/load",
        "/load nothing-saved-here",
        "/load first",
    )
    try:
        repl.run()
        history = repl.session.messages
    finally:
        repl.close()
        model.close()
    err = capsys.readouterr().err
    assert "Error: /set top_p:" in err and "Error: /set top_k: 'many' is not an integer" in err
    assert "Error: /set: unknown setting 'warmth'" in err
    assert "Error: /set ignore_eos: 'maybe' is not on or off" in err and '"ignore_eos": true' in err
    assert "max_tokens:     3" in err and "system prompt:  'Be brief.'" in err and '"temperature": 0.0' in err
    assert "resume with: clika chat --resume first" in err
    assert "saved conversations: first" in err and "no saved conversation 'nothing-saved-here'" in err
    assert re.findall(r"^(\d+) tokens, ", err, flags=re.M) == ["4", "3"]  # /set max_tokens took effect
    saved = Conversations(tmp_path / "c.db").load("first")
    shown_used = int(re.search(r"^context:        (\d+) of 128 tokens used$", err, flags=re.M).group(1))
    assert shown_used == len(model.tokenizer.encode(model.render(saved[:3])))  # the conversation at /show
    assert [m["role"] for m in saved] == ["system", "user", "assistant", "user", "assistant"]
    assert saved[0]["content"] == "Be brief." and saved[3]["content"] == "again"
    assert history == saved  # /clear forgot it, /load brought it back


def test_a_store_file_that_is_no_database_is_an_error_not_a_crash(tmp_path):
    from clika_cli.conversations import ConversationError

    garbage = tmp_path / "conversations.db"
    garbage.write_bytes(b"this is not a database" * 100)
    conversations = Conversations(garbage)
    for attempt in (lambda: conversations.save("x", []), lambda: conversations.load("x"), conversations.ids):
        with pytest.raises(ConversationError, match="cannot open the saved conversations"):
            attempt()
    assert garbage.read_bytes() == b"this is not a database" * 100  # left as it was


UP, LEFT = "\x1b[A", "\x1b[D"  # what a terminal sends for the arrow keys


def spawn_chat(pexpect, *args: str, cache) -> object:
    env = {**os.environ, "TERM": "dumb", "CLIKA_CACHE": str(cache)}
    chat = pexpect.spawn(
        sys.executable, ["-m", "clika_cli.main", "chat", *args], env=env, encoding="utf-8", timeout=120
    )
    chat.expect_exact(PROMPT)
    return chat


def test_a_person_edits_recalls_saves_and_resumes(tiny_llama_model, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    options = (str(tiny_llama_model), "--temperature", "0", "--max-tokens", "3", "--threads", "1")
    chat = spawn_chat(pexpect, *options, cache=tmp_path)
    try:

        def command(line: str, answer: str) -> None:
            chat.sendline(line)
            chat.expect_exact(answer)
            chat.expect_exact(PROMPT)

        chat.send("helo" + LEFT + LEFT + "l\r")  # "helo", two steps left, an "l" typed in: "hello"
        chat.expect(STATS)
        chat.expect_exact(PROMPT)
        command("/set system Be brief.", "system prompt set")
        command("/set max_tokens 2", "max_tokens = 2")
        command("/show", "system prompt:  'Be brief.'")
        command("/save tiny-chat", "resume with: clika chat --resume tiny-chat")
        command("/clear", "conversation cleared")
        command("/load tiny-chat", "loaded 'tiny-chat': 2 turns")
        command("/help", "/load [ID]")
        chat.sendline("/exit")
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert chat.exitstatus == 0

    chat = spawn_chat(pexpect, *options, "--resume", "tiny-chat", cache=tmp_path)
    try:
        # The history of the first run, newest first: /exit, /help, ... , /set system, hello.
        chat.send(UP * 9 + "\r")
        chat.expect(STATS)
        chat.expect_exact(PROMPT)
        chat.sendline("/exit")
        chat.expect_exact("resume with: clika chat --resume tiny-chat")
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert chat.exitstatus == 0
    assert (tmp_path / "chat").stat().st_mode & 0o777 == 0o700  # what was typed stays private
    assert (tmp_path / "chat" / "history").stat().st_mode & 0o077 == 0
    saved = Conversations(tmp_path / "chat" / "conversations.db").load("tiny-chat")
    assert [(m["role"], m["content"]) for m in saved if m["role"] != "assistant"] == [
        ("system", "Be brief."),
        ("user", "hello"),  # the line as edited
        ("user", "hello"),  # recalled from the first run's history, saved after its reply
    ]


@pytest.mark.slow
def test_a_person_chats_saves_resets_interrupts_leaves_and_resumes(smollm2_gguf, tmp_path, monkeypatch):
    # Saved chats and the line history go to a fresh folder; the models stay in the shared cache.
    monkeypatch.setenv("CLIKA_CHAT_HOME", str(tmp_path))
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
        chat.sendline("/save ada-test")
        chat.expect_exact("resume with: clika chat --resume ada-test")
        chat.expect_exact(PROMPT)

        chat.sendline("/reset")
        chat.expect_exact("conversation cleared")
        chat.expect_exact(PROMPT)
        assert "Ada" not in turn("What is my name?")[0]

        # The reply cannot end before the Ctrl-C lands: the end of sequence is ignored and the
        # budget is the whole context, however long this test process is held up. And the Ctrl-C
        # is never lost, whichever thread the kernel hands it to (clika_cli.interrupts): it used
        # to land on the engine's thread now and then, and the reply ran on to its budget.
        chat.sendline("/set ignore_eos on")
        chat.expect_exact("(ignore_eos = on)")
        chat.expect_exact(PROMPT)
        chat.sendline("/set max_tokens 4000")
        chat.expect_exact("(max_tokens = 4000)")
        chat.expect_exact(PROMPT)
        chat.sendline("Write a very long story about a dragon and a knight.")
        chat.expect_exact("knight.")
        chat.expect(r"\w+ \w+ \w+")  # the reply has begun
        chat.sendintr()
        chat.expect_exact("[stopped]")
        chat.expect(STATS)
        assert int(chat.match.group(1)) < 4000  # stopped early, not at its budget
        chat.expect_exact(PROMPT)
        chat.sendline("/set max_tokens 200")
        chat.expect_exact("(max_tokens = 200)")
        chat.expect_exact(PROMPT)
        chat.sendline("/set ignore_eos off")
        chat.expect_exact("(ignore_eos = off)")
        chat.expect_exact(PROMPT)

        # The chat goes on. What it answers is not asserted: the stopped reply stays in the
        # history, and how far it got depends on when the interrupt landed.
        reply, tokens = turn("What is the capital of France?")
        assert reply.strip() and tokens > 0

        chat.sendintr()
        chat.expect_exact("again")
        chat.sendintr()
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert chat.exitstatus == 0

    chat = pexpect.spawn(
        sys.executable,
        [*command, "--resume", "ada-test"],
        env={**os.environ, "TERM": "dumb"},
        encoding="utf-8",
        timeout=120,
    )
    try:
        chat.expect_exact("resumed 'ada-test' (4 turns)")
        chat.expect(r"its saved KV holds [0-9,]+ tokens: they are not read again")  # kept at exit
        chat.expect_exact(PROMPT)
        assert "Ada" in turn("What is my name?")[0]  # a new process, the saved conversation
        chat.sendline("/exit")
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert chat.exitstatus == 0
