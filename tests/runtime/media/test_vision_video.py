"""``videos=`` on a SmolVLM2-style checkpoint (an Idefics3 tower whose processor config has
``video_sampling``, SmolVLM2's chat template): the prompt is transformers' expansion of the video
marker for the sampled frames, and the greedy reply equals transformers' generate on the same
frames. A tiny random Idefics3 exported in the test."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from support.lazy import torch
from support.zoo import loaded
from vision_helpers import IDEFICS3_PROCESSOR, build_idefics3_chat, random_image

from clika_runtime import modelverse
from clika_runtime.media.arguments import video_clips
from clika_runtime.media.video import sample_frames
from clika_runtime.media.vision_tower import media_support
from clika_runtime.sessions import SQLiteStore

pytest.importorskip("num2words")
smolvlm_processing = pytest.importorskip("transformers.models.smolvlm.processing_smolvlm")
idefics3_pil = pytest.importorskip("transformers.models.idefics3.image_processing_pil_idefics3")
video_utils = pytest.importorskip("transformers.video_utils")

SAMPLING = {"fps": 1, "max_frames": 4, "video_size": {"longest_edge": 64}}
QUESTION = "What happens?"
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def smolvlm2(tiny_zoo):
    hf_model, chat = tiny_zoo.checkpoint(build_idefics3_chat)
    folder = tiny_zoo.export(tiny_zoo.variant(chat, as_smolvlm2), context_window=512)
    with loaded(folder) as model:
        yield hf_model, model


def as_smolvlm2(hf):
    """Video sampling in the processor config and SmolVLM2's chat template (with <video>)."""
    (hf / "preprocessor_config.json").write_text(
        json.dumps({**IDEFICS3_PROCESSOR, "video_sampling": SAMPLING})
    )
    config = json.loads((hf / "tokenizer_config.json").read_text())
    config["chat_template"] = smolvlm_processing.DEFAULT_CHAT_TEMPLATE
    (hf / "tokenizer_config.json").write_text(json.dumps(config))


