"""Ctrl-C always stops a reply: ``clika chat`` and ``clika generate`` driven through a pseudo-terminal.

Each test parks the command at one place a reply waits (``CLIKA_PARK``: the
engine's first step, a later step, the template render in its helper process),
sends Ctrl-C once the command says it is parked, and the command goes on only
after its handler took the interrupt. So the interrupt lands exactly there,
whatever the machine's load, 50 times in a row.
"""

from __future__ import annotations

import os
import re
import sys

import pytest
from support.terminal_log import TerminalLog

PROMPT = ">>> "
ROUNDS = 50
BUDGET = 100
ENDED = re.compile(r"(\d+) tokens")
# The most tokens a reply stopped at each place may have: the engine parked after its first
# step (1) or its third (3) ends at its next one; a Ctrl-C during the render cancels the turn
# as it is submitted, before its first step or at it.
MOST_TOKENS = {"first-token": 1, "between-tokens": 3, "render": 1}


def _spawn(pexpect, args: list[str], *, point: str, tmp_path, timeout: float = 120):
    fifo = tmp_path / "park"
    if not fifo.exists():
        os.mkfifo(fifo)
    env = {
        **os.environ,
        "TERM": "dumb",
        "CLIKA_CACHE": str(tmp_path / "cache"),
        "CLIKA_CHAT_HOME": str(tmp_path / "chat"),
        "CLIKA_PARK": f"{point}:{fifo}",
    }
    return pexpect.spawn(
        sys.executable, ["-m", "clika_cli.main", *args], env=env, encoding="utf-8", timeout=timeout
    )


@pytest.mark.parametrize("point", ["first-token", "between-tokens", "render"])
def test_every_ctrl_c_during_a_reply_stops_it(tiny_llama_model, tmp_path, point):
    pexpect = pytest.importorskip("pexpect")
    options = ["chat", str(tiny_llama_model), "--temperature", "0", "--threads", "1"]
    chat = _spawn(pexpect, [*options, "--max-tokens", str(BUDGET)], point=point, tmp_path=tmp_path)
    transcript: list[str] = []
    try:
        chat.logfile_read = TerminalLog(transcript)
        chat.expect_exact(PROMPT)
        chat.sendline("/set ignore_eos on")  # a reply never ends by itself before the interrupt
        chat.expect_exact("(ignore_eos = on)")
        chat.expect_exact(PROMPT)
        stopped = []
        for _ in range(ROUNDS):
            chat.sendline("hello")
            chat.expect_exact(f"[parked at {point}]")
            chat.sendintr()
            chat.expect_exact("[stopped]")
            chat.expect(ENDED)
            stopped.append(int(chat.match.group(1)))
            chat.expect_exact(PROMPT)
            chat.sendline("/reset")  # the tiny model's context holds a few turns only
            chat.expect_exact("conversation cleared")
            chat.expect_exact(PROMPT)
        chat.sendintr()
        chat.expect_exact("again")
        chat.sendintr()  # a second Ctrl-C at the prompt leaves
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert chat.exitstatus == 0
    assert len(stopped) == ROUNDS and max(stopped) <= MOST_TOKENS[point]  # each stopped at its next step
    text = "".join(transcript)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text


@pytest.mark.parametrize("point", ["first-token", "between-tokens"])
def test_ctrl_c_stops_clika_generate(tiny_llama_model, tmp_path, point):
    pexpect = pytest.importorskip("pexpect")
    args = ["generate", str(tiny_llama_model), "hello", "--max-tokens", "100", "--threads", "1"]
    transcript: list[str] = []
    run = _spawn(pexpect, args, point=point, tmp_path=tmp_path)
    try:
        run.logfile_read = TerminalLog(transcript)
        run.expect_exact(f"[parked at {point}]")
        run.sendintr()
        run.expect(pexpect.EOF)
    finally:
        run.close(force=True)
    assert run.exitstatus == 130
    assert "Traceback" not in "".join(transcript)


STREAMS = 8


def test_ctrl_c_ends_every_open_stream_of_clika_serve_with_an_error_event(tiny_llama_model, tmp_path):
    """Eight replies streaming (the engine held between two steps, so none can end by itself), then
    SIGINT: each stream's last event is the shutdown error and the command exits 0."""
    import subprocess
    import threading

    import httpx

    fifo = tmp_path / "park"
    os.mkfifo(fifo)
    command = [sys.executable, "-m", "clika_cli.main", "serve", str(tiny_llama_model), "--port", "0"]
    command += ["--model-id", "m", "--threads", "1", "--max-active", str(STREAMS)]
    env = {**os.environ, "CLIKA_CACHE": str(tmp_path / "cache"), "CLIKA_PARK": f"between-tokens:{fifo}"}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    bodies: list[list[str]] = [[] for _ in range(STREAMS)]
    started = threading.Semaphore(0)

    def stream(into: list[str]) -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        body |= {"max_tokens": 100, "ignore_eos": True}
        with httpx.stream("POST", url + "/chat/completions", json=body, timeout=120) as response:
            started.release()  # the response has begun: its stream is open
            into.extend(response.iter_lines())

    try:
        url = _address(process)
        clients = [threading.Thread(target=stream, args=(into,)) for into in bodies]
        for client in clients:
            client.start()
        for _ in clients:
            assert started.acquire(timeout=120)
        _wait_for_line(process, "[parked at between-tokens]")
        process.send_signal(2)  # Ctrl-C
        for client in clients:
            client.join(timeout=120)  # a bound for the wait (a loaded machine), not a speed
        assert not any(client.is_alive() for client in clients), "a stream stayed open"
        assert process.wait(timeout=120) == 0
    finally:
        process.kill()
        process.wait()
    for lines in bodies:
        events = [line for line in lines if line.startswith("data: ")]
        assert len(events) >= 2, lines  # at least the error event and the end
        assert events[-1] == "data: [DONE]", lines[-3:]
        assert '"code": "server_shutting_down"' in events[-2], lines[-3:]  # the error event, last
    assert "Traceback" not in process.stderr.read()


def _address(process) -> str:
    line = _wait_for_line(process, " at http://")
    return line.split(" at ")[1].split()[0]


def _wait_for_line(process, text: str) -> str:
    while True:
        line = process.stderr.readline()
        if text in line:
            return line
        assert line or process.poll() is None, f"clika serve ended (exit {process.poll()})"
