"""Accuracy levels chosen by measured sensitivity: reproducible, recorded, within the stated error."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from clika_export.api import export
from clika_export.graph.kv_int8 import calibration_ids
from clika_quant.options import QuantError, QuantOptions
from clika_quant.quality import open_runner
from clika_quant.sensitivity import (
    CALIBRATION_TOKENS,
    Place,
    choose,
    groups_of,
    mean_kl,
    until_measured_target,
)
from clika_runtime.contract.manifest import Manifest
from clika_runtime.kernels.gguf_matmul import OP_TYPE, PRECISION_LEVELS

MIXED = {"sensitivity_budget": 0.5, "sensitivity_target_kl": 0.0}


def _levels(folder) -> dict[str, int]:
    """Each matrix node's accuracy level: MatMulNBits' own, or GgufMatMul's precision as one."""
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    levels = {}
    for n in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "MatMulNBits":
            levels[n.name] = attrs["accuracy_level"]
        elif n.op_type == OP_TYPE:
            levels[n.name] = PRECISION_LEVELS[attrs["precision"].decode()]
    return levels


def _fp32_forms(folder) -> dict[str, str]:
    """The fp32_form attribute of each GgufMatMul node that has one."""
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    forms = {}
    for n in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == OP_TYPE and "fp32_form" in attrs:
            forms[n.name] = attrs["fp32_form"].decode()
    return forms


def _calibration_logits(folder, tokens):
    runner = open_runner(folder, threads=1)
    return runner.step(tokens, all_logits=True).astype("float64")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A tiny Q4_1 GGUF exported twice with the sensitivity pass, and once with every 4-bit layer
    weight at level 0 and the head as the pass leaves it (the computation it measures against)."""
    from conftest import write_tiny_gguf

    root = tmp_path_factory.mktemp("sensitivity")
    gguf = write_tiny_gguf(root / "tiny.gguf", weight_type="Q4_1", layers=4)
    made = {
        name: export(gguf.path, root / name, precision="int4", progress=False, quant_options=options)
        # The pass measures against its layers at level 0 beside the head as exported (level 4).
        for name, options in (
            ("a", MIXED),
            ("b", MIXED),
            ("exact", {"accuracy_level_4bit": 0, "head_accuracy_level": 4}),
        )
    }
    return made


def test_the_choice_is_reproducible_and_recorded(exports):
    first, again = (Manifest.read(exports[n]).precision for n in ("a", "b"))
    assert first["sensitivity"] == again["sensitivity"]
    assert _levels(exports["a"]) == _levels(exports["b"])
    chosen = first["sensitivity"]
    assert set(chosen["measured"]["layer_kl"]) == {"0", "1", "2", "3"}
    assert set(chosen["measured"]["role_kl"]) == {"attn.qkv", "attn.o", "mlp.gate_up", "mlp.down"}
    assert chosen["level0"], "a zero target with half the bytes allowed moves something to level 0"
    assert chosen["level0_bytes"] <= 0.5 * chosen["candidate_bytes"]
    # The record's groups and the graph's nodes say the same levels.
    for name, entry in first["matrices"].items():
        if entry.get("layer") is None:
            continue
        key = f"{entry['roles'][0]}@{entry['layer']}"
        assert entry["groups"][0]["accuracy_level"] == (0 if key in chosen["level0"] else 4), name
    levels = _levels(exports["a"])
    assert sum(level == 0 for level in levels.values()) == len(chosen["level0"])
    assert first["summary"]["accuracy_levels"]["4-bit level 0"] == len(chosen["level0"])


def test_the_fp32_the_pass_keeps_may_run_the_16_bit_split_and_says_so(exports):
    """The Q4_1 nodes the pass keeps at level 0 get fp32_form "split16" (the default
    QuantOptions.fp32_form), recorded on their groups; the int8 ones and an export asked for
    level 0 everywhere keep fp32 FMA, the float model's products."""
    levels, forms = _levels(exports["a"]), _fp32_forms(exports["a"])
    layer_nodes = {n: level for n, level in levels.items() if "/layers." in n}
    assert forms and set(forms.values()) == {"split16"}
    assert set(forms) == {n for n, level in layer_nodes.items() if level == 0}
    for entry in Manifest.read(exports["a"]).precision["matrices"].values():
        for group in entry.get("groups", []) if entry.get("layer") is not None else []:
            assert group.get("fp32_form") == ("split16" if group["accuracy_level"] == 0 else None), group
    assert _fp32_forms(exports["exact"]) == {}


