"""Reading Hugging Face folders: config, (sharded, bf16) safetensors, tokenizer, template, defaults."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from support.lazy import torch

from clika_export.api import export
from clika_export.checkpoint import CheckpointError
from clika_export.readers.hf import folder_sha256, read_hf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, make_tiny_hf) -> tuple[torch.nn.Module, Path]:
    folder = tmp_path_factory.mktemp("hf") / "tiny"
    return make_tiny_hf(folder, "qwen2", tied=True), folder


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / folder.name
    shutil.copytree(folder, target)
    return target


def test_architecture_tokens_and_template(tiny) -> None:
    model, folder = tiny
    ckpt = read_hf(folder)
    arch = ckpt.architecture
    assert (arch.family, arch.num_layers, arch.hidden_size, arch.num_heads, arch.num_kv_heads) == (
        "qwen2",
        2,
        64,
        4,
        2,
    )
    assert (arch.head_dim, arch.intermediate_size, arch.vocab_size) == (16, 96, 259)
    assert arch.tie_word_embeddings and arch.attention_bias
    assert arch.rope_theta == model.config.rope_parameters["rope_theta"]
    assert arch.rope_scaling is None
    assert (ckpt.bos_token_id, ckpt.eos_token_ids, ckpt.pad_token_id) == (256, (257,), 258)
    assert (ckpt.bos_token, ckpt.eos_token, ckpt.add_bos_token) == ("<s>", "</s>", True)
    assert "messages" in ckpt.chat_template
    assert ckpt.source_format == "hf" and ckpt.source_name == "tiny"
    assert ckpt.source_sha256 == folder_sha256(folder)
    for name, param in model.state_dict().items():
        if ckpt.has(name):
            np.testing.assert_array_equal(ckpt.tensor(name), param.numpy())
    assert not ckpt.has("lm_head.weight")


def test_sharded_bf16_weights(tiny, tmp_path) -> None:
    model, folder = tiny
    target = _copy(folder, tmp_path)
    for old in target.glob("*.safetensors"):
        old.unlink()
    model.to(torch.bfloat16).save_pretrained(target, max_shard_size="20KB")
    model.to(torch.float32)
    assert (target / "model.safetensors.index.json").is_file()
    assert len(list(target.glob("*.safetensors"))) > 2
    ckpt = read_hf(target)
    for name, param in model.state_dict().items():
        if ckpt.has(name):
            got = ckpt.tensor(name)
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, param.to(torch.bfloat16).float().numpy())


def test_missing_shard_is_named(tiny, tmp_path) -> None:
    model, folder = tiny
    target = _copy(folder, tmp_path)
    (target / "model.safetensors").unlink()
    model.save_pretrained(target, max_shard_size="20KB")
    shard = sorted(target.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=shard.name):
        read_hf(target)


def test_generation_config_and_eos_union(tiny, tmp_path) -> None:
    _, folder = tiny
    target = _copy(folder, tmp_path)
    generation = {
        "eos_token_id": [258, 257],
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
    }
    (target / "generation_config.json").write_text(json.dumps(generation))
    ckpt = read_hf(target)
    assert ckpt.eos_token_ids == (258, 257)
    assert ckpt.generation_defaults == {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
    (target / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.7}))
    assert read_hf(target).generation_defaults == {"temperature": 0.0}


def test_chat_template_sources(tiny, tmp_path) -> None:
    _, folder = tiny
    target = _copy(folder, tmp_path)
    config = json.loads((target / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    assert read_hf(target).chat_template == "D"
    (target / "chat_template.jinja").write_text("J")  # the separate file wins, as in transformers
    assert read_hf(target).chat_template == "J"
    del config["chat_template"]
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    (target / "chat_template.jinja").unlink()
    assert read_hf(target).chat_template is None


def test_add_bos_follows_the_tokenizer_when_the_config_is_silent(tiny, tmp_path) -> None:
    _, folder = tiny
    target = _copy(folder, tmp_path)
    config = json.loads((target / "tokenizer_config.json").read_text())
    del config["add_bos_token"]
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    assert read_hf(target).add_bos_token is False  # the tiny tokenizer.json adds no BOS itself


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(hidden_act="gelu"), "hidden_act 'gelu'"),
        (lambda c: c.update(mlp_bias=True), "mlp_bias"),
        (lambda c: c.update(text_config=c.pop("num_hidden_layers") and {}), "multimodal checkpoint"),
        (lambda c: c.pop("num_hidden_layers"), "num_hidden_layers"),
        (lambda c: c.update(tie_word_embeddings=False), "no lm_head.weight"),
        (lambda c: c.update(rope_parameters={"rope_type": "mrope", "rope_theta": 1e4, "factor": 4.0}), None),
    ],
)
def test_unsupported_configs_are_refused_by_name(tiny, tmp_path, edit, message) -> None:
    _, folder = tiny
    target = _copy(folder, tmp_path)
    config = json.loads((target / "config.json").read_text())
    edit(config)
    (target / "config.json").write_text(json.dumps(config))
    if message is None:  # read fine, refused when the graph needs the rotary tables
        assert read_hf(target).architecture.rope_scaling["rope_type"] == "mrope"
        supported = r"\(supported: default, dynamic, linear, llama3, longrope, yarn\)"
        with pytest.raises(CheckpointError, match=rf"rope scaling type 'mrope' is not supported {supported}"):
            export(target, tmp_path / "out", progress=False)
        assert not (tmp_path / "out").exists()
        return
    with pytest.raises(CheckpointError, match=message):
        read_hf(target)


def test_missing_files_are_named(tiny, tmp_path) -> None:
    _, folder = tiny
    target = _copy(folder, tmp_path)
    (target / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        read_hf(target)
    (target / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        read_hf(target)


def test_source_digest_changes_with_the_weights(tiny, tmp_path) -> None:
    _, folder = tiny
    target = _copy(folder, tmp_path)
    before = folder_sha256(target)
    assert folder_sha256(target) == before
    weights = target / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert folder_sha256(target) != before


def _special_entry(folder: Path, kind: str) -> None:
    entry = folder / "extra.safetensors"
    if kind == "fifo":
        os.mkfifo(entry)
    else:
        entry.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_weights_entry_that_is_not_a_regular_file_is_refused(tiny, tmp_path, kind) -> None:
    # Opening a FIFO blocks until a writer comes and /dev/zero never ends: both
    # must be refused before a byte is read, by hashing and by reading alike.
    folder = _copy(tiny[1], tmp_path)
    _special_entry(folder, kind)
    with pytest.raises(CheckpointError, match="extra.safetensors is not a regular file"):
        folder_sha256(folder)
    with pytest.raises(CheckpointError, match="extra.safetensors is not a regular file"):
        read_hf(folder)
