"""Checkpoint metadata never drives export memory past what the weights themselves need.

A GGUF may claim a 2^24-token context and a config.json 10^7 layers; the
context window is capped (by what the user asks for, or a default maximum) and
the layer count must match the layers the weights hold.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFValueType

from clika_export.api import DEFAULT_MAX_CONTEXT, MAX_CONTEXT_WINDOW, ExportError, export
from clika_export.checkpoint import CheckpointError
from clika_export.readers.hf import read_hf
from clika_runtime.contract.manifest import Manifest

HUGE = 1 << 24

# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec.
_PEAK = """
import sys
from clika_export.api import export
export(sys.argv[1], sys.argv[2], "fp32", progress=False, verify=False)
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def _export_peak_kib(source: Path, out: Path) -> int:
    """Peak resident memory (KiB) of a process that only runs this export."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(source), str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_a_huge_claimed_context_exports_within_twice_the_memory_of_the_real_one(tiny_gguf, tmp_path) -> None:
    real = tiny_gguf("real.gguf")
    huge = tiny_gguf("huge.gguf", metadata={"llama.context_length": (HUGE, GGUFValueType.UINT32)})
    real_peak = _export_peak_kib(real.path, tmp_path / "real-out")
    huge_peak = _export_peak_kib(huge.path, tmp_path / "huge-out")
    assert Manifest.read(tmp_path / "huge-out").context_window == DEFAULT_MAX_CONTEXT
    assert huge_peak <= 2 * real_peak
    # The folder grows by the capped rotary tables only: [window, head_dim / 2] float32, cos and sin.
    arch = Manifest.read(tmp_path / "huge-out").architecture
    tables = 2 * (DEFAULT_MAX_CONTEXT - 256) * (arch.head_dim // 2) * 4
    real_bytes, huge_bytes = (_folder_bytes(tmp_path / out) for out in ("real-out", "huge-out"))
    assert huge_bytes - real_bytes <= tables + (1 << 16)  # graph files differ by a few constants


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir())


def test_a_context_window_above_the_maximum_is_refused(tiny_gguf, tmp_path) -> None:
    huge = tiny_gguf("huge.gguf", metadata={"llama.context_length": (HUGE, GGUFValueType.UINT32)})
    with pytest.raises(ExportError, match=f"at most {MAX_CONTEXT_WINDOW}"):
        export(huge.path, tmp_path / "out", "fp32", context_window=HUGE, progress=False, verify=False)
    out = export(huge.path, tmp_path / "asked", "fp32", context_window=4096, progress=False, verify=False)
    assert Manifest.read(out).context_window == 4096


@pytest.mark.parametrize("layers", [10**7, 3, 1])
def test_the_layer_count_must_match_the_layers_the_weights_hold(tiny_llama_hf, tmp_path, layers) -> None:
    folder = tmp_path / "hf"
    shutil.copytree(tiny_llama_hf, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    with pytest.raises(
        CheckpointError, match=f"num_hidden_layers is {layers}, but the weights hold 2 layers"
    ):
        read_hf(folder)
