"""Ctrl-C during a tool call stops the tool loop at once: a program driven through a pseudo-terminal.

``clika chat`` runs no tools; a reply waits on a tool in the tool loop
(``ChatSession.run``, ``asyncio.run(run_tool_loop(...))``). The program's one
tool parks (``CLIKA_PARK=tool-call``) and stays parked until the test lets it
go, so every Ctrl-C lands while the call runs. The loop must end with
KeyboardInterrupt at once, the call answered ``error: cancelled`` in the
history, and never wait for the tool's thread (it did: ``asyncio.run`` waited
for the default executor, so Ctrl-C took as long as the tool).
"""

from __future__ import annotations

import os
import sys

import pytest
from support.terminal_log import TerminalLog

ROUNDS = 50

PROGRAM = '''
import asyncio
import sys

from clika_runtime.chat.tools.loop import ModelTurn, run_tool_loop
from clika_runtime.chat.tools.toolkit import Toolkit, tool
from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.park_points import park


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    park("tool-call")
    print("[tool returned]", flush=True)
    return city


class OneCall:
    """The model's side: one turn calling lookup, then an answer."""

    def __init__(self):
        self.messages = []

    async def ask(self, prompt, tools):
        self.messages.append({"role": "user", "content": prompt})
        return ModelTurn("", (ToolCall("call_0", "lookup", {"city": "Oslo"}),))

    async def resume(self, tools):
        return ModelTurn("done")

    def add_tool_output(self, output):
        self.messages.append({"role": "tool", "content": output.content})

    def cancelled(self):
        return False


print("ready", flush=True)
for line in sys.stdin:
    conversation = OneCall()
    try:
        print(asyncio.run(run_tool_loop(conversation, line, Toolkit([lookup]))).status, flush=True)
    except KeyboardInterrupt:
        print(f"[stopped] {conversation.messages[-1]['content']}", flush=True)
'''


def test_every_ctrl_c_during_a_tool_call_ends_the_loop_at_once(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    fifo = tmp_path / "park"
    os.mkfifo(fifo)
    program = tmp_path / "tool_loop_program.py"
    program.write_text(PROGRAM)
    env = {**os.environ, "TERM": "dumb", "CLIKA_PARK": f"tool-call:{fifo}"}
    run = pexpect.spawn(sys.executable, [str(program)], env=env, encoding="utf-8", timeout=120)
    transcript: list[str] = []
    stopped = 0
    try:
        run.logfile_read = TerminalLog(transcript)
        run.expect_exact("ready")
        for _ in range(ROUNDS):
            run.sendline("weather in Oslo?")
            run.expect_exact("[parked at tool-call]")
            run.sendintr()
            run.expect_exact("[stopped] error: cancelled")  # while the tool is still parked
            stopped += 1
            _release(fifo)  # the tool's thread goes on to its end ...
            run.expect_exact("[tool returned]")  # ... before the next round parks
        run.sendeof()
        run.expect(pexpect.EOF)
    finally:
        run.close(force=True)
    assert stopped == ROUNDS and run.exitstatus == 0
    text = "".join(transcript)
    assert "Traceback" not in text and "completed" not in text


def _release(fifo) -> None:
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # the parked tool holds it open for reading
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)
