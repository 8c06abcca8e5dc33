"""Opening an exported model folder, and the clear errors for broken ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.contract.model_folder import open_model_folder, session_options
from clika_runtime.contract.step_graph import pack_step


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(folder, target)
    return target


def test_open_and_run_one_step(tiny_llama_model: Path) -> None:
    opened = open_model_folder(tiny_llama_model, threads=1)
    arch = opened.manifest.architecture
    assert opened.kv_mode == "continuous"
    assert [i.name for i in opened.session.get_inputs()] == list(opened.graph.inputs)
    ids = opened.tokenizer.encode("hi there", add_special_tokens=False).ids
    assert len(ids) == 8 and opened.tokenizer.decode(ids) == "hi there"
    assert opened.chat_template and "messages" in opened.chat_template
    assert opened.manifest.tokenizer.eos_token_ids == (257,)
    # One prefill step through the opened session, cache in numpy buffers.
    packed = pack_step([(0, [1, 2, 3], False)], capacity=8)
    feeds = dict(packed.feeds())
    for layer in range(arch.num_layers):
        for name in (opened.graph.kv.past_key, opened.graph.kv.past_value):
            feeds[name.format(layer=layer)] = np.zeros((1, arch.num_kv_heads, 8, arch.head_dim), np.float32)
    logits = opened.session.run([opened.graph.logits_output], feeds)[0]
    assert logits.shape == (1, arch.vocab_size)
    assert np.isfinite(logits).all()


def test_session_options_threads_and_spinning() -> None:
    options = session_options(2)
    assert options.intra_op_num_threads == 2
    # Spin while a step runs, never between steps.
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert options.get_session_config_entry("session.force_spinning_stop") == "1"
    sleeping = session_options(allow_spinning=False)
    assert sleeping.intra_op_num_threads == 0  # ORT's default
    assert sleeping.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(ValueError, match="threads"):
        session_options(0)


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no manifest.json"):
        open_model_folder(tmp_path)
    with pytest.raises(ManifestError, match="no such directory"):
        open_model_folder(tmp_path / "absent")


def test_corrupt_manifest(tiny_llama_model: Path, tmp_path: Path) -> None:
    folder = _copy(tiny_llama_model, tmp_path)
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        open_model_folder(folder)
    data = json.loads((tiny_llama_model / "manifest.json").read_text())
    del data["context_window"]
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="context_window"):
        open_model_folder(folder)


@pytest.mark.parametrize("name", ["model.onnx", "tokenizer.json", "chat_template.jinja"])
def test_missing_named_file(tiny_llama_model: Path, tmp_path: Path, name: str) -> None:
    folder = _copy(tiny_llama_model, tmp_path)
    (folder / name).unlink()
    with pytest.raises(ManifestError, match=name):
        open_model_folder(folder)


def test_missing_or_truncated_weights(tiny_llama_model: Path, tmp_path: Path) -> None:
    folder = _copy(tiny_llama_model, tmp_path)
    data = folder / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ManifestError, match="model.onnx could not be loaded"):
        open_model_folder(folder)
    data.unlink()
    with pytest.raises(ManifestError, match="model.onnx could not be loaded"):
        open_model_folder(folder)


def test_graph_that_does_not_match_the_manifest(tiny_llama_model: Path, tmp_path: Path) -> None:
    folder = _copy(tiny_llama_model, tmp_path)
    data = json.loads((folder / "manifest.json").read_text())
    data["graphs"]["continuous"]["inputs"].append("position_ids")
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="position_ids"):
        open_model_folder(folder)


def test_kv_modes(tiny_llama_model: Path) -> None:
    for mode, graph in Manifest.read(tiny_llama_model).graphs.items():
        opened = open_model_folder(tiny_llama_model, kv_mode=mode, threads=1)
        assert opened.graph == graph
        assert {i.name for i in opened.session.get_inputs()} == set(graph.inputs)
    with pytest.raises(ManifestError, match="no 'ring' graph"):
        open_model_folder(tiny_llama_model, kv_mode="ring")


def _rename_in_manifest(folder: Path, edit) -> None:
    data = json.loads((folder / "manifest.json").read_text())
    edit(data)
    (folder / "manifest.json").write_text(json.dumps(data))


_ESCAPES = ["../../../../../../etc/passwd", "/etc/passwd", "sub/../../outside.jinja", "a\x00b"]


@pytest.mark.parametrize("name", _ESCAPES)
@pytest.mark.parametrize("field", ["chat_template_file", "tokenizer", "graph"])
def test_manifest_file_names_stay_inside_the_folder(
    tiny_llama_model: Path, tmp_path: Path, field: str, name: str
) -> None:
    folder = _copy(tiny_llama_model, tmp_path)
    (tmp_path / "outside.jinja").write_text("{{ 'leaked' }}")

    def edit(data: dict) -> None:
        if field == "chat_template_file":
            data["chat_template_file"] = name
        elif field == "tokenizer":
            data["tokenizer"]["file"] = name
        else:
            data["graphs"]["continuous"]["file"] = name

    _rename_in_manifest(folder, edit)
    with pytest.raises(ManifestError, match="outside the model folder|not a plain file name"):
        open_model_folder(folder)


def test_manifest_file_that_links_out_of_the_folder(tiny_llama_model: Path, tmp_path: Path) -> None:
    folder = _copy(tiny_llama_model, tmp_path)
    (tmp_path / "outside.jinja").write_text("{{ 'leaked' }}")
    (folder / "chat_template.jinja").unlink()
    (folder / "chat_template.jinja").symlink_to(tmp_path / "outside.jinja")
    with pytest.raises(ManifestError, match="outside the model folder"):
        open_model_folder(folder)


@pytest.mark.parametrize("name", [7, ["model.onnx"], ""])
def test_manifest_file_name_that_is_not_a_string(tiny_llama_model: Path, tmp_path: Path, name) -> None:
    folder = _copy(tiny_llama_model, tmp_path)
    _rename_in_manifest(folder, lambda data: data["tokenizer"].__setitem__("file", name))
    with pytest.raises(ManifestError, match="tokenizer.file"):
        open_model_folder(folder)


@pytest.mark.parametrize(
    "section,value",
    [
        ("graphs", None),
        ("graphs", []),
        ("context_window", "many"),
        ("context_window", float("inf")),
        ("tokenizer", None),
    ],
)
def test_a_section_of_the_wrong_kind_is_a_manifest_error(tiny_llama_model: Path, section, value) -> None:
    # Found by the fuzz tier: "graphs": null raised AttributeError, a word for a number ValueError,
    # Infinity (JSON's reader takes it) for a number OverflowError.
    data = json.loads((tiny_llama_model / "manifest.json").read_text())
    data[section] = value
    with pytest.raises(ManifestError, match="manifest has a malformed section"):
        Manifest.from_dict(data)
