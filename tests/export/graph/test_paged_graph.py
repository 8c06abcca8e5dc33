"""The paged step graph against the continuous one, on tiny random checkpoints (float32).

Both graphs run the same ragged steps (prompt chunks next to decode rows, rows
with and without a past, steps with only decode rows or only chunks); the
paged one reads and writes KV through scattered block tables. Every logits row
must match the continuous graph's (which test_graph_tiny checks against
transformers), and the pool must hold exactly the K/V the continuous cache holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from paged_runner import PagedRunner

from clika_export.api import export
from clika_export.graph.gqa_form import read_continuous
from clika_export.graph.paged_graph import PagedGraphError, derive_paged_graph
from clika_export.verify import StepRunner
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.paged_step_graph import PAGED_STEP_INPUTS


@pytest.fixture(scope="module", params=[("llama", False), ("qwen2", True)])
def folder(request, make_tiny_hf, tmp_path_factory) -> Path:
    family, tied = request.param
    root = tmp_path_factory.mktemp(f"paged-{family}")
    make_tiny_hf(root / "hf", family, tied=tied, layers=2, max_position_embeddings=256)
    return export(root / "hf", root / "model", progress=False)


STEPS_PROMPTS = (5, 19, 1, 30)


def _steps(rng: np.random.Generator) -> list[list[tuple[int, list[int], bool]]]:
    p = [rng.integers(0, 256, n).tolist() for n in STEPS_PROMPTS]
    t = lambda n: rng.integers(0, 256, n).tolist()  # noqa: E731
    return [
        [(0, p[0], True), (0, p[1][:7], False), (0, [], False), (0, p[3][:12], True)],  # only wide rows
        [(5, t(1), False), (7, p[1][7:], True), (0, p[2], False), (12, p[3][12:], False)],  # mixed
        [(6, t(1), False), (19, t(1), False), (1, t(1), False), (30, t(1), False)],  # only decode rows
        [(7, t(1), False), (20, t(10), True), (2, t(1), False), (31, t(1), False)],
        [(8, t(40), False), (30, t(1), False), (3, t(2), True), (32, t(1), False)],
    ]


@pytest.mark.parametrize("block_size", [8, 64])
def test_paged_logits_and_pool_match_the_continuous_graph(
    folder: Path, tmp_path: Path, block_size: int
) -> None:
    manifest = Manifest.read(folder)
    arch = manifest.architecture
    for name in ("model.onnx", "model.onnx.data"):
        (tmp_path / name).hardlink_to(folder / name)
    paged = derive_paged_graph(tmp_path / "model.onnx", tmp_path, arch, block_size=block_size)
    assert set(PAGED_STEP_INPUTS) <= set(paged.inputs)
    continuous = StepRunner.open(folder / "model.onnx", manifest, 4, 128, threads=1)
    runner = PagedRunner(tmp_path / paged.model_file, manifest, block_size, num_blocks=64)
    worst = 0.0
    for rows in _steps(np.random.default_rng(0)):
        expected = continuous.step(rows)
        for b, logits in runner.step(rows).items():
            worst = max(worst, float(np.abs(logits - expected[b]).max() / np.abs(expected[b]).max()))
            assert logits.shape == expected[b].shape
    assert worst < 1e-5
    for layer, pools in enumerate(runner.pools):
        for b, table in runner.tables.items():
            n = runner.lengths[b]
            for pool, cache in zip(pools, continuous.cache[layer], strict=True):
                # The row's blocks in table order, as one [kv_heads, positions, head_dim] sequence.
                held = pool[:, table].reshape(arch.num_kv_heads, -1, arch.head_dim)
                np.testing.assert_allclose(held[:, :n], cache[b][:, :n], atol=1e-5)


def test_the_folder_lists_a_paged_graph_on_the_same_weights(folder: Path) -> None:
    manifest = Manifest.read(folder)
    paged = manifest.graphs["paged"]
    assert paged.kv.block_size == 64 and manifest.graphs["continuous"].kv.block_size is None
    model = onnx.load(str(folder / paged.file), load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"model.onnx.data"}
    ops = {n.op_type for n in model.graph.node}
    assert "GroupQueryAttention" not in ops and {"ScatterND", "RotaryEmbedding"} <= ops


def test_a_graph_without_the_step_pattern_is_refused(folder: Path, tmp_path: Path) -> None:
    manifest = Manifest.read(folder)
    model = read_continuous(folder / "model.onnx")
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    gqa.attribute.append(onnx.helper.make_attribute("smooth_softmax", 1))
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(PagedGraphError, match="smooth_softmax=1 has no paged form"):
        derive_paged_graph(tmp_path / "model.onnx", tmp_path, manifest.architecture)


def test_a_flat_grid_folder_derives_the_same_paged_graph(
    folder: Path, make_flat_grid_folder, tmp_path: Path
) -> None:
    """Continuous graphs exported before token_cell (Reshapes around each attention) derive it too."""
    manifest = Manifest.read(folder)
    flat = make_flat_grid_folder(folder, tmp_path / "flat")
    graphs = []
    for source in (folder, flat):
        out = tmp_path / f"paged-{source.name}"
        out.mkdir()
        derive_paged_graph(source / "model.onnx", out, manifest.architecture, block_size=8)
        graph = onnx.load(str(out / "model_paged.onnx"), load_external_data=False).graph
        graphs.append(graph)
    flat_ops = [n.op_type for n in onnx.load(str(flat / "model.onnx"), load_external_data=False).graph.node]
    assert "Reshape" in flat_ops and "GatherND" not in flat_ops  # the old form really was the source
    new, old = graphs
    assert [(n.op_type, list(n.input), list(n.output)) for n in new.node] == [
        (n.op_type, list(n.input), list(n.output)) for n in old.node
    ]
    assert [v.name for v in new.input] == [v.name for v in old.input]
    assert sorted(t.name for t in new.initializer) == sorted(t.name for t in old.initializer)
