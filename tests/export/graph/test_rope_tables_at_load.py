"""Exports hold their rope tables as placeholders the runtime computes; folders that store them still load.

Each tiny export (a plain llama rope, Gemma 3's global and local ropes, Phi-3's
longrope over half the head) is compared with the same folder rewritten into
the layout of older exports (``rope_layouts.stored_tables_folder``: the tables
in the weights file, no ``rope_tables``). The computed tables are the very
arrays the older layout stores, fed to the same kernels, so logits must be
equal bit for bit, not within a tolerance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from family_cases import CASES, build_case
from rope_layouts import stored_tables_folder

from clika_export.api import export
from clika_export.verify import StepRunner
from clika_runtime import modelverse
from clika_runtime.contract.manifest import COMPUTED_TABLES_VERSION, FORMAT_VERSION, Manifest
from clika_runtime.engine.config import GenerationConfig

PROMPTS = ([256, 72, 101, 108, 108, 111], [256, 9, 8, 7, 6, 5, 4, 3, 2, 1, 30, 31, 32, 33])


@pytest.fixture(scope="module", params=["llama", "gemma3", "phi3"])
def folders(request, make_tiny_hf, tmp_path_factory) -> tuple[str, Path, Path]:
    """(family, the export, the same export with its tables stored as older exports stored them)."""
    family = request.param
    root = tmp_path_factory.mktemp(f"rope-{family}")
    context = None
    if family == "llama":
        make_tiny_hf(root / "hf", "llama")
    else:
        build_case(make_tiny_hf, root / "hf", CASES[family])
        context = CASES[family].context
    out = export(root / "hf", root / "model", context_window=context, progress=False)
    return family, out, stored_tables_folder(out, root / "stored")


def _initializer_dims(folder: Path) -> dict[str, list[tuple[int, ...]]]:
    dims: dict[str, list[tuple[int, ...]]] = {}
    for graph in sorted(folder.glob("*.onnx")):
        for init in onnx.load(str(graph), load_external_data=False).graph.initializer:
            if init.name.endswith((".cos_cache", ".sin_cache")):
                dims.setdefault(init.name, []).append(tuple(init.dims))
    return dims


def test_the_export_stores_placeholders_and_names_what_computes_them(folders) -> None:
    family, out, stored = folders
    manifest = Manifest.read(out)
    assert manifest.format_version == COMPUTED_TABLES_VERSION
    tables = {t.cos: t for t in manifest.rope_tables}
    assert all(t.positions == manifest.context_window for t in tables.values())
    dims = _initializer_dims(out)
    assert set(dims) == {name for t in tables.values() for name in (t.cos, t.sin)}
    for table in tables.values():
        # every graph of the folder (continuous, paged, int8 twins) reads the placeholder
        assert set(dims[table.cos]) == set(dims[table.sin]) == {(0, table.rotary_dim // 2)}
        assert len(dims[table.cos]) == len(list(out.glob("*.onnx")))
    head_dim = manifest.architecture.head_dim
    if family == "gemma3":  # the sliding layers' local rope and the global one
        assert sorted(tables) == ["model.rotary.cos_cache", "model.rotary.local.cos_cache"]
        assert tables["model.rotary.cos_cache"].theta != tables["model.rotary.local.cos_cache"].theta
    elif family == "phi3":  # longrope over half of each head
        (table,) = tables.values()
        assert table.rotary_dim == head_dim // 2 and table.scaling["rope_type"] == "longrope"
    else:
        (table,) = tables.values()
        assert table.rotary_dim == head_dim and table.scaling is None
    weights = (out / "model.onnx.data").stat().st_size
    table_bytes = sum(t.nbytes for t in tables.values())
    assert (stored / "model.onnx.data").stat().st_size >= weights + table_bytes


def test_the_older_layout_reads_as_before(folders) -> None:
    _, _, stored = folders
    manifest = Manifest.read(stored)
    assert manifest.format_version == FORMAT_VERSION and manifest.rope_tables == ()
    assert all(
        len(set(d)) == 1 and d[0][0] == manifest.context_window for d in _initializer_dims(stored).values()
    )


def test_logits_equal_the_stored_tables_bit_for_bit(folders) -> None:
    _, out, stored = folders
    logits = []
    for folder in (out, stored):
        manifest = Manifest.read(folder)
        runner = StepRunner.open(folder / "model.onnx", manifest, len(PROMPTS), 32, 1)
        first = runner.step([(0, list(p), True) for p in PROMPTS])
        then = runner.step([(len(p), [p[-1]], False) for p in PROMPTS])
        logits.append(first + then)
    for computed, kept in zip(*logits, strict=True):
        np.testing.assert_array_equal(computed, kept)


@pytest.mark.parametrize("mode", ["continuous", "paged"])
def test_greedy_replies_and_logprobs_are_identical(folders, mode: str) -> None:
    _, out, stored = folders
    replies = []
    for folder in (out, stored):
        model = modelverse.load(folder, threads=1, kv_cache_mode=mode)
        try:
            config = GenerationConfig(max_new_tokens=12, ignore_eos=True, logprobs=3)
            # one request at a time: how requests batch together must not depend on thread timing
            replies.append([_reply(model.engine.submit(list(p), config)) for p in PROMPTS])
        finally:
            model.close()
    assert replies[0] == replies[1]
    assert [sum(len(ids) for ids, _ in reply) for reply in replies[0]] == [12] * len(PROMPTS)


def _reply(stream) -> list:
    return [(d.token_ids, [(p.token_id, p.logprob, p.top) for p in d.logprobs]) for d in stream]
