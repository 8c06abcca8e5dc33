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
from vision_helpers import IDEFICS3_PROCESSOR, assert_close_in_scale, build_idefics3, random_image

from clika_export.checkpoint import CheckpointError
from clika_export.media.mmproj_gguf import export_mmproj, gguf_name
from clika_runtime.media.idefics3 import preprocess_idefics3
from clika_runtime.media.processor_config import read_processor_settings

torch = pytest.importorskip("torch")

_PREFIX = "model.vision_model."


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
    image = preprocess_idefics3(random_image(80, 130, 9), settings)
    assert image.rows * image.cols > 1
    ours, ref = _embeds(tmp_path / "model", spec, image.pixel_values), _reference(model, image.pixel_values)
    # F16 matrices (llama.cpp's default) round each weight, and still land within 1e-3 of scale.
    assert_close_in_scale(ours, ref)


def test_mmproj_of_another_projector_or_missing_tensor_is_refused(idefics3, tmp_path):
    model, _ = idefics3
    with pytest.raises(CheckpointError, match="projector type 'qwen2vl_merger' is not supported"):
        export_mmproj(_write_mmproj(model, tmp_path / "a.gguf", projector="qwen2vl_merger"), tmp_path / "a")
    with pytest.raises(CheckpointError, match=r"no tensor v\.blk\.1\.ffn_down\.weight"):
        export_mmproj(
            _write_mmproj(model, tmp_path / "b.gguf", drop="v.blk.1.ffn_down.weight"), tmp_path / "b"
        )
