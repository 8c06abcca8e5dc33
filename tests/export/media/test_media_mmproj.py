"""llama.cpp ``mmproj`` GGUF files read into our vision graph.

The test writes tiny Idefics3 and Qwen2-VL mmproj files the way llama.cpp's
converter lays them out (``tests/mmproj_files.py``) from tiny random
transformers checkpoints, exports them, and compares the embeddings with
transformers'.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from mmproj_files import CLIP_MEAN, write_idefics3_mmproj, write_qwen2_vl_mmproj
from support.lazy import torch
from vision_helpers import (
    IDEFICS3_PROCESSOR,
    assert_close_in_scale,
    random_image,
)

from clika_export.checkpoint import CheckpointError
from clika_export.media.mmproj_gguf import export_mmproj
from clika_runtime.media.idefics3 import preprocess_idefics3
from clika_runtime.media.processor_config import processor_settings, read_processor_settings
from clika_runtime.media.qwen2_vl import preprocess_qwen2_vl
from clika_runtime.media.qwen2_vl_positions import frame_attention_bias, rotary_tables


def _embeds(folder, spec, pixels):
    session = ort.InferenceSession(str(folder / spec.file), providers=["CPUExecutionProvider"])
    (out,) = session.run([spec.embeds_output], {"pixel_values": pixels})
    return out.reshape(-1, out.shape[-1])


def _reference(model, pixels):
    with torch.no_grad():
        return (
            model.model.get_image_features(pixel_values=torch.from_numpy(pixels)[None])
            .pooler_output[0]
            .numpy()
        )


@pytest.mark.parametrize("matrices", [np.float32, np.float16])
def test_mmproj_embeddings_match_transformers(idefics3, tmp_path, matrices):
    model, _ = idefics3
    mmproj = write_idefics3_mmproj(model, tmp_path / "mmproj.gguf", matrices=matrices)
    spec = export_mmproj(mmproj, tmp_path / "model")
    # The processor config the mmproj implies is the checkpoint's own.
    settings = read_processor_settings(tmp_path / "model")
    assert settings == processor_settings(IDEFICS3_PROCESSOR)
    image = preprocess_idefics3(random_image(80, 130, 9), settings)
    assert image.rows * image.cols > 1
    ours, ref = _embeds(tmp_path / "model", spec, image.pixel_values), _reference(model, image.pixel_values)
    # F16 matrices (llama.cpp's default) round each weight, and still land within 1e-3 of scale.
    assert_close_in_scale(ours, ref)


def test_mmproj_of_another_projector_or_missing_tensor_is_refused(idefics3, tmp_path):
    model, _ = idefics3
    with pytest.raises(CheckpointError, match="projector type 'qwen2.5vl_merger' is not supported"):
        export_mmproj(
            write_idefics3_mmproj(model, tmp_path / "a.gguf", projector="qwen2.5vl_merger"), tmp_path / "a"
        )
    with pytest.raises(CheckpointError, match=r"no tensor v\.blk\.1\.ffn_down\.weight"):
        export_mmproj(
            write_idefics3_mmproj(model, tmp_path / "b.gguf", drop="v.blk.1.ffn_down.weight"), tmp_path / "b"
        )


def test_qwen2_vl_mmproj_embeddings_match_transformers(qwen2_vl, tmp_path):
    model, _ = qwen2_vl
    spec = export_mmproj(write_qwen2_vl_mmproj(model, tmp_path / "mmproj.gguf"), tmp_path / "model")
    assert spec.family == "qwen2_vl" and spec.details["head_dim"] == 8
    settings = read_processor_settings(tmp_path / "model")
    assert (settings.patch_size, settings.merge_size) == (14, 2)
    np.testing.assert_allclose(settings.mean, CLIP_MEAN, rtol=1e-6)  # stored as float32
    patches = preprocess_qwen2_vl(random_image(60, 100, 3), settings)
    d = spec.details
    cos, sin = rotary_tables(
        [patches.grid_thw], head_dim=d["head_dim"], merge=d["merge_size"], theta=d["rope_theta"]
    )
    feeds = {
        "pixel_values": patches.pixel_values,
        "rotary_cos": cos,
        "rotary_sin": sin,
        "attention_bias": frame_attention_bias([patches.grid_thw]),
    }
    session = ort.InferenceSession(str(tmp_path / "model" / spec.file), providers=["CPUExecutionProvider"])
    (ours,) = session.run([spec.embeds_output], feeds)
    with torch.no_grad():
        ref = model.model.get_image_features(
            pixel_values=torch.from_numpy(patches.pixel_values),
            image_grid_thw=torch.tensor([patches.grid_thw]),
        )
    assert_close_in_scale(ours, ref.pooler_output[0].numpy())
