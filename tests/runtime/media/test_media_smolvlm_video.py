"""SmolVLM2-style videos through an Idefics3 vision tower: sampled frames embedded as unsplit images,
the prompt text with the frame count in words and each frame's timestamp, against transformers'
SmolVLM processor (its video-token expansion) and model on the same frames."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support.lazy import torch
from vision_helpers import IDEFICS3_PROCESSOR, assert_close_in_scale, build_idefics3, random_image

from clika_export.media.vision_export import attach_vision, export_vision
from clika_runtime.media.arguments import video_clips
from clika_runtime.media.processor_config import processor_settings
from clika_runtime.media.smolvlm_video import number_words, preprocess_smolvlm_frames
from clika_runtime.media.video import sample_frames
from clika_runtime.media.vision_tower import VisionTower

num2words = pytest.importorskip("num2words")
smolvlm_processing = pytest.importorskip("transformers.models.smolvlm.processing_smolvlm")
idefics3_pil = pytest.importorskip("transformers.models.idefics3.image_processing_pil_idefics3")
video_utils = pytest.importorskip("transformers.video_utils")

SAMPLING = {"fps": 1, "max_frames": 8, "video_size": {"longest_edge": 96}}
VIDEO_PROCESSOR = {**IDEFICS3_PROCESSOR, "video_sampling": SAMPLING}


@pytest.fixture(scope="module")
def smolvlm2(tmp_path_factory, tiny_llama_model, tiny_zoo):
    model, plain = tiny_zoo.checkpoint(build_idefics3)
    checkpoint = tiny_zoo.variant(plain, with_video_sampling)
    folder = Path(shutil.copytree(tiny_llama_model, tmp_path_factory.mktemp("smolvlm2") / "model"))
    attach_vision(folder, export_vision(checkpoint, folder))
    return model, folder


def with_video_sampling(checkpoint):
    (checkpoint / "preprocessor_config.json").write_text(json.dumps(VIDEO_PROCESSOR))


def clip(frames: int, rate: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    pixels = np.stack([random_image(40, 60, seed + i) for i in range(frames)])
    return pixels, np.arange(frames) / rate


def test_frame_counts_in_words_are_num2words_ones():
    assert [number_words(n) for n in range(1000)] == [num2words.num2words(n) for n in range(1000)]
    with pytest.raises(ValueError, match="0 to 999"):
        number_words(1000)


@pytest.mark.parametrize(("frames", "rate", "sampled"), [(30, 10.0, 3), (25, 1.0, 8)])
def test_a_clip_embeds_and_expands_as_smolvlm2_does(smolvlm2, frames, rate, sampled):
    model, folder = smolvlm2
    video = clip(frames, rate, seed=frames)
    [embedding] = VisionTower.open(folder, threads=1).embed_videos([video])
    [picked] = [sample_frames(c, fps=1.0, max_frames=8) for c in video_clips([video])]
    assert len(picked.timestamps) == sampled and embedding.timestamps == tuple(picked.timestamps)
    # The prompt: transformers' own expansion of a <video> marker for these frames.
    indices = [int(round(t * rate)) for t in picked.timestamps]
    metadata = video_utils.VideoMetadata(
        total_num_frames=frames, fps=rate, duration=frames / rate, frames_indices=indices
    )
    per_frame = embedding.num_tokens // sampled
    fake = SimpleNamespace(
        image_seq_len=per_frame,
        image_token="<image>",
        fake_image_token="<fake_token_around_image>",
        global_image_token="<global-img>",
    )
    expected = smolvlm_processing.SmolVLMProcessor.replace_video_token(
        fake, {"pixel_values": np.zeros((1, sampled)), "video_metadata": [metadata]}, 0
    )
    assert embedding.prompt_text == expected
    assert embedding.prompt_text.count("<image>") == embedding.num_tokens
    # The frames: unsplit images at the video size, as the (Pillow) image processor makes them.
    settings = {k: v for k, v in IDEFICS3_PROCESSOR.items() if k != "image_processor_type"}
    settings.update(do_image_splitting=False, size=SAMPLING["video_size"])
    reference = idefics3_pil.Idefics3ImageProcessorPil(**settings)
    inputs = reference(list(picked.frames), return_tensors="pt")
    ours = preprocess_smolvlm_frames(picked, processor_settings(VIDEO_PROCESSOR))
    ref_pixels = inputs["pixel_values"][0].numpy()
    assert ours.shape == ref_pixels.shape and float(np.abs(ours - ref_pixels).max()) <= 1e-5
    with torch.no_grad():
        ref = model.model.get_image_features(
            pixel_values=inputs["pixel_values"], pixel_attention_mask=inputs["pixel_attention_mask"]
        )
    rows = np.concatenate([p.reshape(-1, p.shape[-1]).numpy() for p in ref.pooler_output])
    assert_close_in_scale(embedding.embeds, rows)


def test_a_tower_without_video_sampling_takes_no_videos(tmp_path, tiny_llama_model):
    _, checkpoint = build_idefics3(tmp_path / "hf")
    folder = Path(shutil.copytree(tiny_llama_model, tmp_path / "model"))
    attach_vision(folder, export_vision(checkpoint, folder))
    with pytest.raises(ValueError, match="takes images only"):
        VisionTower.open(folder, threads=1).embed_videos([clip(2, 1.0, seed=1)])


def test_a_bad_video_sampling_is_refused_by_name():
    with pytest.raises(ValueError, match="video_sampling.fps must be positive"):
        processor_settings({**VIDEO_PROCESSOR, "video_sampling": {**SAMPLING, "fps": 0}})
    with pytest.raises(ValueError, match="video_sampling must be dict"):
        processor_settings({**VIDEO_PROCESSOR, "video_sampling": 3})
