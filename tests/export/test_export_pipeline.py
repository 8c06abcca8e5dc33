"""The export pipeline: the folder it writes, refusals, atomicity, the cache and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from clika_cli.export_command import export_command
from clika_export.api import ExportError, cache_key, cached_export, export, source_sha256
from clika_export.checkpoint import CheckpointError
from clika_export.readers.hf import folder_sha256
from clika_runtime import __version__
from clika_runtime.contract.manifest import Manifest


def test_the_written_folder(tiny_llama_hf: Path, tiny_llama_model: Path) -> None:
    names = sorted(p.name for p in tiny_llama_model.iterdir())
    assert names == [
        "chat_template.jinja",
        "manifest.json",
        "model.onnx",
        "model.onnx.data",
        "model_kv8.onnx",
        "model_paged.onnx",
        "model_paged_int8.onnx",
        "tokenizer.json",
    ]
    manifest = Manifest.read(tiny_llama_model)
    assert manifest.context_window == 128
    assert manifest.precision["weights"] == "fp32"
    assert manifest.provenance.source == tiny_llama_hf.name  # a name, never an absolute path
    assert manifest.provenance.source_sha256 == folder_sha256(tiny_llama_hf)
    assert (manifest.provenance.tool, manifest.provenance.tool_version) == ("clika_export", __version__)
    check = manifest.quality["reference_check"]
    assert check["max_rel_logits_error"] < 1e-3 and check["top1_agreement"] == 1.0
    assert (tiny_llama_model / "tokenizer.json").read_text() == (tiny_llama_hf / "tokenizer.json").read_text()
    assert not list(tiny_llama_model.parent.glob(".*partial"))


def test_context_window_option(tiny_llama_hf: Path, tmp_path: Path) -> None:
    out = export(tiny_llama_hf, tmp_path / "m", context_window=32, progress=False, verify=False)
    assert Manifest.read(out).context_window == 32
    with pytest.raises(ExportError, match="outside 1..128"):
        export(tiny_llama_hf, tmp_path / "n", context_window=129, progress=False)


def test_unknown_family_is_refused_by_name(tiny_llama_hf: Path, tmp_path: Path) -> None:
    source = tmp_path / "mistery"
    source.mkdir()
    for item in tiny_llama_hf.iterdir():
        (source / item.name).write_bytes(item.read_bytes())
    config = json.loads((source / "config.json").read_text())
    config["model_type"] = "mistery"  # built neither by a family nor by optimum's exporter
    (source / "config.json").write_text(json.dumps(config))
    supported = "gemma2, gemma3, granite, llama, mistral, olmo2, phi3, qwen2, qwen3, smollm3"
    with pytest.raises(
        CheckpointError, match=rf"'mistery' is not supported: no native family builds it \({supported}\)"
    ):
        export(source, tmp_path / "out", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mistery"]


def test_a_failed_export_leaves_nothing(tiny_llama_hf: Path, tmp_path: Path) -> None:
    source = tmp_path / "broken"
    source.mkdir()
    for item in tiny_llama_hf.iterdir():
        (source / item.name).write_bytes(item.read_bytes())
    # A tensor the graph needs is missing: the failure comes after the build has started writing.
    from safetensors.numpy import load_file, save_file

    tensors = load_file(source / "model.safetensors")
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, source / "model.safetensors")
    with pytest.raises(CheckpointError, match="model.layers.1.mlp.down_proj.weight"):
        export(source, tmp_path / "out", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken"]


def test_existing_output_is_kept_unless_overwritten(tiny_llama_hf: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="already exists"):
        export(tiny_llama_hf, out, progress=False)
    assert (out / "keep.txt").read_text() == "mine"
    export(tiny_llama_hf, out, progress=False, overwrite=True, verify=False)
    assert not (out / "keep.txt").exists() and (out / "manifest.json").is_file()


def test_unavailable_precision_fails_before_building(
    tiny_llama_hf: Path, tmp_path: Path, monkeypatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "clika_quant", None)  # as if the quantization pass were not installed
    with pytest.raises(ExportError, match="precision 'int4' needs the quantization pass"):
        export(tiny_llama_hf, tmp_path / "out", precision="int4", progress=False)
    assert not (tmp_path / "out").exists()


def test_cached_export_reuses_and_repairs(tiny_llama_hf: Path, tmp_cache: Path) -> None:
    first = cached_export(tiny_llama_hf, progress=False)
    assert first.parent == tmp_cache / "exports"
    assert first.name == cache_key(source_sha256(tiny_llama_hf), "fp32", None)
    stamp = (first / "manifest.json").stat().st_mtime_ns
    assert cached_export(tiny_llama_hf, progress=False) == first
    assert (first / "manifest.json").stat().st_mtime_ns == stamp  # not exported again
    assert cached_export(tiny_llama_hf, context_window=64, progress=False) != first
    (first / "tokenizer.json").unlink()  # a broken cache entry is exported again
    assert cached_export(tiny_llama_hf, progress=False) == first
    assert Manifest.read(first).context_window == 128


def test_cli(tiny_llama_hf: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli-out"
    result = CliRunner().invoke(
        export_command, [str(tiny_llama_hf), "-o", str(out), "--context", "64", "--threads", "1", "-q"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    assert Manifest.read(out).context_window == 64
    precision = Manifest.read(out).precision
    assert precision["weights"] == "int4" and "re-scored" in precision["scheme"]  # the default scheme
    again = CliRunner().invoke(export_command, [str(tiny_llama_hf), "-o", str(out), "-q"])
    assert again.exit_code != 0 and "already exists" in again.output


def test_tensor_shapes_are_checked_against_the_config(tiny_llama_hf: Path, tmp_path: Path) -> None:
    source = tmp_path / "lying"
    source.mkdir()
    for item in tiny_llama_hf.iterdir():
        (source / item.name).write_bytes(item.read_bytes())
    config = json.loads((source / "config.json").read_text())
    config["intermediate_size"] = 128
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"gate_proj.weight has shape \(96, 64\), the architecture implies \(128, 64\)"
    ):
        export(source, tmp_path / "out", progress=False)


def test_unknown_precision_is_refused_by_name(tiny_llama_hf: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        export_command, [str(tiny_llama_hf), "-o", str(tmp_path / "o"), "--precision", "int3"]
    )
    assert result.exit_code != 0
    assert "precision 'int3' is not supported (supported: " in result.output and "int4" in result.output
    assert not (tmp_path / "o").exists()


def test_check_export_tells_matching_weights_from_others(
    tiny_llama_hf: Path, tiny_llama_model: Path, make_tiny_hf, tmp_path: Path
) -> None:
    from clika_export.readers.hf import read_hf
    from clika_export.verify import check_export

    same = check_export(tiny_llama_model, read_hf(tiny_llama_hf), threads=1)
    assert same["max_rel_logits_error"] < 1e-3 and same["top1_agreement"] == 1.0
    assert same["rows_compared"] == 18
    make_tiny_hf(tmp_path / "other", "llama", seed=1)  # same shapes, other weights
    other = check_export(tiny_llama_model, read_hf(tmp_path / "other"), threads=1)
    assert other["max_rel_logits_error"] > 0.1 and other["top1_agreement"] < 0.5


def test_a_quantized_export_is_cached_per_compute_path(monkeypatch):
    """The sensitivity pass records the error it measured on this process's compute path, so the
    kernel library's exports and the fallback's are kept apart; fp32 measures nothing and is shared."""
    monkeypatch.delenv("CLIKA_KERNELS", raising=False)
    kernels = cache_key("0" * 64, "int4", None), cache_key("0" * 64, "fp32", None)
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    fallback = cache_key("0" * 64, "int4", None), cache_key("0" * 64, "fp32", None)
    assert kernels[0] != fallback[0] and kernels[1] == fallback[1]


def test_the_compute_path_in_the_key_leaves_out_why_it_was_chosen():
    """An ISA forced by CLIKA_KERNEL_ISA computes what the same ISA chosen by the CPU computes,
    and every reason the library is off leaves the same fallback: neither re-exports a model."""
    from clika_runtime.kernels.library import KernelStatus

    engines = {"fp32_engine": "AVX-512 fp32 FMA", "int8_engine": "AVX-512 int8 (VNNI vpdpbusd)"}
    forced = KernelStatus(True, "lib.so", "avx512_vnni", "forced by CLIKA_KERNEL_ISA=avx512_vnni", **engines)
    chosen = KernelStatus(True, "lib.so", "avx512_vnni", "the best this CPU supports", **engines)
    scalar = KernelStatus(
        True, "lib.so", "scalar", "forced by CLIKA_KERNEL_ISA=scalar", "scalar fp32", "scalar int8"
    )
    assert forced.compute_path() == chosen.compute_path() != scalar.compute_path()
    off = KernelStatus(False, None, None, "CLIKA_KERNELS=off")
    unbuilt = KernelStatus(False, None, None, "the kernel library was not built")
    assert off.compute_path() == unbuilt.compute_path() != chosen.compute_path()
