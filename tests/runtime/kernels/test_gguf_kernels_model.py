"""A real GGUF model exported once with fp32-precision GgufMatMul, run on the kernel library and
on the MatMulNBits rewrite: the same greedy tokens, logits within the kernels' stated error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from clika_quant.quality import SequenceRunner
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_model_folder
from clika_runtime.kernels.library import kernel_status

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_fp32_kernels(smollm2_gguf, tmp_path_factory):
    """Every layer matrix at GgufMatMul precision fp32 (level 0), where both paths are fp32-grade."""
    from clika_export.api import export

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CLIKA_KERNELS", "off")  # the export's own measurements on the rewrite
        folder = tmp_path_factory.mktemp("smollm2_kernels") / "int4-fp32"
        return export(
            smollm2_gguf,
            folder,
            precision="int4",
            progress=False,
            quant_options={"accuracy_level": 0, "gguf_matmul": True},
        )


def _greedy(folder, steps: int) -> tuple[list[int], np.ndarray]:
    runner = SequenceRunner(open_model_folder(folder, threads=2), 256)
    tokens = list(runner.model.tokenizer.encode("The capital of France is").ids)
    logits = runner.step(tokens, all_logits=True).astype(np.float64)
    generated = []
    for _ in range(steps):
        generated.append(int(logits[-1].argmax()))
        logits = runner.step([generated[-1]], all_logits=True).astype(np.float64)
    return generated, logits


def test_kernels_and_fallback_give_the_same_greedy_tokens(smollm2_fp32_kernels, monkeypatch):
    status = kernel_status()
    if not status.available:
        pytest.skip(f"the kernel library is not usable here: {status.reason}")
    # every layer's gate and up rows apply silu(gate) * up themselves (clika_quant.fuse_swiglu)
    assert Manifest.read(smollm2_fp32_kernels).precision["fused_swiglu"] == 30
    graph = onnx.load(str(smollm2_fp32_kernels / "model.onnx"), load_external_data=False).graph
    assert sum(node.op_type == "StepAttention" for node in graph.node) == 30
    results = {}
    for mode in ("on", "off"):
        monkeypatch.setenv("CLIKA_KERNELS", mode)
        opened = open_model_folder(smollm2_fp32_kernels, threads=1)
        assert opened.session.kernel_path.kernels is (mode == "on")
        # every layer's attention is StepAttention on the library, GroupQueryAttention without it
        assert opened.session.kernel_path.attention == (0 if mode == "on" else 30)
        results[mode] = _greedy(smollm2_fp32_kernels, 24)
    (tokens_on, logits_on), (tokens_off, logits_off) = results["on"], results["off"]
    assert tokens_on == tokens_off
    # fp32-grade kernels (fp32 FMA or the bf16 hi+lo split, 4e-6 a product): measured 2.4e-5 here
    assert np.abs(logits_on - logits_off).max() <= 1e-3 * np.abs(logits_off).max()
