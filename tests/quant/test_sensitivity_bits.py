"""4 or 8 bits per layer matrix chosen by measured error: reproducible, recorded, within the target."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from clika_export.api import export
from clika_export.graph.kv_int8 import calibration_ids
from clika_quant.options import QuantError, QuantOptions
from clika_quant.quality import open_runner
from clika_quant.sensitivity import CALIBRATION_TOKENS, mean_kl
from clika_runtime.contract.manifest import Manifest

# The accuracy-level pass is left out so the bits pass's figures are the folder's own.
# The 8-bit MatMulNBits form the requantizing pass starts from (a requantizing export writes it).
STORED = {"sensitivity_budget": None, "gguf_matmul": False}


def _bits(folder) -> dict[str, int]:
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    return {
        n.name: next(helper.get_attribute_value(a) for a in n.attribute if a.name == "bits")
        for n in model.graph.node
        if n.op_type == "MatMulNBits"
    }


def _weight_bytes(folder) -> int:
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    fields = [{e.key: e.value for e in t.external_data} for t in model.graph.initializer]
    return sum(int(f.get("length", 0)) for f in fields)


def _logits(folder, tokens):
    return open_runner(folder, threads=1).step(tokens, all_logits=True).astype("float64")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A tiny Q8_0 GGUF as stored, then measured with a zero target (every candidate's KL, none
    taken), then twice with a target between the candidates' KLs."""
    from conftest import write_tiny_gguf

    root = tmp_path_factory.mktemp("bits")
    gguf = write_tiny_gguf(root / "tiny.gguf", weight_type="Q8_0", layers=3)

    def made(name, **options):
        return export(
            gguf.path, root / name, precision="int4", progress=False, quant_options={**STORED, **options}
        )

    folders = {"stored": made("stored"), "zero": made("zero", requantize_target_kl=0.0)}
    kls = sorted(Manifest.read(folders["zero"]).precision["bits_sensitivity"]["measured_kl"].values())
    target = kls[len(kls) // 2]
    folders |= {name: made(name, requantize_target_kl=target) for name in ("a", "b")}
    return folders, target


def test_every_candidate_is_measured_and_a_zero_target_keeps_all_8_bit(exports):
    folders, _ = exports
    record = Manifest.read(folders["zero"]).precision["bits_sensitivity"]
    # 4 layer matrices in each of 3 layers; the tied table and head are not candidates.
    assert len(record["measured_kl"]) == 12 and all(v > 0 for v in record["measured_kl"].values())
    assert record["requantized"] == [] and record["measured_kl_left"] == 0.0
    assert _bits(folders["zero"]) == _bits(folders["stored"])


def test_the_choice_is_reproducible_and_recorded(exports):
    folders, target = exports
    first, again = (Manifest.read(folders[n]).precision for n in ("a", "b"))
    assert first["bits_sensitivity"] == again["bits_sensitivity"]
    assert _bits(folders["a"]) == _bits(folders["b"])
    chosen = first["bits_sensitivity"]
    assert chosen["target_kl"] == target
    assert 0 < len(chosen["requantized"]) < len(chosen["measured_kl"])
    # The record's groups, the graph's nodes and the summary say the same widths.
    four = 0
    for entry in first["matrices"].values():
        for group in entry.get("groups", []):
            if "bits_choice" not in group:
                continue
            assert group["bits_choice"]["measured_kl_at_4_bits"] > 0
            four += group["bits"] == 4
            assert (group["bits"] == 4) == group["method"].startswith("4-bit search")
    assert four == len(chosen["requantized"])
    layers = {name: bits for name, bits in _bits(folders["a"]).items() if "/layers." in name}
    assert sum(bits == 4 for bits in layers.values()) == four
    forms = first["summary"]["forms"]
    assert sum(n for form, n in forms.items() if form.startswith("4-bit block 32")) == four


def test_the_mixed_export_has_the_error_it_states_and_is_smaller(exports):
    folders, target = exports
    record = Manifest.read(folders["a"]).precision["bits_sensitivity"]
    tokens = calibration_ids(folders["a"])[:CALIBRATION_TOKENS]
    assert record["calibration_tokens"] == len(tokens)
    kl = mean_kl(_logits(folders["stored"], tokens), _logits(folders["a"], tokens))
    assert kl == pytest.approx(record["measured_kl_left"], rel=1e-6, abs=1e-12)
    assert 0 < kl <= target
    # (tiny zero-point tensors sit inside the graph file, not in the data file)
    saved = _weight_bytes(folders["stored"]) - _weight_bytes(folders["a"])
    assert saved >= 0.9 * record["bytes_saved"] > 0


def test_a_bad_target_is_named():
    with pytest.raises(QuantError, match="requantize_target_kl"):
        QuantOptions(requantize_target_kl=-1.0)


def test_the_levels_pass_then_sees_the_requantized_matrices_as_4_bit(tmp_path):
    from conftest import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", weight_type="Q8_0", layers=2)
    options = {"requantize_target_kl": 0.9, "sensitivity_budget": 0.5, "sensitivity_target_kl": 0.0}
    folder = export(gguf.path, tmp_path / "both", precision="int4", progress=False, quant_options=options)
    record = Manifest.read(folder).precision
    requantized = record["bits_sensitivity"]["requantized"]
    assert requantized and record["bits_sensitivity"]["measured_kl_left"] <= 0.9
    # The tiny GGUF is all Q8_0: its only 4-bit layer weights are the requantized ones.
    four_bit = [
        g
        for e in record["matrices"].values()
        if e.get("layer") is not None
        for g in e["groups"]
        if g["bits"] == 4
    ]
    assert len(four_bit) == len(requantized)
    # Requantizing writes MatMulNBits: its 8-bit weights stay at level 4, the 4-bit ones are weighed.
    assert record["sensitivity"]["candidate_bytes"] == sum(g["bytes"] for g in four_bit)
    assert record["sensitivity"]["level0"], "a zero target with half the bytes allowed moves some"
