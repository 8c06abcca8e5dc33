"""The examples the README's adapter sections point at run as scripts on real models (slow):
Foundry Local's Session and its input queue on SmolLM2, the tool loop on Qwen2.5-Coder-0.5B.
(The Chucky examples run in ``test_compat_chucky_examples.py``.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import EXAMPLES

pytestmark = pytest.mark.slow


def run_example(name: str, model_folder: Path) -> list[str]:
    env = {**os.environ, "CLIKA_MODEL": str(model_folder)}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.fixture(scope="module")
def smollm2_int4(smollm2_gguf) -> Path:
    from clika_export.api import cached_export

    return cached_export(smollm2_gguf, precision="int4", progress=False)


def test_the_foundry_local_example_stops_at_its_break_and_names_its_error(smollm2_int4):
    lines = run_example("foundry_local_session.py", smollm2_int4)
    assert lines[0].startswith("reply: ")
    assert lines[1] == "streamed 3 items, then stopped"
    assert lines[2] == "refused: InvalidRequestError"
    assert lines[3].startswith("chat: ")


def test_the_input_queue_example_prefills_before_the_end(smollm2_int4):
    lines = run_example("input_queue.py", smollm2_int4)
    prefilled = int(lines[0].removeprefix("prefilled before the end: ").removesuffix(" tokens"))
    assert prefilled > 0 and lines[1].startswith("summary: ")


def test_the_tool_loop_example_runs_its_tool(qwen05_gguf):
    from clika_export.api import cached_export

    lines = run_example("tool_loop.py", cached_export(qwen05_gguf, precision="int4", progress=False))
    calls = [line for line in lines if line.startswith("calling get_weather(")]
    summary = next(line for line in lines if line.startswith("tool calls: "))
    assert summary.startswith(f"tool calls: {len(calls)}, ") and calls
    assert any(line.startswith("answer: ") for line in lines)
