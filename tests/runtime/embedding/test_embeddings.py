"""Embeddings against transformers' hidden states, from tiny random checkpoints exported here (fp32).

The export writes every step graph's ``hidden_states`` output and records the
checkpoint's pooling; ``GenerativeModel.embed`` pools the final hidden states
as that says (mean, or the last token for a sentence-transformers folder whose
Pooling config asks for it), normalized. Each vector must equal the one made
from transformers' ``last_hidden_state`` of the same token ids within 1e-4,
in both KV modes; a folder exported before the output gets it from
``ensure_hidden_states`` and then embeds the same.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from support.lazy import torch
from tokenizers import processors

from clika_export.api import export
from clika_export.checkpoint import CheckpointError
from clika_export.graph.hidden_states import HIDDEN_NORM, ensure_hidden_states
from clika_export.readers.pooling import hf_pooling
from clika_runtime import modelverse
from clika_runtime.contract.manifest import MANIFEST_FILE, Manifest
from clika_runtime.contract.step_graph import HIDDEN_STATES
from clika_runtime.embedding import Embedder, EmbeddingError, EmbeddingUnavailable
from clika_runtime.embedding.embedder import EmbeddingCancelled

TEXTS = ["the cat sat on the mat", "a", "embeddings pool the final hidden states", "0123456789 " * 5]
TOLERANCE = 1e-4
EOS = 257  # the tiny tokenizer's </s>


def reference(model: torch.nn.Module, ids: list[int], pooling: str) -> np.ndarray:
    """transformers' vector: the final-norm hidden states of ``ids``, pooled and normalized."""
    with torch.no_grad():
        hidden = model.model(torch.tensor([ids])).last_hidden_state[0].double().numpy()
    vector = hidden.mean(axis=0) if pooling == "mean" else hidden[-1]
    return vector / np.linalg.norm(vector)


@pytest.fixture(scope="module")
def tiny_hf_model(tiny_llama_hf: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama_hf).float().eval()


@pytest.fixture(scope="module")
def last_token_case(make_tiny_hf, tmp_path_factory):
    """A tiny qwen3 saved as a sentence-transformers folder whose Pooling asks for the last token,
    its tokenizer closing every input with EOS (as Qwen3-Embedding's does)."""
    root = tmp_path_factory.mktemp("last-token")
    hf = root / "hf"
    model = make_tiny_hf(hf, "qwen3", layers=2, seed=3)
    tokenizer = json.loads((hf / "tokenizer.json").read_text())
    from tokenizers import Tokenizer

    inner = Tokenizer.from_str(json.dumps(tokenizer))
    inner.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", EOS)])
    inner.save(str(hf / "tokenizer.json"))
    (hf / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {
                    "idx": 2,
                    "name": "2",
                    "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize",
                },
            ]
        )
    )
    (hf / "1_Pooling").mkdir()
    pooling = {
        "word_embedding_dimension": 64,
        "pooling_mode_lasttoken": True,
        "pooling_mode_mean_tokens": False,
    }
    (hf / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    folder = export(hf, root / "model", progress=False)
    return model, folder


@pytest.mark.parametrize("kv_mode", ["continuous", "paged"])
def test_mean_pooled_vectors_equal_transformers(tiny_llama_model, tiny_hf_model, kv_mode) -> None:
    assert Manifest.read(tiny_llama_model).embedding == {"pooling": "mean"}
    model = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode=kv_mode)
    try:
        vectors = model.embed(TEXTS)
        assert vectors.shape == (len(TEXTS), 64) and vectors.dtype == np.float32
        for text, vector in zip(TEXTS, vectors, strict=True):
            ids = model.embedder.tokens(text)
            assert ids[0] == 256  # the tiny checkpoint asks for BOS
            np.testing.assert_allclose(vector, reference(tiny_hf_model, ids, "mean"), atol=TOLERANCE)
    finally:
        model.close()


@pytest.mark.parametrize("kv_mode", ["continuous", "paged"])
def test_an_int8_kv_load_embeds_near_the_float_cache(tiny_llama_model, kv_mode) -> None:
    float_model = modelverse.load(tiny_llama_model, threads=1)
    int8_model = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode=kv_mode, kv_cache_dtype="int8")
    try:
        exact, rounded = float_model.embed(TEXTS), int8_model.embed(TEXTS)
    finally:
        float_model.close()
        int8_model.close()
    np.testing.assert_allclose(np.linalg.norm(rounded, axis=1), 1.0, atol=1e-6)
    assert (exact * rounded).sum(axis=1).min() > 0.99  # the cache's rounding, no more


