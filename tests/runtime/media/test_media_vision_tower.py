"""The runtime's vision stage end to end: raw images in a model folder's tower.

From uint8 images to embeddings and placeholder text, against transformers'
own processor and model on the same images (the reference preprocesses with
its Pillow processor; we preprocess in NumPy and run our exported graph).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support.lazy import torch
from vision_helpers import (
    IDEFICS3_PROCESSOR,
    QWEN2_VL_PROCESSOR,
    assert_close_in_scale,
    build_idefics3,
    build_qwen2_vl,
    random_image,
)

from clika_export.media.vision_export import attach_vision, export_vision
from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.media.arguments import video_clips
from clika_runtime.media.placeholders import expand_markers
from clika_runtime.media.processor_config import processor_settings
from clika_runtime.media.qwen2_vl import preprocess_qwen2_vl_video
from clika_runtime.media.qwen2_vl_video import read_video_settings
from clika_runtime.media.video import sample_frames
from clika_runtime.media.vision_tower import VisionTower, media_support, reads_video

idefics3_pil = pytest.importorskip("transformers.models.idefics3.image_processing_pil_idefics3")
idefics3_processing = pytest.importorskip("transformers.models.idefics3.processing_idefics3")
qwen2_vl_pil = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")

IMAGES = [(90, 150), (64, 40)]


def _folder(tiny_llama_model: Path, checkpoint: Path, target: Path) -> Path:
    folder = Path(shutil.copytree(tiny_llama_model, target))
    attach_vision(folder, export_vision(checkpoint, folder))
    return folder


def _settings_kwargs(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "image_processor_type"}


@pytest.fixture(scope="module")
def idefics3(tmp_path_factory, tiny_llama_model, tiny_zoo):
    model, checkpoint = tiny_zoo.checkpoint(build_idefics3)
    return model, _folder(tiny_llama_model, checkpoint, tmp_path_factory.mktemp("idefics3") / "model")


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory, tiny_llama_model, tiny_zoo):
    model, checkpoint = tiny_zoo.checkpoint(build_qwen2_vl)
    return model, _folder(tiny_llama_model, checkpoint, tmp_path_factory.mktemp("qwen2-vl") / "model")


def test_idefics3_images_embed_as_transformers_does(idefics3):
    model, folder = idefics3
    images = [random_image(h, w, seed) for seed, (h, w) in enumerate(IMAGES)]
    tower = VisionTower.open(folder, threads=1)
    ours = tower.embed_images(images)
    processor = idefics3_pil.Idefics3ImageProcessorPil(**_settings_kwargs(IDEFICS3_PROCESSOR))
    for image, embedding in zip(images, ours, strict=True):
        inputs = processor([image], return_tensors="pt", return_row_col_info=True)
        with torch.no_grad():
            ref = model.model.get_image_features(
                pixel_values=inputs["pixel_values"], pixel_attention_mask=inputs["pixel_attention_mask"]
            )
        assert_close_in_scale(embedding.embeds, ref.pooler_output[0].numpy())
        # The prompt text is transformers' own expansion of the image marker.
        fake = SimpleNamespace(
            fake_image_token="<fake_token_around_image>",
            global_image_tag="<global-img>",
            image_token="<image>",
            image_seq_len=embedding.num_tokens // (inputs["rows"][0][0] * inputs["cols"][0][0] + 1),
        )
        expected = idefics3_processing.Idefics3Processor.replace_image_token(
            fake, {"rows": inputs["rows"], "cols": inputs["cols"]}, 0
        )
        assert embedding.prompt_text == expected
        assert embedding.prompt_text.count("<image>") == embedding.num_tokens


def test_qwen2_vl_images_embed_as_transformers_does(qwen2_vl):
    model, folder = qwen2_vl
    images = [random_image(h, w, seed) for seed, (h, w) in enumerate(IMAGES)]
    ours = VisionTower.open(folder, threads=1).embed_images(images)
    processor = qwen2_vl_pil.Qwen2VLImageProcessorPil(**_settings_kwargs(QWEN2_VL_PROCESSOR))
    inputs = processor(images, return_tensors="pt")
    with torch.no_grad():
        ref = model.model.get_image_features(
            pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"]
        )
    for embedding, expected in zip(ours, ref.pooler_output, strict=True):
        assert_close_in_scale(embedding.embeds, expected.numpy())
        assert embedding.prompt_text == "<|image_pad|>" * embedding.num_tokens


def test_equal_images_have_equal_digests_and_different_images_do_not(qwen2_vl):
    _, folder = qwen2_vl
    tower = VisionTower.open(folder, threads=1)
    a, b = random_image(56, 56, 1), random_image(56, 56, 2)
    first, again, other = tower.embed_images([a, a.copy(), b])
    assert first.digest == again.digest != other.digest
    np.testing.assert_array_equal(first.embeds, again.embeds)


def test_markers_expand_in_order_and_counts_must_agree():
    text = expand_markers("a <image> b <image> c", "<image>", ["[1]", "[2]"])
    assert text == "a [1] b [2] c"
    with pytest.raises(ValueError, match="images: 1 given but the prompt has 2 <image> markers"):
        expand_markers("a <image> b <image>", "<image>", ["[1]"])


def test_a_text_only_folder_and_too_many_images_are_refused(tiny_llama_model, qwen2_vl):
    with pytest.raises(ManifestError, match="reads text only"):
        VisionTower.open(tiny_llama_model)
    _, folder = qwen2_vl
    with pytest.raises(ValueError, match="images: 3 given, this model takes at most 2"):
        VisionTower.open(folder, threads=1).embed_images([random_image(30, 30, 0)] * 3, max_count=2)


def test_qwen2_vl_video_clip_embeds_as_transformers_does(qwen2_vl):
    """A 2 s clip at 10 fps, sampled at 2 fps: five frames, three temporal patches (the last repeats),
    each frame resized within the video processor's default bounds (no video config: the image
    processor's layout)."""

    model, folder = qwen2_vl
    frames = np.stack([random_image(60, 90, seed) for seed in range(21)])
    times = np.arange(21) / 10
    (ours,) = VisionTower.open(folder, threads=1).embed_videos([(frames, times)])
    assert ours.timestamps == (0.0, 1.0, 2.0)
    (clip,) = video_clips([(frames, times)])
    patches = preprocess_qwen2_vl_video(
        sample_frames(clip, fps=2, max_frames=768).frames,
        read_video_settings(folder, processor_settings(QWEN2_VL_PROCESSOR)).pixels,
    )
    assert patches.grid_thw[0] == 3
    with torch.no_grad():
        ref = model.model.get_video_features(
            pixel_values_videos=torch.from_numpy(patches.pixel_values),
            video_grid_thw=torch.tensor([patches.grid_thw]),
        )
    assert_close_in_scale(ours.embeds, ref.pooler_output[0].numpy())
    assert ours.prompt_text == "<|video_pad|>" * ours.num_tokens


