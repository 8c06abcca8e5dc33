"""llama.cpp ``mmproj`` GGUF files read into our vision graph.

The test writes a tiny Idefics3 mmproj with the ``gguf`` package the way
llama.cpp's converter lays it out (``v.*`` encoder, ``mm.model.fc``
projector, ``clip.vision.*`` metadata) from a tiny random transformers
checkpoint, exports it, and compares the embeddings with transformers'.
"""

from __future__ import annotations

import gguf
import numpy as np
import onnxruntime as ort
import pytest
from vision_helpers import (
    IDEFICS3_PROCESSOR,
    assert_close_in_scale,
    build_idefics3,
    build_qwen2_vl,
    random_image,
)

from clika_export.checkpoint import CheckpointError
from clika_export.media import mmproj_qwen2_vl
from clika_export.media.mmproj_gguf import export_mmproj
from clika_export.media.mmproj_idefics3 import gguf_name
from clika_runtime.media.idefics3 import preprocess_idefics3
from clika_runtime.media.processor_config import processor_settings, read_processor_settings
from clika_runtime.media.qwen2_vl import preprocess_qwen2_vl
from clika_runtime.media.qwen2_vl_positions import frame_attention_bias, rotary_tables

torch = pytest.importorskip("torch")

_PREFIX = "model.vision_model."
# The mean and std Qwen2-VL checkpoints normalize with (OpenAI CLIP's).
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


@pytest.fixture(scope="module")
def idefics3(tmp_path_factory):
    return build_idefics3(tmp_path_factory.mktemp("idefics3-hf"))


def _write_mmproj(model, path, *, matrices=np.float32, projector="idefics3", drop=None):
    config = model.config
    vision = config.vision_config
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("clip.projector_type", projector)
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_uint32("clip.vision.image_size", vision.image_size)
    writer.add_uint32("clip.vision.patch_size", vision.patch_size)
    writer.add_uint32("clip.vision.embedding_length", vision.hidden_size)
    writer.add_uint32("clip.vision.feed_forward_length", vision.intermediate_size)
    writer.add_uint32("clip.vision.block_count", vision.num_hidden_layers)
    writer.add_uint32("clip.vision.attention.head_count", vision.num_attention_heads)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", vision.layer_norm_eps)
    writer.add_uint32("clip.vision.projection_dim", config.text_config.hidden_size)
    writer.add_uint32("clip.vision.projector.scale_factor", config.scale_factor)
    writer.add_uint32("clip.vision.preproc_image_size", IDEFICS3_PROCESSOR["size"]["longest_edge"])
    writer.add_array("clip.vision.image_mean", IDEFICS3_PROCESSOR["image_mean"])
    writer.add_array("clip.vision.image_std", IDEFICS3_PROCESSOR["image_std"])
    writer.add_bool("clip.use_gelu", True)
    for name, tensor in model.state_dict().items():
        if "text_model" in name or name == "lm_head.weight":
            continue
        relative = name[len(_PREFIX) :] if name.startswith(_PREFIX) else name.removeprefix("model.")
        target = gguf_name(relative)
        if target == drop:
            continue
        values = tensor.numpy()
        # As llama.cpp's converter: embeddings and 1-D tensors in F32, matrices at the chosen type.
        dtype = matrices if values.ndim == 2 and "embd" not in target else np.float32
        writer.add_tensor(target, values.astype(dtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


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
    mmproj = _write_mmproj(model, tmp_path / "mmproj.gguf", matrices=matrices)
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
        export_mmproj(_write_mmproj(model, tmp_path / "a.gguf", projector="qwen2.5vl_merger"), tmp_path / "a")
    with pytest.raises(CheckpointError, match=r"no tensor v\.blk\.1\.ffn_down\.weight"):
        export_mmproj(
            _write_mmproj(model, tmp_path / "b.gguf", drop="v.blk.1.ffn_down.weight"), tmp_path / "b"
        )


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory):
    return build_qwen2_vl(tmp_path_factory.mktemp("qwen2-vl-hf"))


def _write_qwen2_vl_mmproj(model, path):
    """As llama.cpp's converter: Conv3d split per frame, qkv split, merger under v.post_ln / mm.*."""
    vision = model.config.vision_config
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("clip.projector_type", "qwen2vl_merger")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_uint32("clip.vision.image_size", 560)
    writer.add_uint32("clip.vision.patch_size", vision.patch_size)
    writer.add_uint32("clip.vision.embedding_length", vision.embed_dim)
    writer.add_uint32("clip.vision.feed_forward_length", vision.hidden_size)  # the converter's own quirk
    writer.add_uint32("clip.vision.block_count", vision.depth)
    writer.add_uint32("clip.vision.attention.head_count", vision.num_heads)
    writer.add_uint32("clip.vision.projection_dim", vision.hidden_size)
    writer.add_array("clip.vision.image_mean", CLIP_MEAN)
    writer.add_array("clip.vision.image_std", CLIP_STD)
    for name, tensor in model.state_dict().items():
        if not name.startswith("model.visual."):
            continue
        relative, values = name[len("model.visual.") :], tensor.numpy()
        if relative == "patch_embed.proj.weight":
            writer.add_tensor("v.patch_embd.weight", np.ascontiguousarray(values[:, :, 0]))
            writer.add_tensor("v.patch_embd.weight.1", np.ascontiguousarray(values[:, :, 1]))
        elif ".attn.qkv." in relative:
            block, leaf = relative.split(".")[1], relative.rsplit(".", 1)[1]
            for part, chunk in zip("qkv", np.split(values, 3, axis=0), strict=True):
                writer.add_tensor(f"v.blk.{block}.attn_{part}.{leaf}", np.ascontiguousarray(chunk))
        else:
            writer.add_tensor(mmproj_qwen2_vl.gguf_name(relative), values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_qwen2_vl_mmproj_embeddings_match_transformers(qwen2_vl, tmp_path):
    model, _ = qwen2_vl
    spec = export_mmproj(_write_qwen2_vl_mmproj(model, tmp_path / "mmproj.gguf"), tmp_path / "model")
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