def test_8_bit_gguf_blocks_the_kernels_compute_may_move_to_fp32(tmp_path):
    """Q8_0 layer matrices are candidates (GgufMatMul's fp32 path costs them ~2x, not an 8-bit
    MatMulNBits level 0's 10-30x): a zero target with every byte allowed moves them all."""
    from conftest import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", weight_type="Q8_0", layers=2)
    options = {"sensitivity_budget": 1.0, "sensitivity_target_kl": 0.0}
    folder = export(gguf.path, tmp_path / "q8", precision="int4", progress=False, quant_options=options)
    record = Manifest.read(folder).precision
    layer_groups = [g for e in record["matrices"].values() if e.get("layer") is not None for g in e["groups"]]
    assert layer_groups and all(g["bits"] == 8 for g in layer_groups)
    assert all(g["accuracy_level"] == 0 and g["kernel_precision"] == "fp32" for g in layer_groups)
    assert record["sensitivity"]["candidate_bytes"] == sum(g["bytes"] for g in layer_groups)
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    # the layers' GgufMatMul nodes (the head's 4-bit ranking copy is one too)
    kernel_nodes = [n.name for n in model.graph.node if n.op_type == OP_TYPE and "/layers." in n.name]
    assert len(kernel_nodes) == len(layer_groups)
    assert all(_levels(folder)[n] == 0 for n in kernel_nodes)
    assert _fp32_forms(folder) == {}  # the 16-bit split is for Q4_0 / Q4_1 only


def test_the_mixed_export_has_the_error_it_states(exports):
    record = Manifest.read(exports["a"]).precision["sensitivity"]
    tokens = calibration_ids(exports["a"])[:CALIBRATION_TOKENS]
    assert record["calibration_tokens"] == len(tokens)
    kl = mean_kl(_calibration_logits(exports["exact"], tokens), _calibration_logits(exports["a"], tokens))
    assert kl == pytest.approx(record["measured_kl_left"], rel=1e-6, abs=1e-12)
    assert kl < record["measured"]["all_fast_kl"]


def _places_and_groups():
    places = [
        Place("attn.qkv", 0, ("q0",), 100),
        Place("mlp.down", 0, ("d0",), 400),
        Place("attn.qkv", 1, ("q1",), 100),
        Place("mlp.down", 1, ("d1",), 400),
    ]
    measured = {
        "all_fast_kl": 0.01,
        "layer_kl": {"0": 0.002, "1": 0.008},
        "role_kl": {"attn.qkv": 0.006, "mlp.down": 0.004},
    }
    estimated = {"attn.qkv@0": 0.0012, "mlp.down@0": 0.0008, "attn.qkv@1": 0.0048, "mlp.down@1": 0.0032}
    return places, groups_of(places, measured), estimated


def test_choose_moves_whole_measured_groups_most_error_per_byte_first_within_the_budget():
    places, groups, estimated = _places_and_groups()
    assert sorted(g.name for g in groups) == ["@0", "@1", "attn.qkv", "mlp.down"]

    def keys(target_kl, budget):
        return [p.key for p in choose(places, groups, estimated, target_kl=target_kl, budget=budget)]

    # KL per byte: the query/key/value role (0.006 / 200) first, then layer 1 (0.008 / 500).
    assert keys(0.0, 0.2) == ["attn.qkv@0", "attn.qkv@1"]
    # Layer 1 then adds only its down matrix: 600 of the 1000 bytes.
    assert keys(0.0, 0.6) == ["attn.qkv@0", "attn.qkv@1", "mlp.down@1"]
    # A group that does not fit is skipped, not cut: layer 0's down matrix alone would fit 0.6.
    assert keys(0.0, 0.65) == ["attn.qkv@0", "attn.qkv@1", "mlp.down@1"]
    assert keys(0.0, 1.0) == ["attn.qkv@0", "mlp.down@0", "attn.qkv@1", "mlp.down@1"]
    # The estimated KL left stops it: 0.01 - 0.006 (the role) = 0.004 <= 0.0045.
    assert keys(0.0045, 1.0) == ["attn.qkv@0", "attn.qkv@1"]
    assert keys(0.02, 1.0) == []
    # Under budgets no group fits, nothing moves.
    assert keys(0.0, 0.1) == []