def test_last_token_pooling_is_read_from_the_sentence_transformers_config(last_token_case) -> None:
    hf_model, folder = last_token_case
    assert Manifest.read(folder).embedding == {"pooling": "last"}
    model = modelverse.load(folder, threads=1)
    try:
        assert model.embedder.pooling == "last"
        vectors = model.embed(TEXTS)
        for text, vector in zip(TEXTS, vectors, strict=True):
            ids = model.embedder.tokens(text)
            assert ids[-1] == EOS  # the checkpoint tokenizer's post-processor closes the input
            np.testing.assert_allclose(vector, reference(hf_model, ids, "last"), atol=TOLERANCE)
        mean = reference(hf_model, model.embedder.tokens(TEXTS[0]), "mean")
        assert np.abs(vectors[0] - mean).max() > 10 * TOLERANCE  # the pooling made a difference
    finally:
        model.close()


def test_vectors_are_normalized_deterministic_and_batch_independent(tiny_model) -> None:
    batch = tiny_model.embed(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(batch, tiny_model.embed(TEXTS))
    singles = np.stack([tiny_model.embed(text) for text in TEXTS])
    np.testing.assert_allclose(batch, singles, atol=1e-5)
    ids = [tiny_model.embedder.tokens(text) for text in TEXTS]
    np.testing.assert_allclose(tiny_model.embed(ids), batch, atol=1e-5)  # token ids embed as their text


def test_dimensions_cut_then_renormalize(tiny_model) -> None:
    full = tiny_model.embed(TEXTS)
    cut = tiny_model.embed(TEXTS, dimensions=16)
    assert cut.shape == (len(TEXTS), 16)
    expected = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, expected, atol=1e-6)


def test_bad_inputs_are_refused_by_name(tiny_model) -> None:
    window = tiny_model.max_seq
    long_text = "x" * (window + 10)
    cases = [
        ([], "nothing to embed"),
        (["ok", ""], "input 1 is an empty string"),
        ([[]], "input 0 has no tokens"),
        ([long_text], f"context window of {window} tokens"),
        ([[1, 2, 100000]], "token id 100000, outside"),
        ([[1, "2"]], "not a token id"),
        ([3.5], "must be a string or a list of token ids"),
    ]
    for inputs, message in cases:
        with pytest.raises(EmbeddingError, match=message):
            tiny_model.embed(inputs)
    for dimensions in (0, 65):
        with pytest.raises(EmbeddingError, match="dimensions must be between 1 and 64"):
            tiny_model.embed(["ok"], dimensions=dimensions)
    embedded = tiny_model.embedder.embed([long_text], truncate=True)
    assert embedded.token_counts == (window,)


def test_long_inputs_run_in_chunks_to_the_same_vectors(tiny_model) -> None:
    text = "a longer input that runs in several calls " * 2
    whole = tiny_model.embed([text])
    base = tiny_model.embedder
    chunked = Embedder(base.runner, base.tokenizer, base.pooling, base.context_window, chunk_tokens=16)
    assert len(chunked.tokens(text)) > 3 * 16
    np.testing.assert_allclose(chunked.embed([text]).vectors, whole, atol=1e-5)
    calls = []

    def stop_after_two() -> bool:
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(EmbeddingCancelled):
        chunked.embed([text], should_stop=stop_after_two)
    assert len(calls) == 3  # asked before each call: stopped before the second chunk ran


def test_embedding_beside_generation_leaves_both_unchanged(tiny_model) -> None:
    prompt = "hello there"
    alone = tiny_model.generate(prompt, max_new_tokens=24, temperature=0.0)
    vectors = tiny_model.embed(TEXTS)
    replies: list[str] = []
    worker = threading.Thread(
        target=lambda: replies.append(tiny_model.generate(prompt, max_new_tokens=24, temperature=0.0))
    )
    worker.start()
    beside = [tiny_model.embed(TEXTS) for _ in range(4)]  # whatever the interleaving, both stay exact
    worker.join()
    assert replies == [alone]
    for again in beside:
        np.testing.assert_array_equal(again, vectors)


def test_a_folder_exported_before_embeddings_gets_the_output(tiny_llama_model, tmp_path) -> None:
    folder = _without_hidden_states(tiny_llama_model, tmp_path / "older")
    older = modelverse.load(folder, threads=1)
    try:
        with pytest.raises(EmbeddingUnavailable, match="clika pull"):
            older.embed("the cat")
        reply = older.generate("hello", max_new_tokens=8, temperature=0.0)
    finally:
        older.close()
    manifest = ensure_hidden_states(folder)
    assert all(HIDDEN_STATES in spec.outputs for spec in manifest.graphs.values())
    assert manifest.graphs["continuous"].file == "model_h.onnx"
    assert (folder / "model.onnx").is_file()  # the files an older manifest names stay
    assert ensure_hidden_states(folder) == manifest  # once is enough
    upgraded = modelverse.load(folder, threads=1)
    original = modelverse.load(tiny_llama_model, threads=1)
    try:
        np.testing.assert_allclose(upgraded.embed(TEXTS), original.embed(TEXTS), atol=1e-6)
        assert upgraded.generate("hello", max_new_tokens=8, temperature=0.0) == reply
    finally:
        upgraded.close()
        original.close()


