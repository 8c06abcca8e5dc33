"""StepAttention nodes rewritten at load into the GroupQueryAttention step they replaced, for
ORT alone (no kernel library): the same nodes, so the same outputs as that step."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from attention_cases import LAYOUTS, STEPS, feeds, gqa_model, step_attention_model

from clika_runtime.kernels.attention_op import model_with_gqa
from clika_runtime.kernels.fallback_graph import has_kernel_ops, rewrite
from clika_runtime.kernels.graph_loading import inference_session


def plain_session(model: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_the_rewrite_runs_on_ort_alone_as_the_gqa_step(layout) -> None:
    model = step_attention_model(layout, grid=True)
    assert has_kernel_ops(model)
    rewritten = rewrite(model, None)
    assert rewritten.attention == 1 and rewritten.nodes == 0 and not rewritten.supplied
    assert not has_kernel_ops(rewritten.model)
    ops = [n.op_type for n in onnx.load_from_string(rewritten.model).graph.node]
    assert ops == ["Gather", "GroupQueryAttention", "GatherND"]
    ours, theirs = plain_session(rewritten.model), plain_session(gqa_model(layout))
    for step in STEPS:
        f = feeds(layout, step)
        for got, want in zip(ours.run(None, f), theirs.run(None, f), strict=True):
            assert np.array_equal(got, want)


def test_the_attributes_carry_over(monkeypatch) -> None:
    layout = LAYOUTS[1]  # a local window
    model = onnx.load_from_string(model_with_gqa(step_attention_model(layout, grid=True)))
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gqa.attribute}
    assert attrs == {**layout.attributes(), "do_rotary": 1, "rotary_interleaved": 0}
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    session = inference_session(step_attention_model(layout, grid=True))
    assert session.kernel_path.attention == 1
    assert session.kernel_path.describe().startswith(
        "fallback: rewritten at load (1 attention layers as GroupQueryAttention; "
    )
