"""``clika-export --activations``: every quantized matrix on int8 or fp32 activations, or the measured mix."""

from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from clika_cli.export_command import export_command, export_quant_options
from clika_export.api import cache_key
from clika_runtime.contract.manifest import Manifest
from clika_runtime.kernels.gguf_matmul import OP_TYPE, PRECISION_LEVELS


def _export(tmp_path, *flags: str):
    from conftest import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", weight_type="Q4_1", layers=2)
    out = tmp_path / "out"
    result = CliRunner().invoke(export_command, [str(gguf.path), "-o", str(out), "-q", *flags])
    return result, out


def _layer_levels(folder) -> set[int]:
    """The accuracy levels of the graph's layer matrices (GgufMatMul precision as a level)."""
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    levels = set()
    for node in model.graph.node:
        if node.op_type == OP_TYPE and "/layers." in node.name:
            precision = next(helper.get_attribute_value(a) for a in node.attribute if a.name == "precision")
            levels.add(PRECISION_LEVELS[precision.decode()])
    return levels


@pytest.mark.parametrize(("choice", "level"), [("int8", 4), ("fp32", 0)])
def test_one_choice_sets_every_layer_matrix(tmp_path, choice, level):
    result, out = _export(tmp_path, "--activations", choice)
    assert result.exit_code == 0, result.output
    assert _layer_levels(out) == {level}
    record = Manifest.read(out).precision
    assert "sensitivity" not in record  # a choice made by the user, not measured
    layer_groups = [g for e in record["matrices"].values() if e.get("layer") is not None for g in e["groups"]]
    assert layer_groups and {g["accuracy_level"] for g in layer_groups} == {level}


def test_auto_is_the_measured_default(tmp_path):
    result, out = _export(tmp_path)
    assert result.exit_code == 0, result.output
    assert "sensitivity" in Manifest.read(out).precision


def test_fp32_weights_refuse_an_activation_choice(tmp_path):
    result, _ = _export(tmp_path, "--precision", "fp32", "--activations", "int8")
    assert result.exit_code != 0
    assert "--activations applies to quantized weights" in result.output


def test_each_choice_keys_its_own_cached_export():
    keys = {
        choice: cache_key("0" * 64, "int4", None, quant_options=export_quant_options(True, choice))
        for choice in ("auto", "int8", "fp32")
    }
    assert len(set(keys.values())) == 3
    assert keys["auto"] == cache_key("0" * 64, "int4", None)  # the default's key is unchanged
