"""The int8 KV cache: its calibrated twin graph, loading it, and what it costs in accuracy.

A tiny random llama is exported through the real pipeline (which calibrates
the int8 graph); its float-cache and int8-cache graphs must agree closely on
the same tokens, batch the same way, and refuse what they cannot do by name.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from clika_cli.main import clika
from clika_export.api import cached_export
from clika_export.graph.kv_int8 import (
    CALIBRATION_REVISION,
    INT8_KV_MODEL_FILE,
    PRECISION_KEY,
    ensure_int8_kv_graph,
)
from clika_export.pull.fetch import fetch_data
from clika_quant.quality import SequenceRunner, perplexity, text_tokens, wiki_texts
from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest, ManifestError, graph_key
from clika_runtime.contract.model_folder import open_model_folder

PROMPT = "the int8 cache keeps a quarter of the bytes"


def runner(folder, kv_dtype: str) -> SequenceRunner:
    return SequenceRunner(open_model_folder(folder, kv_dtype=kv_dtype, threads=1), capacity=128)


def test_the_export_writes_a_calibrated_int8_twin(tiny_llama_model):
    manifest = Manifest.read(tiny_llama_model)
    float_graph, int8_graph = manifest.graphs["continuous"], manifest.graphs[graph_key("continuous", "int8")]
    assert int8_graph.file == INT8_KV_MODEL_FILE and int8_graph.kv.dtype == "int8"
    assert int8_graph.inputs == float_graph.inputs and int8_graph.outputs == float_graph.outputs
    paged = manifest.graphs[graph_key("paged", "int8")]
    assert paged.kv.dtype == "int8" and paged.inputs == manifest.graphs["paged"].inputs
    graph = onnx.load(str(tiny_llama_model / INT8_KV_MODEL_FILE), load_external_data=False).graph
    arch = manifest.architecture
    scales = [i for i in graph.initializer if i.name.startswith("kv_scale.")]
    assert len(scales) == 2 * arch.num_layers
    for scale in scales:
        values = onnx.numpy_helper.to_array(scale)
        assert values.shape == (1, arch.num_kv_heads, 1, arch.head_dim) and np.all(values > 0)
    # The twin reads the float graph's weights file: no second copy of the weights.
    external = {
        entry.value
        for init in graph.initializer
        if init.data_location == onnx.TensorProto.EXTERNAL
        for entry in init.external_data
        if entry.key == "location"
    }
    assert external == {f"{float_graph.file}.data"}
    assert (tiny_llama_model / INT8_KV_MODEL_FILE).stat().st_size < 1_000_000


def test_int8_cache_logits_follow_the_float_cache(tiny_llama_model, tiny_model):
    ids = tiny_model.tokenizer.encode(PROMPT)[:40]
    exact, quantized = runner(tiny_llama_model, "float32"), runner(tiny_llama_model, "int8")
    prompt, follow = ids[:-4], ids[-4:]
    pairs = [(exact.step(prompt, all_logits=True), quantized.step(prompt, all_logits=True))]
    pairs += [(exact.step([t]), quantized.step([t])) for t in follow]  # decode steps read the int8 cache
    for want, got in pairs:
        spread = float(want.max() - want.min())
        assert np.abs(got - want).max() < 0.05 * spread
        assert np.mean(got.argmax(-1) == want.argmax(-1)) >= 0.9


@pytest.mark.parametrize("mode", ["continuous", "paged"])
def test_int8_cache_batches_like_one_request_alone(tiny_llama_model, mode):
    model = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode=mode, kv_cache_dtype="int8")
    prompts = [f"{PROMPT} {i}" for i in range(4)]
    greedy = {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True}
    alone = [model.generate(p, **greedy) for p in prompts]
    assert model.generate_batch(prompts, **greedy) == alone
    assert model.kv_cache_dtype == "int8"
    model.engine.check_integrity()
    pipeline = model.residency["pipeline"]
    model.close()
    floats = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode=mode)
    floats.generate_batch(prompts, **greedy)
    float_pipeline = floats.residency["pipeline"]
    floats.close()
    assert pipeline["kv_cache_dtype"] == "int8" and pipeline["slots"] == float_pipeline["slots"]
    assert pipeline["kv_cache_bytes"] * 4 == float_pipeline["kv_cache_bytes"]


def test_the_paged_int8_cache_follows_the_float_one(tiny_llama_model):
    """Both paged graphs on the same prompts: the int8 pools change the first logits but little."""
    logits = {}
    for dtype in ("float32", "int8"):
        model = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode="paged", kv_cache_dtype=dtype)
        seen: list[np.ndarray] = []
        sample = model.engine.sampler.sample

        def keep(rows, *args, _seen=seen, _sample=sample, **kwargs):
            _seen.append(np.array(rows[0], copy=True))
            return _sample(rows, *args, **kwargs)

        model.engine.sampler.sample = keep
        model.generate(PROMPT, max_new_tokens=1, ignore_eos=True)
        logits[dtype] = seen[0]
        model.close()
    want, got = logits["float32"], logits["int8"]
    assert np.abs(got - want).max() < 0.05 * float(want.max() - want.min()) and got.argmax() == want.argmax()


def test_what_int8_cannot_do_is_refused_by_name(tiny_llama_model, tmp_path):
    with pytest.raises(ManifestError, match="kv_cache_dtype must be one of"):
        modelverse.load(tiny_llama_model, kv_cache_dtype="fp8")
    older = shutil.copytree(tiny_llama_model, tmp_path / "older")
    data = json.loads((older / "manifest.json").read_text())
    del data["graphs"][graph_key("continuous", "int8")]
    (older / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="no int8 KV cache graph for 'continuous' .*export it again"):
        modelverse.load(older, kv_cache_dtype="int8")
    # A cached folder from before gets its twins when next used, the rest untouched;
    # one calibrated by an older revision gets them made again.
    graphs = ensure_int8_kv_graph(older).graphs
    assert graph_key("continuous", "int8") in graphs and graph_key("paged", "int8") in graphs
    data = json.loads((older / "manifest.json").read_text())
    assert data["precision"][PRECISION_KEY]["revision"] == CALIBRATION_REVISION
    data["precision"][PRECISION_KEY]["revision"] = CALIBRATION_REVISION - 1
    (older / "manifest.json").write_text(json.dumps(data))
    assert ensure_int8_kv_graph(older).precision[PRECISION_KEY]["revision"] == CALIBRATION_REVISION
    model = modelverse.load(older, threads=1, kv_cache_dtype="int8")
    assert model.generate(PROMPT, max_new_tokens=3, ignore_eos=True)
    model.close()


def test_cached_exports_gain_the_twin_and_the_cli_loads_it(tiny_gguf, tmp_cache):
    gguf = str(tiny_gguf("tiny.gguf").path)
    assert (
        graph_key("continuous", "int8") in Manifest.read(cached_export(gguf, "int4", progress=False)).graphs
    )
    args = ["generate", gguf, "hello", "--max-tokens", "4", "--temperature", "0", "-q"]
    floats = CliRunner().invoke(clika, args, catch_exceptions=False)
    int8 = CliRunner().invoke(clika, [*args, "--kv-cache-dtype", "int8"], catch_exceptions=False)
    assert floats.exit_code == 0 and int8.exit_code == 0 and int8.stdout.strip()
    paged = CliRunner().invoke(clika, [*args, "--kv-cache-dtype", "int8", "--kv-cache-mode", "paged"])
    assert paged.exit_code == 0 and paged.stdout.strip()
    wrong = CliRunner().invoke(clika, [*args, "--kv-cache-dtype", "int4"])
    assert wrong.exit_code == 2 and "'int4' is not one of 'float32', 'int8'" in wrong.output


@pytest.mark.slow
def test_smollm2_int8_cache_keeps_perplexity_within_one_percent(smollm2_gguf):
    folder = cached_export(smollm2_gguf, "int4", progress=False)
    texts = wiki_texts(fetch_data("wiki-summaries", progress=False), 40)
    scores = {}
    for dtype in ("float32", "int8"):
        run = SequenceRunner(open_model_folder(folder, kv_dtype=dtype), capacity=512)
        scores[dtype] = perplexity(run, text_tokens(run, texts, 1024), 512).perplexity
    assert abs(scores["int8"] / scores["float32"] - 1) < 0.01, scores
