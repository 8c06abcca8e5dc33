"""Architectures no native family builds, exported through optimum's ONNX exporter and run by the engine.

Tiny random gpt2 and gpt_neox checkpoints (built here with transformers) go
through ``clika-export`` (which fetches the pinned optimum toolchain into the
cache once); the engine's greedy replies on a batch of two prompts of
different lengths must equal transformers', int8 and int4 must stay within a
stated error of the fp32 folder, and the manifest says which builder made it.
An architecture neither path builds is refused naming it and what is built.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import build_tiny_hf
from support.lazy import torch

from clika_cli.export_command import export_command
from clika_export.api import cached_export
from clika_export.pull.fetch import cache_root
from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.engine.config import GenerationConfig

ARCHITECTURES = ("gpt2", "gpt_neox")
LENGTHS = (11, 4)
NEW_TOKENS = 12
# Quantized folders against the fp32 folder, over the logits of one 24-token prompt: the worst
# position's relative error (max |diff| / max |fp32|) and the share of positions whose top token
# agrees. Measured here on these tiny models: int8 0.014-0.022 and 96-100%, int4 0.12-0.19 and
# 67-75% (hidden 64: two 4-bit blocks per row; trained models are far less fragile).
BOUNDS = {"int8": (0.1, 0.9), "int4": (0.4, 0.5)}


def tiny_checkpoint(folder: Path, model_type: str) -> torch.nn.Module:
    """A tiny random checkpoint of ``model_type``; GPT-2's layer norms (``ln_*``) centred on 1 too."""
    model = build_tiny_hf(folder, model_type, layers=2)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".ln_" in name and name.endswith(".weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module", params=ARCHITECTURES)
def checkpoint(request, tmp_path_factory) -> tuple[str, torch.nn.Module, Path]:
    folder = tmp_path_factory.mktemp(request.param) / "hf"
    return request.param, tiny_checkpoint(folder, request.param), folder


def exported(folder: Path, precision: str, builder: str = "auto") -> Path:
    """The export of ``folder``, cached by the checkpoint's sha256 and the options.

    In the cache's ``tests`` corner, not its ``exports`` (what ``clika list`` shows): the checkpoints
    are seeded, so the same keys come back every run and optimum runs once per machine, not per run.
    """
    return cached_export(folder, precision, progress=False, builder=builder, cache=cache_root() / "tests")