def test_bad_sensitivity_options_are_named():
    with pytest.raises(QuantError, match="sensitivity_budget"):
        QuantOptions(sensitivity_budget=1.5)
    with pytest.raises(QuantError, match="sensitivity_target_kl"):
        QuantOptions(sensitivity_target_kl=-0.1)


def test_only_models_up_to_the_size_limit_get_the_pass():
    from clika_export.quality_report import parameter_count, wants_sensitivity
    from clika_runtime.contract.manifest import Architecture

    def arch(**fields):
        base = dict(
            family="llama", num_layers=30, hidden_size=576, num_heads=9, num_kv_heads=3, head_dim=64,
            intermediate_size=1536, vocab_size=49152, rms_norm_eps=1e-5, rope_theta=1e5,
            max_position_embeddings=8192, tie_word_embeddings=True,
        )  # fmt: skip
        return Architecture(**{**base, **fields})

    smollm2 = arch()
    qwen05 = arch(num_layers=24, hidden_size=896, num_heads=14, num_kv_heads=2, intermediate_size=4864)
    qwen05 = arch(**{**qwen05.__dict__, "vocab_size": 151936, "tie_word_embeddings": False})
    assert parameter_count(smollm2) == 134_479_872
    assert parameter_count(qwen05) == 630_095_872
    record = {"options": QuantOptions().to_dict()}
    assert wants_sensitivity(record, smollm2) and not wants_sensitivity(record, qwen05)
    unlimited = {"options": {**record["options"], "sensitivity_max_parameters": None}}
    assert wants_sensitivity(unlimited, qwen05)
    assert not wants_sensitivity({"options": QuantOptions.for_precision("int8").to_dict()}, smollm2)


def test_groups_are_added_in_order_while_the_measured_kl_is_over_the_target():
    """The estimate can fall short (KL does not add up): the choice is measured, and the next
    groups in the same order move one at a time until the measured KL meets the target."""
    places, groups, estimated = _places_and_groups()
    chosen = choose(places, groups, estimated, target_kl=0.0045, budget=1.0)
    assert [p.key for p in chosen] == ["attn.qkv@0", "attn.qkv@1"]
    measured_by_bytes_left = {800: 0.005, 400: 0.003, 0: 0.0}  # what the fake graph measures
    calls = []

    def kl_left(exact):
        calls.append(sorted(p.key for p in exact))
        return measured_by_bytes_left[1000 - sum(p.bytes for p in exact)]

    final, kl, added = until_measured_target(places, groups, chosen, 0.0045, 1.0, kl_left)
    # 0.005 measured with the choice: layer 1 (the next group) adds its down matrix, 0.003 left.
    assert [p.key for p in final] == ["attn.qkv@0", "attn.qkv@1", "mlp.down@1"] and kl == 0.003
    assert added == 1 and len(calls) == 2
    # Met at once: one measurement, nothing added.
    final, kl, added = until_measured_target(places, groups, chosen, 0.006, 1.0, kl_left)
    assert [p.key for p in final] == ["attn.qkv@0", "attn.qkv@1"] and (kl, added) == (0.005, 0)
    # A group past the budget is skipped, as choose skips it: nothing fits 0.2 beyond the choice.
    final, kl, added = until_measured_target(places, groups, chosen, 0.0, 0.2, kl_left)
    assert [p.key for p in final] == ["attn.qkv@0", "attn.qkv@1"] and added == 0