def a_clip(frames: int = 6, rate: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    return np.stack([random_image(36, 52, 40 + i) for i in range(frames)]), np.arange(frames) / rate


def transformers_reply(hf_model, model, video) -> tuple[list[int], list[int]]:
    """transformers' prompt (its video-marker expansion) and greedy reply for the sampled frames."""
    [clip] = [sample_frames(c, fps=1.0, max_frames=4) for c in video_clips([video])]
    frames, rate = len(video[1]), 1 / float(video[1][1] - video[1][0])
    metadata = video_utils.VideoMetadata(
        total_num_frames=frames,
        fps=rate,
        duration=frames / rate,
        frames_indices=[int(round(t * rate)) for t in clip.timestamps],
    )
    fake = SimpleNamespace(
        image_seq_len=16,
        image_token="<image>",
        fake_image_token="<fake_token_around_image>",
        global_image_token="<global-img>",
    )
    video_text = smolvlm_processing.SmolVLMProcessor.replace_video_token(
        fake, {"pixel_values": np.zeros((1, len(clip.timestamps))), "video_metadata": [metadata]}, 0
    )
    rendered = model.render(
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": QUESTION}]}]
    )
    assert rendered.count("<video>") == 1
    prompt = model.tokenizer.encode(rendered.replace("<video>", video_text))
    settings = {k: v for k, v in IDEFICS3_PROCESSOR.items() if k != "image_processor_type"}
    settings.update(do_image_splitting=False, size=SAMPLING["video_size"])
    pixels = idefics3_pil.Idefics3ImageProcessorPil(**settings)(list(clip.frames), return_tensors="pt")
    with torch.no_grad():
        out = hf_model.generate(
            input_ids=torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            pixel_values=pixels["pixel_values"],
            pixel_attention_mask=pixels["pixel_attention_mask"],
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
        )
    return prompt, out[0, len(prompt) :].tolist()


def greedy_ids(model, **kwargs) -> list[int]:
    batches = model.stream_generate(
        decode=False, max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, **kwargs
    )
    return [token for batch in batches for token in batch]


def test_generate_with_a_video_equals_transformers(smolvlm2):
    hf_model, model = smolvlm2
    assert model.supports_video and model.supports_vision
    video = a_clip()
    events = []
    model.set_stage_observer(events.append)
    try:
        ours = greedy_ids(model, prompt=QUESTION, videos=[video])
    finally:
        model.set_stage_observer(None)
    prompt, expected = transformers_reply(hf_model, model, video)
    assert model.report.prompt_tokens == len(prompt)
    assert ours == expected
    [vision] = [e for e in events if e.stage == "vision"]
    assert vision.detail == {"images": 0, "cached": 0, "videos": 1} and vision.tokens == 3 * 16


def test_a_session_keeps_its_video_and_reuses_it(smolvlm2):
    _, model = smolvlm2
    session = model.chat_session()
    image, video = random_image(40, 40, 3), a_clip(4, 1.0)
    session.send(QUESTION, images=[image], videos=[video], max_new_tokens=3, temperature=0.0)
    first = session.report.prompt_tokens
    session.send("And then?", max_new_tokens=3, temperature=0.0)
    assert session.report.cached_tokens >= first  # the image's and the video's KV reused
    parts = session.messages[0]["content"]
    assert [p["type"] for p in parts] == ["image", "video", "text"]


def test_videos_are_refused_by_name_where_they_cannot_be_read(smolvlm2, tiny_model):
    _, model = smolvlm2
    with pytest.raises(ValueError, match=r"videos\[0\]: frames must be \[N, H, W, 3\]"):
        model.generate(QUESTION, videos=[(np.zeros((2, 8, 8), np.uint8), np.arange(2.0))])
    with pytest.raises(
        ValueError, match=r"videos\[0\]: timestamps must be non-negative and strictly increasing"
    ):
        model.generate(QUESTION, videos=[(a_clip(2)[0], np.array([1.0, 0.5]))])
    with pytest.raises(ValueError, match="at most 4"):
        model.generate(QUESTION, videos=[a_clip(1)] * 5)
    assert not tiny_model.supports_video
    with pytest.raises(ValueError, match="reads text only; it takes no videos"):
        tiny_model.generate(QUESTION, videos=[a_clip(1)])


@pytest.mark.parametrize(
    ("processor", "video"),
    [
        ({**IDEFICS3_PROCESSOR, "video_sampling": SAMPLING}, True),  # SmolVLM2's
        (IDEFICS3_PROCESSOR, False),  # Idefics3: images only
        ({**IDEFICS3_PROCESSOR, "video_sampling": {**SAMPLING, "fps": 0}}, False),  # unreadable
    ],
)
def test_media_support_and_supports_video_give_one_answer(smolvlm2, tmp_path, processor, video):
    _, model = smolvlm2
    folder = shutil.copytree(model.local_dir, tmp_path / "model")
    (folder / "preprocessor_config.json").write_text(json.dumps(processor))
    assert media_support(folder) == {"vision": True, "video": video, "audio": False}
    copy = modelverse.load(folder, threads=1)
    try:
        assert copy.supports_vision and copy.supports_video is video and not copy.supports_audio
    finally:
        copy.close()


def test_a_conversation_with_a_video_resumes_from_a_sqlite_store(smolvlm2, tmp_path):
    _, model = smolvlm2
    greedy = {"max_new_tokens": 4, "temperature": 0.0, "ignore_eos": True}
    store = SQLiteStore(tmp_path / "conversations.db")
    chat = model.chat_session()
    chat.send(QUESTION, videos=[a_clip(4, 1.0)], **greedy)
    store.save_now("clip", chat.messages)
    saved = chat.save_kv(store.kv_path("clip"))
    unbroken = chat.send("And then?", **greedy)
    fresh = modelverse.load(model.local_dir, threads=1)  # a new engine, as in a new process
    try:
        resumed = fresh.chat_session(messages=store.get_now("clip"))
        assert resumed.restore_kv(store.kv_path("clip")) == saved > 4 * 16
        assert resumed.send("And then?", **greedy) == unbroken
        assert resumed.report.cached_tokens >= saved  # the frames' KV came from the file
    finally:
        fresh.close()
        store.close()
