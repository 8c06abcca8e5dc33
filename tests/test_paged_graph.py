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
import onnxruntime as ort
import pytest

from clika_export.api import export
from clika_export.graph.paged_graph import PagedGraphError, derive_paged_graph
from clika_export.verify import StepRunner
from clika_runtime.manifest import Manifest
from clika_runtime.model_folder import session_options
from clika_runtime.paged_step_graph import PAGED_STEP_INPUTS, PagedRow, pack_paged_step


@pytest.fixture(scope="module", params=[("llama", False), ("qwen2", True)])
def folder(request, make_tiny_hf, tmp_path_factory) -> Path:
    family, tied = request.param
    root = tmp_path_factory.mktemp(f"paged-{family}")
    make_tiny_hf(root / "hf", family, tied=tied, layers=2, max_position_embeddings=256)
    return export(root / "hf", root / "model", progress=False)


class PagedRunner:
    """Runs a paged graph over pools of ``num_blocks`` blocks bound in place; tables grow from a shuffled free list."""

    def __init__(
        self, model: Path, manifest: Manifest, block_size: int, num_blocks: int, seed: int = 0
    ) -> None:
        arch = manifest.architecture
        self.session = ort.InferenceSession(
            str(model), session_options(1), providers=["CPUExecutionProvider"]
        )
        self.block_size = block_size
        shape = (arch.num_kv_heads, num_blocks, block_size, arch.head_dim)
        self.pools = [
            (np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for _ in range(arch.num_layers)
        ]
        self.binding = self.session.io_binding()
        self.binding.bind_output("logits")
        self._values = []
        for layer, (key, value) in enumerate(self.pools):
            for kind, array in (("key", key), ("value", value)):
                shared = ort.OrtValue.ortvalue_from_numpy(array)
                self.binding.bind_ortvalue_input(f"past_{kind}.{layer}", shared)
                self.binding.bind_ortvalue_output(f"present_{kind}.{layer}", shared)
                self._values.append(shared)
        self.free = [int(b) for b in np.random.default_rng(seed).permutation(num_blocks)]
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def step(self, rows: list[tuple[int, list[int], bool]]) -> dict[int, np.ndarray]:
        """``(past_len, new tokens, want all logits)`` per sequence index; idle rows (no tokens) are left out."""
        active = [(b, row) for b, row in enumerate(rows) if row[1]]
        paged = []
        for b, (past, new, want_all) in active:
            table = self.tables.setdefault(b, [])
            while len(table) * self.block_size < past + len(new):
                table.append(self.free.pop())
            paged.append(PagedRow(past, new, list(table), want_all))
            self.lengths[b] = past + len(new)
        packed = pack_paged_step(paged, block_size=self.block_size)
        for name, array in packed.feeds().items():
            self.binding.bind_cpu_input(name, array)
        self.binding.bind_output("logits")
        self.session.run_with_iobinding(self.binding)
        logits = self.binding.get_outputs()[0].numpy()
        return {b: logits[s] for (b, _), s in zip(active, packed.logits_rows, strict=True)}


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
    continuous = StepRunner.open(folder / "model.onnx", arch, 4, 128, threads=1)
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
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
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
