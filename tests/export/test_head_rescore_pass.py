"""The exporter's pass that makes the head's re-score chain one HeadRescore node: which chains
it takes, and what it leaves of the graph."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper
from rescore_cases import HEADS, chain_model

from clika_export.graph.head_rescore import replace_rescore


def test_the_plain_chain_becomes_one_node_and_its_constants_go() -> None:
    model = chain_model(HEADS[3])  # with zero points
    assert replace_rescore(model.graph) == 1
    (node,) = model.graph.node
    assert (node.op_type, node.domain) == ("HeadRescore", "ai.clika")
    assert list(node.input) == ["approx", "x", "codes", "scales", "zero_points"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"top_k": 256, "block_size": 32}
    assert sorted(i.name for i in model.graph.initializer) == ["codes", "scales", "zero_points"]


def test_a_chain_the_op_does_not_compute_is_left_alone() -> None:
    model = chain_model(HEADS[0])
    gather = next(n for n in model.graph.node if n.op_type == "GatherBlockQuantized")
    for a in gather.attribute:
        if a.name == "bits":
            a.i = 4  # 4-bit rows: not the op's form
    before = [n.op_type for n in model.graph.node]
    assert replace_rescore(model.graph) == 0
    assert [n.op_type for n in model.graph.node] == before


def test_a_chain_whose_ids_are_read_elsewhere_is_left_alone() -> None:
    model = chain_model(HEADS[0])
    model.graph.node.append(helper.make_node("Identity", ["ids"], ["picked"]))
    model.graph.output.append(helper.make_tensor_value_info("picked", 7, None))
    assert replace_rescore(model.graph) == 0


def test_a_chain_over_signed_codes_is_left_alone() -> None:
    """int8 codes dequantize around 0, not 128: not the op's form."""
    model = chain_model(HEADS[0])
    codes = next(i for i in model.graph.initializer if i.name == "codes")
    codes.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(codes).astype(np.int8), "codes"))
    assert replace_rescore(model.graph) == 0