def _without_hidden_states(folder: Path, target: Path) -> Path:
    """A copy of ``folder`` as exports before embeddings wrote it: no hidden_states output, no pooling."""
    shutil.copytree(folder, target)
    manifest = Manifest.read(target)
    graphs = {}
    for key, spec in manifest.graphs.items():
        model = onnx.load(str(target / spec.file), load_external_data=False)
        kept = [node for node in model.graph.node if node.name != HIDDEN_NORM]
        del model.graph.node[:]
        model.graph.node.extend(kept)
        outputs = [value for value in model.graph.output if value.name != HIDDEN_STATES]
        del model.graph.output[:]
        model.graph.output.extend(outputs)
        (target / spec.file).write_bytes(model.SerializeToString())
        graphs[key] = dataclasses.replace(spec, outputs=tuple(v.name for v in outputs))
    data = json.loads(dataclasses.replace(manifest, graphs=graphs).to_json())
    del data["embedding"]
    (target / MANIFEST_FILE).write_text(json.dumps(data))
    return target


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"modules.json": "{}"}, "does not hold a list"),
        ({"modules.json": "[{"}, "not valid JSON"),
        ({"modules.json": '[{"type": "sentence_transformers.models.Pooling"}]'}, "has no path"),
        ({"modules.json": '[{"type": "sentence_transformers.models.Pooling", "path": "p"}]'}, "missing"),
        (
            {
                "modules.json": '[{"type": "sentence_transformers.models.Pooling", "path": "p"}]',
                "p/config.json": '{"pooling_mode_max_tokens": true}',
            },
            "pooling_mode_max_tokens is not a pooling",
        ),
        (
            {
                "modules.json": '[{"type": "sentence_transformers.models.Pooling", "path": "../outside"}]',
                "../outside/config.json": '{"pooling_mode_cls_token": true}',
            },
            "links outside",
        ),
    ],
)
def test_malformed_pooling_files_are_refused_by_name(tmp_path, files, message) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    with pytest.raises(CheckpointError, match=message):
        hf_pooling(folder)


def test_pooling_files_name_the_mode(tmp_path) -> None:
    assert hf_pooling(tmp_path) is None  # a plain checkpoint says nothing
    (tmp_path / "modules.json").write_text(
        '[{"type": "sentence_transformers.models.Pooling", "path": "1_P"}]'
    )
    (tmp_path / "1_P").mkdir()
    (tmp_path / "1_P" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert hf_pooling(tmp_path) == "cls"


@pytest.mark.parametrize(("pooling_type", "pooling"), [(3, "last"), (2, "cls"), (1, "mean"), (0, None)])
def test_a_ggufs_pooling_type_names_the_mode(make_tiny_hf, tmp_path, pooling_type, pooling) -> None:
    from family_cases import CASES, build_case, write_family_gguf
    from gguf import GGUFValueType

    from clika_export.readers.gguf import read_gguf

    case = CASES["qwen3"]
    model = build_case(make_tiny_hf, tmp_path / "hf", case, gguf=True)
    metadata = {"qwen3.pooling_type": (pooling_type, GGUFValueType.UINT32)}
    source = write_family_gguf(tmp_path / "tiny.gguf", model, case, metadata=metadata)
    assert read_gguf(source).pooling == pooling


def test_a_gguf_pooling_type_the_runtime_cannot_pool_is_refused(make_tiny_hf, tmp_path) -> None:
    from family_cases import CASES, build_case, write_family_gguf
    from gguf import GGUFValueType

    from clika_export.readers.gguf import read_gguf

    case = CASES["qwen3"]
    model = build_case(make_tiny_hf, tmp_path / "hf", case, gguf=True)
    metadata = {"qwen3.pooling_type": (4, GGUFValueType.UINT32)}  # llama.cpp's "rank": a reranker's head
    source = write_family_gguf(tmp_path / "tiny.gguf", model, case, metadata=metadata)
    with pytest.raises(CheckpointError, match="qwen3.pooling_type is 4"):
        read_gguf(source)


def test_cached_export_gives_an_older_cached_folder_the_output_without_exporting_again(
    tiny_llama_hf, tmp_path
) -> None:
    from clika_export.api import cached_export

    folder = cached_export(tiny_llama_hf, "fp32", progress=False, cache=tmp_path / "cache")
    older = _without_hidden_states(folder, tmp_path / "older")
    shutil.rmtree(folder)
    older.rename(folder)  # the cache now holds an export from before embeddings
    exported_at = Manifest.read(folder).provenance.exported_at
    again = cached_export(tiny_llama_hf, "fp32", progress=False, cache=tmp_path / "cache")
    manifest = Manifest.read(again)
    assert again == folder and manifest.provenance.exported_at == exported_at
    assert manifest.graphs["continuous"].file == "model_h.onnx"  # upgraded: an export writes model.onnx
    assert all(HIDDEN_STATES in spec.outputs for spec in manifest.graphs.values())
    model = modelverse.load(folder, threads=1)
    try:
        assert model.embed(TEXTS).shape == (len(TEXTS), 64)
    finally:
        model.close()
