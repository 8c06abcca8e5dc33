"""SIGTERM to a running ``clika-export`` removes its hidden work folder before the process ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def _partials(folder: Path) -> list[Path]:
    return [path for path in folder.iterdir() if path.name.endswith(".partial")]


def test_sigterm_mid_export_leaves_no_partial_folder(tiny_llama_hf: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "clika_cli.export_command", str(tiny_llama_hf), "-o", str(out)]
    child = subprocess.Popen(command + ["--precision", "fp32"], stderr=subprocess.PIPE, text=True)
    try:
        # The work folder exists from "building graph" on: stop the child there, so it is
        # surely mid-export when the signal is sent, then let it handle the signal.
        for line in child.stderr:
            if "building graph" in line and _partials(tmp_path):
                break
        os.kill(child.pid, signal.SIGSTOP)
        assert _partials(tmp_path), "the export was not mid-way"
        os.kill(child.pid, signal.SIGTERM)
        os.kill(child.pid, signal.SIGCONT)
        child.stderr.read()
        assert child.wait() == 128 + signal.SIGTERM
    finally:
        child.kill()
        child.wait()
    assert not out.exists()
    assert _partials(tmp_path) == []
