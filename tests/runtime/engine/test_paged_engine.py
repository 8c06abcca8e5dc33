"""The paged KV mode through the public API on a tiny random llama: budget, residency, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest
from clika_runtime.engine.config import GenerationConfig

CONTEXT = 512


@pytest.fixture(scope="module")
def tiny(make_tiny_hf, tiny_zoo) -> Path:
    _, hf = tiny_zoo.checkpoint(make_tiny_hf, "llama", layers=2, max_position_embeddings=CONTEXT)
    return tiny_zoo.export(hf)


def block_bytes(folder: Path) -> int:
    manifest = Manifest.read(folder)
    a = manifest.architecture
    return 2 * a.num_layers * a.num_kv_heads * manifest.graphs["paged"].kv.block_size * a.head_dim * 4


def test_kv_memory_grows_with_the_tokens_held_under_the_budget(tiny: Path):
    budget = 40 * block_bytes(tiny)
    model = modelverse.load(tiny, threads=1, kv_cache_mode="paged", kv_cache_bytes=budget, max_active=4)
    assert model.kv_cache_mode == "paged" and model.residency["pipeline"]["kv_cache_bytes"] == 0
    weights = (tiny / "model.onnx.data").stat().st_size
    assert model.residency["cpu"]["weights_bytes"] > weights  # the weights file the paged graph reads
    rng = np.random.default_rng(0)
    replies = model.generate_batch(
        [" ".join(map(str, rng.integers(0, 9, 40))) for _ in range(4)], max_new_tokens=5
    )
    assert len(replies) == 4
    pipeline = model.residency["pipeline"]
    assert pipeline["kv_cache_mode"] == "paged" and pipeline["kv_cache_budget_bytes"] == budget
    assert pipeline["block_size"] == 64 and 0 < pipeline["kv_cache_bytes"] <= budget
    assert pipeline["blocks_owned"] == 0 and pipeline["blocks_cached"] > 0  # finished: kept as a prefix cache
    assert pipeline["kv_bytes_cached"] == pipeline["blocks_cached"] * block_bytes(tiny)
    assert pipeline["blocks"] == 16  # the first allocation; it doubles only when more is held
    # Longer prompts, four at a time, hold more: the pools grow, up to the budget and no further.
    model.generate_batch([" ".join(map(str, rng.integers(0, 9, 150))) for _ in range(8)], max_new_tokens=5)
    pipeline = model.residency["pipeline"]
    assert pipeline["blocks"] == 40 and pipeline["kv_cache_bytes"] == budget
    model.engine.check_integrity()
    model.close()


def test_a_prompt_larger_than_the_budget_is_refused_at_submit(tiny: Path):
    model = modelverse.load(tiny, threads=1, kv_cache_mode="paged", kv_cache_bytes=2 * block_bytes(tiny))
    with pytest.raises(ValueError, match="the KV cache holds at most 128 tokens"):
        model.engine.submit([1] * 128, GenerationConfig())
    stream = model.engine.submit([1] * 127, GenerationConfig(max_new_tokens=4, ignore_eos=True))
    ids = [t for d in stream for t in d.token_ids]
    assert len(ids) == 2  # the prompt fits; its reply ends when position 127, the last, is computed
    model.close()


def test_a_reply_that_outgrows_the_budget_ends_with_length(tiny: Path):
    model = modelverse.load(tiny, threads=1, kv_cache_mode="paged", kv_cache_bytes=2 * block_bytes(tiny))
    stream = model.engine.submit(list(range(60)), GenerationConfig(max_new_tokens=200, ignore_eos=True))
    ids = [t for d in stream for t in d.token_ids]
    report = stream.report
    assert report.finish_reason == "length" and "KV cache budget (128 tokens) is full" in report.error
    assert len(ids) == 128 + 1 - 60  # 128 positions computed, the last sampled token never is
    model.engine.check_integrity()
    model.close()


def test_a_folder_without_a_paged_graph_is_refused_by_name(tiny: Path, tmp_path: Path):
    folder = tmp_path / "old"
    folder.mkdir()
    for item in tiny.iterdir():
        if item.name != "model_paged.onnx":
            (folder / item.name).hardlink_to(item)
    data = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").unlink()  # a hard link: never write through it into the fixture's folder
    del data["graphs"]["paged"]
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no 'paged' graph"):
        modelverse.load(folder, kv_cache_mode="paged")
