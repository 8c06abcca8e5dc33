"""The fallback's rewritten graphs kept between loads: the same graph and arrays as a fresh
rewrite, a new entry when the folder changes, and a broken or unwritable cache never
breaking a load."""

from __future__ import annotations

import os
import shutil

import numpy as np
import onnx
import pytest
from gguf_blocks import gguf_values, random_blocks
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import OPSETS, BlocksOnly

from clika_export.checkpoint import RawBlocks
from clika_quant.quantize import quantize_proto
from clika_runtime.kernels.fallback_budget import BUDGET_ENV, DEFAULT_BUDGET, budget_bytes, mark_used, prune
from clika_runtime.kernels.fallback_cache import cache_key, cached_rewrite, fallback_dir
from clika_runtime.kernels.fallback_graph import rewrite

ROWS, COLS = 48, 512


@pytest.fixture(scope="module")
def gguf_graph() -> bytes:
    """Two Q4_K matrices reading one x, exported as GgufMatMul nodes."""
    data = {n: random_blocks("Q4_K", ROWS, COLS, seed=i) for i, n in enumerate(("w0", "w1"))}
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", n], [f"Y{n}"], name=f"/l{n[1]}/proj/MatMul") for n in data],
        "t",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", COLS])],
        [helper.make_tensor_value_info(f"Y{n}", TensorProto.FLOAT, ["M", ROWS]) for n in data],
        [numpy_helper.from_array(gguf_values("Q4_K", d, ROWS, COLS).T.copy(), n) for n, d in data.items()],
    )
    checkpoint = BlocksOnly({n: RawBlocks("Q4_K", d, (ROWS, COLS)) for n, d in data.items()})
    model = helper.make_model(graph, opset_imports=OPSETS)
    quantized, _ = quantize_proto(model, checkpoint, "int4", options={"gguf_matmul": True})
    return quantized.SerializeToString()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CLIKA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def same_rewrite(got, expected) -> bool:
    return (
        got.model == expected.model
        and got.nodes == expected.nodes
        and got.supplied.keys() == expected.supplied.keys()
        and all(
            got.supplied[n].dtype == a.dtype and np.array_equal(got.supplied[n], a)
            for n, a in expected.supplied.items()
        )
    )


def test_a_second_load_reads_the_first_loads_rewrite_mapped_from_the_cache(gguf_graph, cache):
    fresh = rewrite(gguf_graph, None)
    first = cached_rewrite(gguf_graph, None)
    entry = fallback_dir() / cache_key(gguf_graph, None)
    assert sorted(p.name for p in entry.iterdir()) == ["index.json", "model.onnx", "weights.bin"]
    second = cached_rewrite(gguf_graph, None)
    assert same_rewrite(first, fresh) and same_rewrite(second, fresh)
    assert all(isinstance(a.base, np.memmap) or isinstance(a, np.memmap) for a in second.supplied.values())
    assert all(not a.flags.writeable for a in second.supplied.values())


def test_a_changed_data_file_gets_its_own_entry(gguf_graph, cache, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    named = onnx.ModelProto()
    named.ParseFromString(gguf_graph)
    named.doc_string = "weights in model.onnx.data"  # the graph names the folder's data file
    data = named.SerializeToString()
    (folder / "model.onnx.data").write_bytes(b"x" * 10)
    before = cache_key(data, folder)
    os.utime(folder / "model.onnx.data", ns=(1, 1))
    touched = cache_key(data, folder)
    assert touched != before
    (folder / "unrelated.txt").write_text("not named by the graph")
    assert cache_key(data, folder) == touched


@pytest.mark.parametrize("damage", ["index", "truncated weights"])
def test_a_broken_entry_is_rewritten_not_served(gguf_graph, cache, damage):
    cached_rewrite(gguf_graph, None)
    entry = fallback_dir() / cache_key(gguf_graph, None)
    if damage == "index":
        (entry / "index.json").write_text("{not json")
    else:
        with (entry / "weights.bin").open("r+b") as f:
            f.truncate(100)
    assert same_rewrite(cached_rewrite(gguf_graph, None), rewrite(gguf_graph, None))


def test_an_unwritable_cache_leaves_the_load_working(gguf_graph, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache cannot be made under a file")
    monkeypatch.setenv("CLIKA_CACHE", str(blocker / "cache"))
    with caplog.at_level("WARNING", logger="clika_runtime.kernels"):
        got = cached_rewrite(gguf_graph, None)
    assert same_rewrite(got, rewrite(gguf_graph, None))
    assert "fallback graph not cached" in caplog.text


def fake_entry(root, name: str, size: int, used: float):
    """A finished cache entry of ``size`` bytes, last used at ``used`` (seconds since the epoch)."""
    entry = root / name
    entry.mkdir(parents=True)
    (entry / "weights.bin").write_bytes(b"\0" * size)
    (entry / "index.json").write_text("{}")
    os.utime(entry / "index.json", (used, used))
    return entry


def test_the_least_recently_used_entries_go_until_the_rest_fit(tmp_path):
    old, mid, new = (fake_entry(tmp_path, n, 1000, t) for n, t in (("a", 100), ("b", 200), ("c", 300)))
    (tmp_path / ".partial-x").mkdir()  # another process writing an entry: never counted or removed
    removed = prune(tmp_path, keep=new, budget=2100)
    assert removed == [old] and not old.exists() and mid.exists() and new.exists()
    assert (tmp_path / ".partial-x").exists()


def test_the_entry_just_written_stays_even_past_the_budget(tmp_path):
    entries = [fake_entry(tmp_path, n, 1000, t) for n, t in (("a", 300), ("b", 200))]
    assert prune(tmp_path, keep=entries[0], budget=10) == [entries[1]]
    assert entries[0].exists()


def test_a_read_makes_an_entry_recent_and_a_new_entry_prunes(gguf_graph, cache, monkeypatch):
    entry = fallback_dir() / cache_key(gguf_graph, None)
    cached_rewrite(gguf_graph, None)
    size = sum(path.stat().st_size for path in entry.iterdir())
    shutil.rmtree(entry)
    stale = fake_entry(fallback_dir(), "stale", 1000, 100)
    kept = fake_entry(fallback_dir(), "kept", 1000, 100)
    mark_used(kept)  # a read, as cached_rewrite does on a hit
    monkeypatch.setenv(BUDGET_ENV, str(size + 1500))  # room for the new entry and one other
    cached_rewrite(gguf_graph, None)
    assert not stale.exists() and kept.exists() and (entry / "index.json").exists()


def test_the_budget_comes_from_the_environment(monkeypatch, caplog):
    monkeypatch.setenv(BUDGET_ENV, "12345")
    assert budget_bytes() == 12345
    monkeypatch.setenv(BUDGET_ENV, "lots")
    assert budget_bytes() == DEFAULT_BUDGET and BUDGET_ENV in caplog.text
