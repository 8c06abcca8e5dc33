"""The README's first command installs what ``clika chat`` and ``clika serve`` both need.

The install part of that command runs as written in a fresh copy of the
project (the files git knows, as a clone has them), then ``clika serve``
from the venv it made serves the default model to the real OpenAI client.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from repo_paths import REPO

from clika_export.pull.catalog import default_model


def readme_first_command() -> str:
    blocks = re.findall(r"```sh\n(.*?)\n```", (REPO / "README.md").read_text(), flags=re.S)
    return blocks[0].strip()


def install_steps(command: str) -> list[str]:
    """The first command's steps before it starts the chat (the install)."""
    steps = [step.strip() for step in command.split("&&")]
    assert steps[-1].endswith("clika chat"), f"the README's first command no longer ends in a chat: {command}"
    return steps[:-1]


def fresh_copy(target: Path) -> Path:
    """The project's files as a clone has them (tracked and new files, nothing ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (os.fsdecode(n) for n in listed)):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def expected_reply() -> str:
    """The default model's greedy reply to QUESTION, from this checkout's library (the export serve used)."""
    from clika_runtime import modelverse
    from clika_runtime.store import resolve

    model = modelverse.load(resolve(default_model(), pull=False).folder, threads=1)
    try:
        return model.generate(messages=QUESTION, max_new_tokens=16, temperature=0.0)
    finally:
        model.close()


def served_url(process: subprocess.Popen) -> str:
    """The address ``clika serve`` reports on stderr once it listens (it may pull the model first)."""
    assert process.stderr is not None
    for line in process.stderr:
        if " at http://" in line:
            return line.split(" at ")[1].split()[0]
    raise AssertionError(f"clika serve ended without reporting its address (exit {process.wait()})")


@pytest.mark.slow
def test_the_readme_install_serves(tmp_path, smollm2_gguf):
    clone = fresh_copy(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for step in install_steps(readme_first_command()):
        subprocess.run(step, shell=True, cwd=clone, env=env, check=True, timeout=1800)
    clika = clone / ".venv" / "bin" / "clika"
    command = [str(clika), "serve", "--port", "0", "--threads", "1"]  # the default model
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        import openai

        url = served_url(process)
        reply = openai.OpenAI(base_url=url, api_key="none", max_retries=0).chat.completions.create(
            model=default_model(), messages=QUESTION, max_tokens=16, temperature=0
        )
        assert url.startswith("http://127.0.0.1:")
        assert reply.choices[0].message.content == expected_reply()  # what the library says in-process
        process.send_signal(2)  # Ctrl-C
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()
