"""The default SmolLM2-135M export's head re-scores in one HeadRescore node, and gives the
greedy tokens the re-score chain it replaced gives (the same graph, only the head rewritten)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from clika_quant.quality import SequenceRunner
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_model_folder
from clika_runtime.kernels.library import kernel_status
from clika_runtime.kernels.rescore_op import model_with_chain

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_smollm2(smollm2_gguf) -> Path:
    from clika_export.api import cached_export

    return cached_export(smollm2_gguf, "int4", progress=False)


def chain_twin(folder: Path, out: Path) -> Path:
    """A copy of ``folder`` whose continuous graph has the head's chain instead of the node."""
    shutil.copytree(folder, out)
    graph = out / Manifest.read(out).graphs["continuous"].file
    graph.write_bytes(model_with_chain(graph.read_bytes()))
    return out


def greedy(folder: Path, steps: int) -> tuple[list[int], np.ndarray]:
    runner = SequenceRunner(open_model_folder(folder, threads=2), 256)
    logits = runner.step(list(runner.model.tokenizer.encode("The capital of France is").ids), all_logits=True)
    tokens = []
    for _ in range(steps):
        tokens.append(int(logits[-1].argmax()))
        logits = runner.step([tokens[-1]], all_logits=True)
    return tokens, logits


def test_the_head_is_one_node_with_the_chains_greedy_tokens(default_smollm2, tmp_path) -> None:
    status = kernel_status()
    if not status.available:
        pytest.skip(f"the kernel library is not usable here: {status.reason}")
    manifest = Manifest.read(default_smollm2)
    for key, spec in manifest.graphs.items():  # the twins derive from the continuous graph
        ops = [
            n.op_type
            for n in onnx.load(str(default_smollm2 / spec.file), load_external_data=False).graph.node
        ]
        assert ops.count("HeadRescore") == 1 and "TopK" not in ops, key
    (ours, ours_logits), (chain, chain_logits) = (
        greedy(f, 24) for f in (default_smollm2, chain_twin(default_smollm2, tmp_path / "chain"))
    )
    assert ours == chain
    assert np.abs(ours_logits - chain_logits).max() <= 1e-5 * np.abs(chain_logits).max()
