"""Vision towers exported to ONNX against transformers on the same pixels.

Tiny random Idefics3 (SmolVLM's architecture) and Qwen2-VL checkpoints are
built here; our preprocessing makes the pixels, and the projected image
embeddings from our graph (run by onnxruntime) must match transformers'
within 1e-3 of their scale.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from support.lazy import torch
from vision_helpers import (
    IDEFICS3_PROCESSOR,
    QWEN2_VL_PROCESSOR,
    assert_close_in_scale,
    random_image,
)

from clika_export.media.vision_export import attach_vision, export_vision
from clika_runtime.contract.manifest import Manifest
from clika_runtime.media.idefics3 import preprocess_idefics3
from clika_runtime.media.processor_config import processor_settings
from clika_runtime.media.qwen2_vl import preprocess_qwen2_vl
from clika_runtime.media.qwen2_vl_positions import frame_attention_bias, rotary_tables


def test_idefics3_image_embeddings_match_transformers(idefics3, tmp_path):
    model, folder = idefics3
    spec = export_vision(folder, tmp_path)
    assert spec.family == "idefics3" and spec.image_token_id == 319
    image = preprocess_idefics3(random_image(90, 150, 3), processor_settings(IDEFICS3_PROCESSOR))
    assert image.pixel_values.shape[0] == image.rows * image.cols + 1 > 2  # tiles and the global view
    session = ort.InferenceSession(str(tmp_path / spec.file), providers=["CPUExecutionProvider"])
    (ours,) = session.run([spec.embeds_output], {"pixel_values": image.pixel_values})
    assert ours.shape[1] == spec.details["tokens_per_tile"]
    with torch.no_grad():
        ref = model.model.get_image_features(pixel_values=torch.from_numpy(image.pixel_values)[None])
    assert_close_in_scale(ours.reshape(-1, ours.shape[-1]), ref.pooler_output[0].numpy())


def _qwen_inputs(images, spec):
    settings = processor_settings(QWEN2_VL_PROCESSOR)
    patches = [preprocess_qwen2_vl(image, settings) for image in images]
    grids = [p.grid_thw for p in patches]
    cos, sin = rotary_tables(
        grids,
        head_dim=spec.details["head_dim"],
        merge=spec.details["merge_size"],
        theta=spec.details["rope_theta"],
    )
    feeds = {
        "pixel_values": np.concatenate([p.pixel_values for p in patches]),
        "rotary_cos": cos,
        "rotary_sin": sin,
        "attention_bias": frame_attention_bias(grids),
    }
    return feeds, grids


def test_qwen2_vl_two_images_in_one_call_match_transformers(qwen2_vl, tmp_path):
    model, folder = qwen2_vl
    spec = export_vision(folder, tmp_path)
    assert spec.family == "qwen2_vl" and spec.text_hidden_size == 48
    feeds, grids = _qwen_inputs([random_image(60, 100, 4), random_image(120, 70, 5)], spec)
    session = ort.InferenceSession(str(tmp_path / spec.file), providers=["CPUExecutionProvider"])
    (ours,) = session.run([spec.embeds_output], feeds)
    with torch.no_grad():
        ref = model.model.get_image_features(
            pixel_values=torch.from_numpy(feeds["pixel_values"]), image_grid_thw=torch.tensor(grids)
        )
    reference = torch.cat(list(ref.pooler_output)).numpy()
    assert ours.shape[0] == sum(t * h * w for t, h, w in grids) // 4
    assert_close_in_scale(ours, reference)


def test_vision_spec_round_trips_through_the_manifest(idefics3, tiny_llama_model, tmp_path):
    _, folder = idefics3
    model_folder = Path(shutil.copytree(tiny_llama_model, tmp_path / "model"))
    spec = export_vision(folder, model_folder)
    attach_vision(model_folder, spec)
    assert Manifest.read(model_folder).vision == spec
    (model_folder / spec.file).unlink()
    with pytest.raises(ValueError, match="vision.onnx"):
        Manifest.read(model_folder)


def test_unsupported_checkpoints_are_refused_by_name(idefics3, tmp_path):
    _, folder = idefics3
    bad = Path(shutil.copytree(folder, tmp_path / "bad"))
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "model_type": "llava"}))
    with pytest.raises(ValueError, match="llava"):
        export_vision(bad, tmp_path / "out")
    (bad / "config.json").write_text(json.dumps(config))
    (bad / "preprocessor_config.json").write_text(json.dumps({**IDEFICS3_PROCESSOR, "resample": 9}))
    with pytest.raises(ValueError, match="resample"):
        export_vision(bad, tmp_path / "out")


def test_malformed_checkpoint_configs_are_refused_by_file(idefics3, tmp_path):
    _, folder = idefics3
    bad = Path(shutil.copytree(folder, tmp_path / "bad"))
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "vision_config": {"hidden_size": "wide"}}))
    with pytest.raises(ValueError, match="idefics3 vision config is malformed"):
        export_vision(bad, tmp_path / "out")
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        export_vision(bad, tmp_path / "out")