def reference_greedy(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            tokens.append(int(torch.argmax(model(torch.tensor([tokens])).logits[0, -1])))
    return tokens[len(prompt) :]


def prompts() -> list[list[int]]:
    rng = np.random.default_rng(3)
    return [rng.integers(0, 256, size=n).tolist() for n in LENGTHS]


def engine_greedy(folder: Path, batch: list[list[int]], **load_options) -> list[list[int]]:
    """Greedy replies of the batch, submitted together to one engine (both rows active at once)."""
    model = modelverse.load(folder, threads=1, max_active=len(batch), **load_options)
    try:
        config = GenerationConfig(max_new_tokens=NEW_TOKENS, temperature=0.0)
        streams = [model.engine.submit(p, config) for p in batch]
        return [[t for delta in stream for t in delta.token_ids] for stream in streams]
    finally:
        model.close()


def test_the_fp32_export_replies_as_transformers_on_a_ragged_batch(checkpoint) -> None:
    name, model, hf = checkpoint
    folder = exported(hf, "fp32")
    manifest = Manifest.read(folder)
    assert manifest.graphs["continuous"].builder == "optimum"
    assert manifest.architecture.family == name
    assert set(manifest.graphs) == {"continuous"}
    batch = prompts()
    expected = [reference_greedy(model, p, NEW_TOKENS) for p in batch]
    assert len({tuple(e) for e in expected}) == 2 and all(len(set(e)) > 1 for e in expected)
    assert engine_greedy(folder, batch) == expected


def test_prompt_lookup_drafts_keep_the_greedy_reply(checkpoint) -> None:
    """Draft rows run alone with every logit; what the model confirms is the plain greedy reply."""
    _, model, hf = checkpoint
    prompt = prompts()[0] * 3  # repeats, so the lookup finds drafts
    loaded = modelverse.load(exported(hf, "fp32"), threads=1)
    try:
        config = GenerationConfig(max_new_tokens=NEW_TOKENS, temperature=0.0, prompt_lookup_num_tokens=4)
        stream = loaded.engine.submit(prompt, config)
        reply = [t for d in stream for t in d.token_ids]
    finally:
        loaded.close()
    assert stream.report.draft_tokens > 0
    assert reply == reference_greedy(model, prompt, NEW_TOKENS)


def test_a_conversation_turn_reuses_the_previous_turns_kv(checkpoint) -> None:
    """The slot's KV is the continuous cache's: a next turn that extends the last one reuses it."""
    _, model, hf = checkpoint
    first = prompts()[0]
    loaded = modelverse.load(exported(hf, "fp32"), threads=1)
    try:
        config = GenerationConfig(max_new_tokens=4, temperature=0.0)
        reply = [t for d in loaded.engine.submit(first, config) for t in d.token_ids]
        follow = [*first, *reply, 5, 6, 7]
        stream = loaded.engine.submit(follow, config)
        again = [t for d in stream for t in d.token_ids]
    finally:
        loaded.close()
    assert stream.report.cached_tokens >= len(first)
    assert again == reference_greedy(model, follow, 4)


def test_generate_and_chat_run_on_an_optimum_folder(checkpoint) -> None:
    """The public API over the fallback: generate's text and a chat reply are transformers' greedy."""
    _, model, hf = checkpoint
    loaded = modelverse.load(exported(hf, "fp32"), threads=1)
    try:
        settings = dict(max_new_tokens=6, temperature=0.0, ignore_eos=True)
        messages = [{"role": "user", "content": "Hello there"}]
        ids = loaded.tokenizer.encode(loaded.render(messages))  # what the chat template makes of it
        expected = loaded.tokenizer.decode(reference_greedy(model, ids, 6))
        assert loaded.generate("Hello there", **settings) == expected
        assert loaded.chat(messages, **settings) == expected
    finally:
        loaded.close()


def test_the_server_serves_an_optimum_folder(checkpoint) -> None:
    """The real OpenAI client against the server on 127.0.0.1: whole and streamed replies are the
    model's own greedy reply."""
    import openai

    from clika_runtime.server import start_server

    loaded = modelverse.load(exported(checkpoint[2], "fp32"), threads=1)
    messages = [{"role": "user", "content": "hello"}]
    try:
        expected = loaded.generate(messages=messages, max_new_tokens=8, temperature=0.0)
        with start_server(loaded, model_id="tiny", max_active=2) as running:
            client = openai.OpenAI(base_url=running.url, api_key="none", max_retries=0, timeout=60)
            asked = dict(model="tiny", messages=messages, max_tokens=8, temperature=0)
            whole = client.chat.completions.create(**asked)
            chunks = list(client.chat.completions.create(**asked, stream=True))
    finally:
        loaded.close()
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content == streamed == expected


def _logits(folder: Path, tokens: list[int]) -> np.ndarray:
    """Every position's logits of ``tokens`` through the folder's graph (one call, no past)."""
    import onnxruntime as ort

    manifest = Manifest.read(folder)
    graph = manifest.graphs["continuous"]
    session = ort.InferenceSession(str(folder / graph.file), providers=["CPUExecutionProvider"])
    a = manifest.architecture
    feeds = {
        "input_ids": np.asarray([tokens], np.int64),
        "attention_mask": np.ones((1, len(tokens)), np.int64),
    }
    if "position_ids" in graph.inputs:
        feeds["position_ids"] = np.arange(len(tokens), dtype=np.int64)[None]
    empty = np.zeros((1, a.num_kv_heads, 0, a.head_dim), np.float32)
    for layer in range(a.num_layers):
        feeds[graph.kv.past_key.format(layer=layer)] = empty
        feeds[graph.kv.past_value.format(layer=layer)] = empty
    return session.run([graph.logits_output], feeds)[0][0]


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_quantized_exports_stay_near_the_fp32_one(checkpoint, precision) -> None:
    _, _, hf = checkpoint
    fp32, quantized = exported(hf, "fp32"), exported(hf, precision)
    record = Manifest.read(quantized).precision
    assert record["weights"] == precision
    assert any("MatMulNBits" in entry.get("ops", []) for entry in record["matrices"].values())
    tokens = np.random.default_rng(5).integers(0, 256, size=24).tolist()
    want, got = _logits(fp32, tokens), _logits(quantized, tokens)
    error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    agree = float(np.mean(np.argmax(got, -1) == np.argmax(want, -1)))
    most_error, least_agreement = BOUNDS[precision]
    assert error < most_error and agree >= least_agreement, (precision, error, agree)
    replies = engine_greedy(quantized, prompts())
    assert [len(r) for r in replies] == [NEW_TOKENS] * 2


def test_a_native_family_records_its_builder_and_optimum_can_be_asked_for(tmp_path) -> None:
    """llama has a native family (builder "native"); ``builder="optimum"`` builds it through optimum,
    and both folders give transformers' greedy reply."""
    model = build_tiny_hf(tmp_path / "hf", "llama")
    native, fallback = exported(tmp_path / "hf", "fp32"), exported(tmp_path / "hf", "fp32", "optimum")
    assert Manifest.read(native).graphs["continuous"].builder == "native"
    assert Manifest.read(fallback).graphs["continuous"].builder == "optimum"
    batch = prompts()
    expected = [reference_greedy(model, p, NEW_TOKENS) for p in batch]
    assert engine_greedy(native, batch) == expected == engine_greedy(fallback, batch)


def test_clika_show_names_the_builder(checkpoint) -> None:
    from clika_cli.main import clika

    result = CliRunner().invoke(clika, ["show", str(exported(checkpoint[2], "fp32")), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["builder"] == "optimum" and shown["precision"]["kv_cache"] == {
        "modes": ["continuous"],
        "dtypes": ["float32"],
    }


def test_optimum_folders_refuse_the_paged_and_int8_kv_modes_by_name(checkpoint) -> None:
    name, _, hf = checkpoint
    folder = exported(hf, "fp32")
    for options in ({"kv_cache_mode": "paged"}, {"kv_cache_dtype": "int8"}):
        with pytest.raises(ManifestError, match=f"{name} was exported through optimum"):
            modelverse.load(folder, threads=1, **options)


def test_an_architecture_neither_path_builds_is_refused_by_name(tmp_path) -> None:
    """bert (an encoder) and a made-up model_type: one Error line naming it and both lists."""
    for model_type in ("bert", "made_up_lm"):
        hf = tmp_path / model_type
        hf.mkdir()
        (hf / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 64}))
        result = CliRunner().invoke(export_command, [str(hf), "-o", str(tmp_path / f"{model_type}-out")])
        assert result.exit_code == 1
        message = result.output.strip()
        assert message.startswith("Error: ") and "\n" not in message, message
        assert f"architecture {model_type!r} is not supported" in message
        assert "llama" in message and "qwen3" in message and "gpt2" in message and "gpt_neox" in message
        assert not (tmp_path / f"{model_type}-out").exists()


def test_a_checkpoint_optimum_cannot_read_fails_in_one_error_line(tmp_path) -> None:
    """A gpt2 folder without weights: optimum's own error, as one line, and nothing written."""
    hf = tmp_path / "hf"
    tiny_checkpoint(hf, "gpt2")
    (hf / "model.safetensors").unlink()
    result = CliRunner().invoke(export_command, [str(hf), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 1
    message = result.output.strip()
    assert message.startswith("Error: optimum's ONNX exporter failed on gpt2: ") and "\n" not in message
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == [hf]


def test_the_optimum_builder_refuses_a_gguf_file(tmp_path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    result = CliRunner().invoke(
        export_command, [str(gguf), "-o", str(tmp_path / "out"), "--builder", "optimum"]
    )
    assert result.exit_code == 1
    assert (
        result.output.strip() == "Error: optimum's exporter reads Hugging Face folders; model.gguf is not one"
    )


def test_the_covered_list_is_what_the_pinned_optimum_exports(checkpoint) -> None:
    """``TEXT_GENERATION_TYPES`` against the pinned toolchain's own task table (decoder-only ones)."""
    import subprocess

    from clika_export.fallback.optimum_run import TEXT_GENERATION_TYPES
    from clika_export.fallback.toolchain import python, subprocess_env, toolchain_dir

    exported(checkpoint[2], "fp32")  # the toolchain is in the cache now
    script = (
        "import json, optimum.exporters.onnx.model_configs\n"
        "from optimum.exporters.tasks import TasksManager as T\n"
        "print(json.dumps(sorted(t for t, b in T._SUPPORTED_MODEL_TYPE.items()"
        " if 'text-generation-with-past' in b.get('onnx', {}))))\n"
    )
    out = subprocess.run(
        [python(), "-c", script],
        env=subprocess_env(toolchain_dir(progress=False)),
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    listed = set(json.loads(out.strip().splitlines()[-1]))
    seq2seq = {"bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "pegasus"}
    assert set(TEXT_GENERATION_TYPES) == listed - seq2seq


def test_a_toolchain_wheel_that_is_not_the_pinned_one_is_refused(tmp_cache, wheelhouse) -> None:
    """An index serving another optimum 2.1.0 wheel: refused by its sha256, nothing unpacked."""
    from clika_export.fallback.toolchain import ToolchainError, toolchain_dir

    wheelhouse.add("optimum", "2.1.0", {"optimum/__init__.py": b"# not the real one\n"})
    with pytest.raises(ToolchainError, match=r"the index lists sha256 \w+, the toolchain pins bc3af32e"):
        toolchain_dir(cache=tmp_cache, progress=False)
    assert not list((tmp_cache / "toolchains").glob("optimum-*"))


def test_a_manifest_naming_an_unknown_builder_is_refused(checkpoint, tmp_path) -> None:
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(exported(checkpoint[2], "fp32"), folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["graphs"]["continuous"]["builder"] = "someone-else"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="builder 'someone-else' is not one of native, optimum"):
        modelverse.load(folder, threads=1)