def test_idefics3_tower_refuses_videos_and_support_is_read_from_the_folder(
    idefics3, qwen2_vl, tiny_llama_model
):

    _, idefics3_folder = idefics3
    with pytest.raises(ValueError, match="videos: the idefics3 vision tower takes images only"):
        VisionTower.open(idefics3_folder, threads=1).embed_videos(
            [(np.zeros((2, 8, 8, 3), np.uint8), [0.0, 1.0])]
        )
    # These folders' text graphs (a tiny llama's) take no media embeddings: their model reads none.
    assert media_support(idefics3_folder) == {"vision": False, "video": False, "audio": False}
    assert media_support(tiny_llama_model) == {"vision": False, "video": False, "audio": False}
    # A Qwen2-VL folder reads videos when its manifest names the video pad token, as exports now do.
    vision = Manifest.read(qwen2_vl[1]).vision
    assert reads_video(qwen2_vl[1], vision) == (vision.video_token_id is not None)
    assert not reads_video(qwen2_vl[1], dataclasses.replace(vision, video_token_id=None))


def test_media_beyond_the_context_budget_are_refused_naming_the_item(qwen2_vl):
    _, folder = qwen2_vl
    tower = VisionTower.open(folder, threads=1)
    images = [random_image(56, 56, 1), random_image(112, 112, 2)]
    sizes = [e.num_tokens for e in tower.embed_images(images)]
    assert tower.embed_images(images, token_budget=sum(sizes))  # exactly fits
    with pytest.raises(ValueError, match=r"images\[1\]: the media take \d+ prompt tokens.*more than the \d+"):
        tower.embed_images(images, token_budget=sum(sizes) - 1)
    frames = np.stack([random_image(56, 56, s) for s in range(4)])
    with pytest.raises(ValueError, match=r"videos\[0\]"):
        tower.embed_videos([(frames, np.arange(4) / 2)], token_budget=1)
