"""The Chucky SDK's own examples (``examples/chucky_*.py``: the seed's code, imports changed)
run as scripts on real models (slow): Qwen2.5-Coder-0.5B with a tool, SmolLM2 for the session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import EXAMPLES

pytestmark = pytest.mark.slow


def run_example(name: str, model_folder: Path) -> str:
    env = {**os.environ, "CLIKA_MODEL": str(model_folder)}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_complete_example_prompts_and_runs_a_tool_session(qwen05_gguf):
    from clika_export.api import cached_export

    out = run_example("chucky_client.py", cached_export(qwen05_gguf, precision="int4", progress=False))
    lines = out.splitlines()
    assert lines[0].startswith("Answer: ") and lines[1] == "Cost: $0.0000"
    assert lines[-1].startswith("Done: ")


def test_the_session_example_holds_two_turns_and_a_prompt(smollm2_gguf):
    from clika_export.api import cached_export

    out = run_example("chucky_session.py", cached_export(smollm2_gguf, precision="int4", progress=False))
    assert out.strip() and "Unexpected error" not in out and "Connection error" not in out
