"""A GGUF folder with GgufMatMul nodes runs every graph kind on the MatMulNBits rewrite, as the
folder exported in that form does, and says which path runs and why."""

from __future__ import annotations

import numpy as np
import pytest

from clika_export.api import export
from clika_quant.quality import SequenceRunner
from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_model_folder, open_session, session_options


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny Q4_1 GGUF (offsets: block sums) exported with GgufMatMul and in the MatMulNBits form."""
    from conftest import write_tiny_gguf

    root = tmp_path_factory.mktemp("gguf_paths")
    gguf = write_tiny_gguf(root / "tiny.gguf", weight_type="Q4_1", layers=2)
    return {
        on: export(
            gguf.path, root / str(on), precision="int4", progress=False, quant_options={"gguf_matmul": on}
        )
        for on in (True, False)
    }


def test_the_record_says_what_each_matrix_is_stored_and_computed_as(folders):
    record = Manifest.read(folders[True]).precision
    layers = [e for e in record["matrices"].values() if e.get("layer") is not None]
    assert layers and all(e["ops"][0] == "GgufMatMul" for e in layers)
    for entry in layers:
        (group,) = entry["groups"]
        assert group["weight_format"] == "gguf Q4_1"
        assert group["kernel_precision"] == {0: "fp32", 4: "int8"}[group["accuracy_level"]]
    assert "GgufMatMul" in record["scheme"]
    assert (
        folders[True].joinpath("model.onnx.data").stat().st_size
        < folders[False].joinpath("model.onnx.data").stat().st_size
    )


def test_every_graph_kind_gives_the_matmulnbits_forms_logits(folders, monkeypatch):
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    manifest = Manifest.read(folders[True])
    tokens = [5, 17, 3, 40, 8, 22, 9]
    for key in manifest.graphs:
        if key.startswith("paged"):
            continue  # the paged graph: same nodes, its own cache layout (opened below)
        mode, _, dtype = key.partition(":")
        got, want = (
            SequenceRunner(
                open_model_folder(folders[on], kv_mode=mode, kv_dtype=dtype or "float32"), 64
            ).step(tokens, all_logits=True)
            for on in (True, False)
        )
        if dtype:
            # The int8 KV twins hold scales each export calibrated on its own: close, not equal.
            assert np.abs(got - want).max() <= 0.05 * np.abs(want).max(), key
        else:
            assert np.array_equal(got, want), key
    for key, spec in manifest.graphs.items():
        session = open_session(folders[True] / spec.file, session_options(1), manifest.rope_tables)
        assert not session.kernel_path.kernels and session.kernel_path.nodes > 0, key


def test_greedy_replies_are_the_same_and_the_model_says_why_it_falls_back(folders, monkeypatch):
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    replies = {}
    for on in (True, False):
        model = modelverse.load(folders[on], threads=1)
        try:
            replies[on] = model.generate("hello there", max_new_tokens=12, temperature=0.0)
            kernels = model.kernels
        finally:
            model.close()
        if on:
            assert kernels.startswith("fallback: rewritten at load (8 matrices as MatMulNBits")
            assert kernels.endswith("CLIKA_KERNELS=off)")
        else:  # no GgufMatMul, but its attention is the library's op too
            assert kernels.startswith(
                "fallback: rewritten at load (2 attention layers as GroupQueryAttention;"
            )
    assert replies[True] == replies[False]


def test_a_folder_without_the_kernel_library_still_runs_and_says_why(folders, monkeypatch):
    """The library's module absent from the install: the rewrite runs, and the reason is given."""
    import builtins

    monkeypatch.delenv("CLIKA_KERNELS", raising=False)
    real_import = builtins.__import__

    def no_library(name, *args, **kwargs):
        if name == "clika_runtime.kernels.library":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_library)
    opened = open_model_folder(folders[True], threads=1)
    assert opened.session.kernel_path.detail == "this install has no kernel library"
    logits = SequenceRunner(opened, 64).step([5, 17, 3], all_logits=True)
    assert np.isfinite(logits).all()
