"""Malformed Hugging Face folders: ``clika-export`` ends with one ``Error:`` line naming the problem.

Each case is a good tiny folder with one edit (a safetensors header entry, the
header itself, or a config.json field), made here.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from clika_cli.export_command import export_command

QPROJ = "model.layers.0.self_attn.q_proj.weight"


def _header(folder: Path) -> tuple[Path, dict, bytes]:
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    return path, json.loads(data[8 : 8 + size]), data[8 + size :]


def _write_header(path: Path, header: object, body: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def entry(**changes):
    """Edit the q_proj entry of the safetensors header (``...`` drops a key)."""

    def edit(folder: Path) -> None:
        path, header, body = _header(folder)
        for key, value in changes.items():
            if value is ...:
                header[QPROJ].pop(key)
            else:
                header[QPROJ][key] = value
        _write_header(path, header, body)

    return edit


def whole_header(make):
    def edit(folder: Path) -> None:
        path, header, body = _header(folder)
        _write_header(path, make(header), body)

    return edit


def raw_bytes(make):
    def edit(folder: Path) -> None:
        path = folder / "model.safetensors"
        path.write_bytes(make(path.read_bytes()))

    return edit


def config(**changes):
    def edit(folder: Path) -> None:
        data = json.loads((folder / "config.json").read_text())
        data.update(changes)
        (folder / "config.json").write_text(json.dumps(data))

    return edit


CASES = {
    "no-shape": (entry(shape=...), "shape"),
    "no-dtype": (entry(dtype=...), "dtype"),
    "no-offsets": (entry(data_offsets=...), "data_offsets"),
    "negative-shape": (entry(shape=[-64, -64]), "shape"),
    "shape-not-a-list": (entry(shape="64x64"), "shape"),
    "fractional-shape": (entry(shape=[64.5, 64]), "shape"),
    "offsets-past-the-file": (entry(data_offsets=[0, 1 << 40], shape=[1 << 18, 1 << 20]), "past the end"),
    "offsets-not-a-pair": (entry(data_offsets="0-16384"), "data_offsets"),
    "entry-not-an-object": (whole_header(lambda h: {**h, QPROJ: 5}), QPROJ),
    "header-a-list": (whole_header(lambda h: [1, 2]), "header"),
    "header-past-the-file": (raw_bytes(lambda d: struct.pack("<Q", len(d) * 4) + d[8:]), "header"),
    "data-cut-short": (raw_bytes(lambda d: d[: len(d) // 2]), "past the end"),
    "heads-zero": (config(num_attention_heads=0), "num_attention_heads"),
    "heads-a-string": (config(num_attention_heads="four"), "num_attention_heads"),
    "heads-fractional": (config(num_attention_heads=4.5), "num_attention_heads"),
    "hidden-negative": (config(hidden_size=-64), "hidden_size"),
    "vocab-zero": (config(vocab_size=0), "vocab_size"),
    "eps-a-string": (config(rms_norm_eps="tiny"), "rms_norm_eps"),
    "rope-theta-negative": (config(rope_parameters={"rope_theta": -1.0}), "rope_theta"),
    "rope-scaling-a-string": (config(rope_scaling="linear"), "rope_scaling"),
    "positions-zero": (config(max_position_embeddings=0), "max_position_embeddings"),
    "eos-a-string": (config(eos_token_id="end"), "eos_token_id"),
    "bos-a-list-of-strings": (config(bos_token_id=["x"]), "bos_token_id"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory, make_tiny_hf) -> Path:
    folder = tmp_path_factory.mktemp("malformed") / "good"
    make_tiny_hf(folder, "llama")
    return folder


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_folder_is_one_error_line(good: Path, tmp_path: Path, case: str) -> None:
    edit, named = CASES[case]
    folder = tmp_path / case
    shutil.copytree(good, folder)
    edit(folder)
    result = CliRunner().invoke(export_command, [str(folder), "-o", str(tmp_path / "out"), "--precision", "fp32", "-q", "--no-verify"])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and named in lines[0], result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [case]  # nothing half-written
