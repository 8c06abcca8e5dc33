"""Images on the public API: ``generate`` / ``chat`` / ``send`` with ``images=`` on an exported tiny
Idefics3, against transformers' Idefics3Processor and generate on the same image."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from support.lazy import torch, transformers
from support.zoo import loaded
from vision_helpers import (
    IDEFICS3_PROCESSOR,
    build_idefics3,
    idefics3_tokenizer,
    random_image,
)

from clika_export.media.vision_export import attach_vision, export_vision
from clika_runtime import Tensor, modelverse

NEW_TOKENS = 10
QUESTION = "What is this?"


@pytest.fixture(scope="module")
def idefics3(idefics3_chat_model):
    with loaded(idefics3_chat_model.folder) as model:
        yield idefics3_chat_model.reference, model


def processor():
    """transformers' own Idefics3 processor over the same tokenizer and image settings."""
    settings = {k: v for k, v in IDEFICS3_PROCESSOR.items() if k != "image_processor_type"}
    return transformers.Idefics3Processor(
        image_processor=transformers.Idefics3ImageProcessor(**settings),
        tokenizer=transformers.PreTrainedTokenizerFast(tokenizer_object=idefics3_tokenizer()),
        image_seq_len=16,  # (64 / 8)^2 patches per tile, pixel-shuffled by 2 x 2
    )


def transformers_reply(hf_model, text: str, images: list[np.ndarray]) -> tuple[list[int], list[int]]:
    inputs = processor()(text=[text], images=[images], return_tensors="pt")
    with torch.no_grad():
        out = hf_model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    prompt = inputs["input_ids"][0].tolist()
    return prompt, out[0, len(prompt) :].tolist()


def greedy_ids(model, **kwargs) -> list[int]:
    batches = model.stream_generate(
        decode=False, max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, **kwargs
    )
    return [token for batch in batches for token in batch]


def test_generate_with_an_image_equals_transformers(idefics3):
    hf_model, model = idefics3
    assert model.supports_vision and not model.supports_audio
    image = random_image(90, 150, 3)
    events = []
    model.set_stage_observer(events.append)
    try:
        ours = greedy_ids(model, prompt=QUESTION, images=[Tensor(image)])
    finally:
        model.set_stage_observer(None)
    rendered = model.render(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    )
    prompt, expected = transformers_reply(hf_model, rendered, [image])
    assert model.encode_with_images(rendered, [image])[0] == prompt  # the processor's image tokens
    assert model.report.prompt_tokens == len(prompt)
    assert ours == expected
    vision = [e for e in events if e.stage == "vision"]
    assert len(vision) == 1 and vision[0].tokens == prompt.count(319) and vision[0].detail["images"] == 1
    assert vision[0].detail["cached"] == 0


def test_chat_puts_the_images_on_the_last_user_turn(idefics3):
    hf_model, model = idefics3
    image = random_image(64, 64, 5)
    messages = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    messages.append({"role": "user", "content": QUESTION})
    reply = model.chat(messages, images=[image], max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    rendered = model.render(
        [*messages[:2], {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    )
    _, expected = transformers_reply(hf_model, rendered, [image])
    assert reply == model.tokenizer.decode(expected)


def test_a_session_reuses_its_image_next_turn(idefics3):
    _, model = idefics3
    session = model.chat_session()
    first = random_image(80, 120, 8)
    events = []
    model.set_stage_observer(events.append)
    try:
        session.send(QUESTION, images=[first], max_new_tokens=4, temperature=0.0)
        prompt = session.report.prompt_tokens
        session.send("And the colours?", max_new_tokens=4, temperature=0.0)
    finally:
        model.set_stage_observer(None)
    # The history renders the image again; its embeddings and KV come from the caches.
    assert session.report.cached_tokens >= prompt
    vision = [e.detail for e in events if e.stage == "vision"]
    assert vision == [{"images": 1, "cached": 0}, {"images": 1, "cached": 1}]
    other = model.chat_session()
    other.send(QUESTION, images=[random_image(80, 120, 9)], max_new_tokens=4, temperature=0.0)
    assert other.report.prompt_tokens == prompt  # the same placeholder tokens, another image
    assert other.report.cached_tokens < 10  # only the template's opening, nothing of the image


@pytest.mark.parametrize(
    "images,message",
    [
        ([np.zeros((8, 8), np.uint8)], r"images\[0\]"),
        ([np.zeros((8, 8, 3), np.int32)], r"images\[0\].*dtype"),
        ([random_image(8, 8, 1)] * 17, "at most 16"),
        ([random_image(128, 128, i) for i in range(7)], r"images\[6\].*context window"),
    ],
)
def test_bad_images_are_refused_naming_the_argument(idefics3, images, message):
    _, model = idefics3
    with pytest.raises(ValueError, match=message):
        model.generate(QUESTION, images=images, max_new_tokens=2)


def test_a_marker_count_that_disagrees_is_refused(idefics3):
    _, model = idefics3
    with pytest.raises(ValueError, match="images"):
        model.generate(f"{QUESTION} <image>", images=[random_image(8, 8, 1)], max_new_tokens=2)


def test_audio_and_text_only_models_refuse_by_name(idefics3, tiny_model):
    _, model = idefics3
    with pytest.raises(ValueError, match="takes no audio"):
        model.generate(QUESTION, audio=[np.zeros(16000, np.float32)])
    assert not model.supports_video  # no video_sampling in its processor config
    with pytest.raises(ValueError, match="reads text and images; it takes no videos"):
        model.generate(QUESTION, videos=[(np.zeros((1, 8, 8, 3), np.uint8), np.zeros(1))])
    with pytest.raises(ValueError, match="reads text only; it takes no images"):
        tiny_model.generate(QUESTION, images=[random_image(8, 8, 1)])
    assert not tiny_model.supports_vision


def test_a_vision_graph_beside_a_step_graph_without_media_inputs_is_not_used(tiny_llama_model, tmp_path):
    _, hf = build_idefics3(tmp_path / "hf")
    folder = shutil.copytree(tiny_llama_model, tmp_path / "model")
    attach_vision(folder, export_vision(hf, folder))  # a text step graph: no media inputs
    model = modelverse.load(folder, threads=1)
    try:
        assert not model.supports_vision
        with pytest.raises(ValueError, match="reads text only; it takes no images"):
            model.generate(QUESTION, images=[random_image(8, 8, 1)])
    finally:
        model.close()
