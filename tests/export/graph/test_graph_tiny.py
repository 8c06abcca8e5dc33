"""The step graph of tiny random checkpoints against transformers (float32).

Each family (llama, qwen2; untied and tied embeddings) is exported and run the
way the engine runs it: ``pack_step`` rows, KV cache bound in place. A ragged
batch goes through prefill, chunked prefill next to decode rows and idle rows,
then decode steps; every logits row asked for must match transformers' logits
at that position within 1e-3 of the logits' scale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from support.lazy import torch

from clika_export.api import export
from clika_export.graph.gqa_form import read_continuous
from clika_export.verify import FP32_TOLERANCE, StepRunner, relative_error
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.step_graph import HIDDEN_STATES, STEP_INPUTS, pack_step


def _reference(model: torch.nn.Module, tokens: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].numpy()


@pytest.fixture(scope="module", params=[("llama", False), ("llama", True), ("qwen2", False), ("qwen2", True)])
def exported(request, make_tiny_hf, tmp_path_factory) -> tuple[torch.nn.Module, Path, Manifest]:
    family, tied = request.param
    root = tmp_path_factory.mktemp(f"{family}-{tied}")
    model = make_tiny_hf(root / "hf", family, tied=tied, layers=3)
    out = export(root / "hf", root / "model", progress=False)
    return model, out, Manifest.read(out)


def _runner(out: Path, manifest: Manifest, slots: int, capacity: int) -> StepRunner:
    return StepRunner.open(out / manifest.graphs["continuous"].file, manifest, slots, capacity)


# Tokens each slot runs per step: n = the next n prompt tokens, "g" = decode its greedy token, 0 = idle.
PLAN = [
    [7, 4, 0, 6],
    [4, "g", 5, 0],
    ["g", "g", 4, "g"],
    ["g", "g", "g", "g"],
    ["g", "g", "g", "g"],
]


def test_prefill_chunked_prefill_and_decode_match_transformers(exported) -> None:
    model, out, manifest = exported
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 259, size=n).tolist() for n in (11, 4, 9, 6)]
    runner = _runner(out, manifest, slots=4, capacity=64)
    seqs, past, greedy = [list(p) for p in prompts], [0] * 4, [None] * 4
    for number, step in enumerate(PLAN):
        rows = []
        for b, work in enumerate(step):
            if work == "g":
                seqs[b].append(greedy[b])
                new = [greedy[b]]
            else:
                new = seqs[b][past[b] : past[b] + work]
            rows.append((past[b], new, number == 0))  # the first step asks for every position
        for b, logits in enumerate(runner.step(rows)):
            new = rows[b][1]
            if not new:
                assert logits.shape[0] == 0
                continue
            ref = _reference(model, seqs[b][: past[b] + len(new)])
            expect = ref[past[b] :] if rows[b][2] else ref[-1:]
            assert logits.shape == expect.shape
            assert relative_error(logits, expect) < FP32_TOLERANCE, (number, b)
            past[b] += len(new)
            greedy[b] = int(np.argmax(logits[-1]))
    assert past == [14, 8, 11, 9]


def test_cache_rows_outside_the_new_tokens_are_untouched(exported) -> None:
    _, out, manifest = exported
    runner = _runner(out, manifest, slots=3, capacity=16)
    for key, value in runner.cache:
        key.fill(7.0)
        value.fill(7.0)
    # slot 0 writes rows 2..4 (past 2, 3 new), slot 1 is idle, slot 2 writes row 0.
    runner.step([(2, [5, 6, 7], False), (0, [], False), (0, [9], False)])
    written = np.zeros((3, 16), dtype=bool)
    written[0, 2:5] = True
    written[2, 0] = True
    for key, value in runner.cache:
        for cache in (key, value):
            changed = (cache != 7.0).any(axis=(1, 3))
            assert np.array_equal(changed, written)


def test_all_position_logits_of_a_long_prompt(exported) -> None:
    model, out, manifest = exported
    tokens = np.random.default_rng(2).integers(0, 259, size=40).tolist()
    runner = _runner(out, manifest, slots=1, capacity=64)
    (logits,) = runner.step([(0, tokens, True)])
    assert relative_error(logits, _reference(model, tokens)) < FP32_TOLERANCE


def test_graph_uses_fused_ops_and_predictable_names(exported) -> None:
    _, out, manifest = exported
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    layers = manifest.architecture.num_layers
    # every layer's attention is the kernel library's op where it computes it (head_dim 16k)
    computable = manifest.architecture.head_dim % 16 == 0
    assert ops.count("StepAttention" if computable else "GroupQueryAttention") == layers
    # per layer: pre-MLP, next/final norm; and the final norm of every token (hidden_states)
    assert ops.count("SkipSimplifiedLayerNormalization") == 2 * layers + 1
    assert ops.count("SimplifiedLayerNormalization") == 1
    assert ops.count("MatMul") == 4 * layers + (0 if manifest.architecture.tie_word_embeddings else 1)
    names = {n.name for n in model.graph.node}
    assert "/model/layers.1/attn/qkv/MatMul" in names
    assert "/model/layers.1/mlp/gate_up/MatMul" in names
    for node in model.graph.node:
        if node.op_type in ("GroupQueryAttention", "StepAttention"):
            assert all(node.output), "attention must always produce its present outputs"
    # Every weight lives in the one external data file.
    locations = {
        entry.value
        for init in model.graph.initializer
        for entry in init.external_data
        if entry.key == "location"
    }
    assert locations == {"model.onnx.data"}
    inits = {init.name: list(init.dims) for init in model.graph.initializer}
    matrices = manifest.precision["matrices"]
    for name, info in matrices.items():
        assert inits[name] == info["shape"], name
        assert set(info["nodes"]) <= names
    qkv = matrices["model.layers.0.attn.qkv.weight"]
    a = manifest.architecture
    assert qkv["shape"] == [a.hidden_size, (a.num_heads + 2 * a.num_kv_heads) * a.head_dim]
    assert qkv["layout"] == "in_out"
    assert qkv["sources"] == [f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv"]
    if a.tie_word_embeddings:
        assert matrices["model.embed_tokens.weight"]["roles"] == ["embed", "lm_head"]
        assert "lm_head.weight" not in inits


def test_graph_inputs_are_the_step_inputs_and_the_cache(exported) -> None:
    _, _, manifest = exported
    graph = manifest.graphs["continuous"]
    layers = range(manifest.architecture.num_layers)
    kv_in = [name.format(layer=i) for i in layers for name in (graph.kv.past_key, graph.kv.past_value)]
    kv_out = [name.format(layer=i) for i in layers for name in (graph.kv.present_key, graph.kv.present_value)]
    assert list(graph.inputs) == [*STEP_INPUTS, *kv_in]
    assert list(graph.outputs) == [graph.logits_output, *kv_out, HIDDEN_STATES]


def test_attention_is_gridded_by_its_index_arrays_alone(exported) -> None:
    """Per layer: Gather(grid_index [B, S]) -> GroupQueryAttention -> GatherND(token_cell [T, 2]), no Reshape
    (StepAttention, where a layer has it, reads token_cell and stands for those three nodes)."""
    _, out, manifest = exported
    raw = onnx.load(str(out / "model.onnx"), load_external_data=False)
    for node in raw.graph.node:
        if node.op_type == "StepAttention":
            assert node.input[1] == "token_cell" and node.output[0] in {
                i for n in raw.graph.node for i in n.input
            }
    model = read_continuous(out / "model.onnx")
    layers = manifest.architecture.num_layers
    producers = {o: n for n in model.graph.node for o in n.output}
    consumers = {i: n for n in model.graph.node for i in n.input}
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == layers
    for node in gqa:
        grid = producers[node.input[0]]
        assert grid.op_type == "Gather" and grid.input[1] == "grid_index"
        ungrid = consumers[node.output[0]]
        assert ungrid.op_type == "GatherND" and list(ungrid.input[1:]) == ["token_cell"]
    ops = [n.op_type for n in raw.graph.node]
    assert "Reshape" not in ops and "Shape" not in ops and "Concat" not in ops
    shapes = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input
    }
    assert shapes["grid_index"] == ["rows", "grid_cols"] and shapes["token_cell"] == ["tokens", 2]


def test_a_flat_grid_graph_fed_the_flat_layout_gives_the_same_logits(
    exported, make_flat_grid_folder, tmp_path, monkeypatch
) -> None:
    """Folders exported before token_cell (flat grid_index, token_index) get the same results
    (bit for bit: both run GroupQueryAttention, the library's attention rewritten back)."""
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    from clika_runtime.contract.model_folder import open_session, session_options
    from clika_runtime.contract.step_graph import GridLayout, grid_layout

    _, out, manifest = exported
    flat_out = make_flat_grid_folder(out, tmp_path / "flat")
    a = manifest.architecture
    steps = [
        [(0, [5, 6, 7, 8], True), (0, [], False), (0, [9, 10], False)],
        [(4, [11], False), (0, [1, 2, 3], True), (2, [12], False)],
        [(5, [13], False), (3, [14], False), (3, [15], False)],
    ]
    results = []
    for folder in (out, flat_out):
        session = open_session(folder / "model.onnx", session_options(1), Manifest.read(folder).rope_tables)
        layout = grid_layout(i.name for i in session.get_inputs())
        cache = {
            f"past_{kind}.{layer}": np.zeros((3, a.num_kv_heads, 16, a.head_dim), np.float32)
            for layer in range(a.num_layers)
            for kind in ("key", "value")
        }
        logits = []
        for rows in steps:
            feeds = {**pack_step(rows, capacity=16).feeds(layout), **cache}
            outputs = session.run(None, feeds)
            logits.append(outputs[0])
            names = [o.name for o in session.get_outputs()]
            cache = {
                n.replace("present", "past"): v
                for n, v in zip(names, outputs, strict=True)
                if n.startswith("present")
            }
        results.append((layout, logits))
    assert [layout for layout, _ in results] == [GridLayout.CELLS, GridLayout.FLAT]
    for new, old in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_array_equal(new, old)


# -- pack_step -------------------------------------------------------------------


def test_pack_step_arrays_for_a_mixed_step() -> None:
    # slot 0: chunk of 3 after 4 cached, all logits; slot 1 idle; slot 2 decode; slot 3 prefill of 2.
    packed = pack_step([(4, [10, 11, 12], True), (9, [], False), (6, [13], False), (0, [14, 15], False)])
    assert packed.width == 3
    assert packed.input_ids.tolist() == [10, 11, 12, 13, 14, 15]
    assert packed.token_cell.tolist() == [[0, 0], [0, 1], [0, 2], [2, 0], [3, 0], [3, 1]]
    assert packed.grid_index.tolist() == [[0, 1, 2], [0, 0, 0], [3, 3, 3], [4, 5, 5]]
    assert packed.query_seqlens.tolist() == [3, 0, 1, 2]
    assert packed.seqlens_k.tolist() == [6, 0, 6, 1]
    assert int(packed.total_sequence_length) == 7
    assert packed.logits_index.tolist() == [0, 1, 2, 3, 5]
    assert packed.logits_rows == (slice(0, 3), slice(3, 3), slice(3, 4), slice(4, 5))
    assert {k: v.dtype.name for k, v in packed.feeds().items()} == {
        "input_ids": "int64",
        "grid_index": "int64",
        "token_cell": "int64",
        "query_seqlens": "int32",
        "seqlens_k": "int32",
        "total_sequence_length": "int32",
        "logits_index": "int64",
    }
    assert packed.total_sequence_length.shape == ()


def test_pack_step_refuses_what_the_graph_cannot_run() -> None:
    with pytest.raises(ValueError, match="all rows are idle"):
        pack_step([(3, [], False)])
    with pytest.raises(ValueError, match="KV capacity 16"):
        pack_step([(15, [1], False), (0, [1, 2], False)], capacity=16)  # 15 + width 2 > 16
    pack_step([(15, [1], False), (16, [], False)], capacity=16)  # a full idle neighbour is fine
    with pytest.raises(ValueError, match="row 1 holds 1 cached tokens"):
        pack_step([(0, list(range(16)), False), (0, [], False)], capacity=16)  # idle rows count as 1
    with pytest.raises(ValueError, match="context window 8"):
        pack_step([(6, [1, 2, 3], False)], context_window=8)
    with pytest.raises(ValueError, match="negative past_len"):
        pack_step([(-1, [1], False)])


def test_numpy_reference_matches_transformers(make_tiny_hf, tmp_path) -> None:
    from clika_export.readers.hf import read_hf
    from clika_export.verify import reference_logits

    model = make_tiny_hf(tmp_path / "hf", "qwen2", tied=True)
    sequences = [[5, 9, 200, 31, 7], [1, 2]]
    for tokens, logits in zip(sequences, reference_logits(read_hf(tmp_path / "hf"), sequences), strict=True):
        assert relative_error(logits, _reference(model, tokens)) < 1e-5


def test_the_widest_steps_pack_step_accepts_run(exported) -> None:
    _, out, manifest = exported
    runner = _runner(out, manifest, slots=2, capacity=16)
    runner.step([(0, list(range(15)), False), (0, [], False)])  # 1 + 15 fits next to an idle row
    runner.step([(15, [1], False), (0, [7], False)])  # a row one token short of full decodes
    alone = _runner(out, manifest, slots=1, capacity=16)
    (logits,) = alone.step([(0, list(range(16)), True)])  # a whole-capacity prefill alone
    assert logits.shape == (16, manifest.architecture.vocab_size)
