"""Run optimum's ONNX exporter on a Hugging Face folder, in a subprocess on the pinned toolchain.

``text-generation-with-past`` gives one ``model.onnx``: a causal LM over one
batch of sequences with the past KV as inputs (``clika_runtime.contract.manifest``
describes the layout). The subprocess is bounded: a time limit, its output kept
to its last lines, and a failure reported as one line naming the architecture
and optimum's own error.
"""

from __future__ import annotations

import collections
import re
import subprocess
import threading
from pathlib import Path

from clika_export.fallback.toolchain import python, subprocess_env

TASK = "text-generation-with-past"
DEFAULT_TIMEOUT_S = 3600.0
# Decoder-only model types optimum-onnx 0.1.0 exports for TASK (its TasksManager; the
# encoder-decoder ones it also lists export a decoder that needs an encoder's states).
TEXT_GENERATION_TYPES = (
    "arcee", "bloom", "codegen", "cohere", "deepseek_v3", "falcon", "gemma", "gemma2", "gemma3",
    "gemma3_text", "glm", "gpt2", "gpt_bigcode", "gpt_neo", "gpt_neox", "gpt_oss", "gptj", "granite",
    "helium", "internlm2", "llama", "mistral", "mpt", "nemotron", "olmo", "olmo2", "opt", "phi",
    "phi3", "qwen2", "qwen3", "qwen3_moe", "smollm3", "stablelm",
)  # fmt: skip
_KEPT_LINES = 40
_ERROR_LINE = re.compile(r"^\w*(Error|Exception)\b.*:")


class OptimumExportError(RuntimeError):
    """optimum's exporter failed or ran past its time limit (one line naming why)."""


def run_optimum_export(
    source: Path, out: Path, site: Path, model_type: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Path:
    """Export ``source`` into folder ``out`` with optimum; returns the path of its ``model.onnx``."""
    command = [
        python(), "-m", "optimum.commands.optimum_cli", "export", "onnx",
        "--model", str(source), "--task", TASK, "--framework", "pt", str(out),
    ]  # fmt: skip
    tail: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
    with subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=subprocess_env(site),
        text=True,
        errors="replace",
    ) as process:
        try:
            _read_lines(process, tail, timeout_s)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    if process.returncode != 0:
        raise OptimumExportError(f"optimum's ONNX exporter failed on {model_type}: {_reason(tail)}")
    model = out / "model.onnx"
    if not model.is_file():
        raise OptimumExportError(f"optimum's ONNX exporter wrote no model.onnx for {model_type}")
    return model


def _read_lines(process: subprocess.Popen, tail: collections.deque[str], timeout_s: float) -> None:
    """Keep the last lines of the output until the process ends (killed past ``timeout_s``)."""
    timer = threading.Timer(timeout_s, process.kill)
    timer.daemon = True
    timer.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip():
                tail.append(line.rstrip()[:500])
        process.wait()
    finally:
        timer.cancel()
    if process.returncode is not None and process.returncode < 0:
        tail.append(f"stopped after {timeout_s:.0f} s (the time limit)")


def _reason(tail: collections.deque[str]) -> str:
    """optimum's own error line (the last ``...Error: ...`` of its output), else its last line."""
    lines = list(tail)
    errors = [line for line in lines if _ERROR_LINE.match(line.strip())]
    chosen = errors[-1] if errors else (lines[-1] if lines else "no output")
    return chosen.strip()
