"""``clika-export MODEL.gguf --mmproj MMPROJ.gguf``: llama.cpp's pair into one vision folder."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from mmproj_files import write_idefics3_pair, write_qwen2_vl_mmproj
from vision_helpers import build_qwen2_vl

from clika_cli.export_command import export_command
from clika_runtime.contract.manifest import Manifest


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_idefics3_pair(tmp_path_factory.mktemp("smolvlm-pair"))


def test_the_pair_exports_a_vision_folder(pair, tmp_path):
    _, _, text, mmproj = pair
    out = tmp_path / "model"
    args = [
        str(text),
        "--mmproj",
        str(mmproj),
        "-o",
        str(out),
        "--precision",
        "fp32",
        "--context",
        "512",
        "-q",
    ]
    result = CliRunner().invoke(export_command, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    vision = Manifest.read(out).vision
    assert vision is not None and vision.family == "idefics3" and (out / vision.file).is_file()


def test_a_mismatched_mmproj_is_one_error_line(pair, tmp_path):
    _, _, text, _ = pair
    qwen, _ = build_qwen2_vl(tmp_path / "qwen")
    mmproj = write_qwen2_vl_mmproj(qwen, tmp_path / "mmproj-qwen.gguf")
    result = CliRunner().invoke(
        export_command, [str(text), "--mmproj", str(mmproj), "-o", str(tmp_path / "x")]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "projector type 'qwen2vl_merger' does not feed a 'llama' text model" in result.output
    assert not (tmp_path / "x").exists()
