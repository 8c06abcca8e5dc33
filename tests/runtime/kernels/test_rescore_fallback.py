"""HeadRescore nodes rewritten at load into the re-score chain they replaced, for ORT alone
(no kernel library): the same nodes, so the same logits as that chain."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from rescore_cases import HEADS, chain_model, feeds, rescore_model

from clika_runtime.kernels.fallback_graph import has_kernel_ops, rewrite
from clika_runtime.kernels.graph_loading import inference_session


def plain_session(model: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("head", HEADS[:4], ids=str)
def test_the_rewrite_runs_on_ort_alone_as_the_chain(head) -> None:
    model = rescore_model(head).SerializeToString()
    assert has_kernel_ops(model)
    rewritten = rewrite(model, None)
    assert rewritten.heads == 1 and rewritten.nodes == 0 and not rewritten.supplied
    assert not has_kernel_ops(rewritten.model)
    ops = [n.op_type for n in onnx.load_from_string(rewritten.model).graph.node]
    assert ops == [
        "TopK",
        "GatherBlockQuantized",
        "Reshape",
        "Unsqueeze",
        "Mul",
        "ReduceSum",
        "ScatterElements",
    ]
    f = feeds(head)
    got = plain_session(rewritten.model).run(None, f)[0]
    assert np.array_equal(got, plain_session(chain_model(head).SerializeToString()).run(None, f)[0])


def test_the_load_says_the_head_runs_as_the_chain(monkeypatch) -> None:
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    session = inference_session(rescore_model(HEADS[0]).SerializeToString())
    assert session.kernel_path.heads == 1
    assert session.kernel_path.describe().startswith(
        "fallback: rewritten at load (the head's re-score as TopK and GatherBlockQuantized; "
    )
