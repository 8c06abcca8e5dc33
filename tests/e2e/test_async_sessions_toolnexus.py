"""The toolnexus example against ``clika serve`` on 127.0.0.1 (real SmolLM2, a real server process).

A toolnexus Conversation keeps its transcript and sends all of it each turn;
``ask(..., id=...)`` keeps a conversation in clika's SQLiteStore, so a second
run of the example (another process) continues it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo_paths import EXAMPLES

pytest.importorskip("toolnexus")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.slow

EXAMPLE = EXAMPLES / "toolnexus_conversation.py"
CLIKA = [sys.executable, "-m", "clika_cli.main"]


@pytest.fixture(scope="module")
def server_url(smollm2_fp32, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            [*CLIKA, "serve", str(smollm2_fp32), "--port", "0", "--model-id", "smollm2", "--threads", "1"],
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        yield _wait_for_url(server, log)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _wait_for_url(server: subprocess.Popen, log: Path, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"serving \S+ at (http://127\.0\.0\.1:\d+/v1)", log.read_text())
        if found:
            return found.group(1)
        assert server.poll() is None, f"clika serve stopped: {log.read_text()}"
        time.sleep(0.1)
    raise AssertionError(f"clika serve did not start within {timeout} s: {log.read_text()}")


def run_example(url: str, store: Path) -> dict:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", url, "--model", "smollm2", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_toolnexus_conversations_against_clika_serve(server_url, tmp_path):
    store = tmp_path / "toolnexus.db"
    first = run_example(server_url, store)
    users = first["in_memory"]["users"]
    assert users == ["My name is Ada and my favourite number is 7.", "What is my name?"]
    one, two = first["in_memory"]["prompt_tokens"]
    assert two > one + 10  # turn 2 sent turn 1 (question and reply) along
    assert first["durable_messages"] == 2
    second = run_example(server_url, store)  # another process, the same SQLite file
    assert second["durable_messages"] == 4

    from clika_runtime.sessions import SQLiteStore

    with SQLiteStore(store) as opened:
        saved = opened.get_now("ada")
    assert [m["role"] for m in saved] == ["user", "assistant", "user", "assistant"]
    assert saved[0]["content"] == saved[2]["content"] == "Remember: the meeting is on Tuesday."
