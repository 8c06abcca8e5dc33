"""Images through the whole pipeline: a tiny random Idefics3 exported, its image embeddings fed to
the step graph, checked against transformers on the same image.

The checkpoint is built by transformers here; the export is the real one (text model as llama,
vision tower as its own graph, the step graph taking ``media_embeds`` / ``media_rows``).
"""

from __future__ import annotations

import numpy as np
import pytest
from media_engine import engine_core, first_logits, run, run_beside_text, submit
from support.lazy import torch
from support.zoo import loaded as loaded_model
from vision_helpers import (
    IDEFICS3_IMAGE_TOKEN,
    assert_close_in_scale,
    random_image,
)

from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.step_graph import MEDIA_INPUTS
from clika_runtime.engine.prompt_media import prompt_media
from clika_runtime.media.idefics3 import preprocess_idefics3
from clika_runtime.media.vision_tower import VisionTower

NEW_TOKENS = 12


@pytest.fixture(scope="module")
def idefics3(idefics3_chat_model):
    return idefics3_chat_model.reference, idefics3_chat_model.folder


@pytest.fixture(scope="module")
def loaded(idefics3):
    with loaded_model(idefics3[1]) as model:
        yield model


def image_prompt(model, tower: VisionTower, image: np.ndarray, question: str = "What is this?"):
    """The prompt ids with the image's tokens expanded and the media for them."""
    (embedding,) = tower.embed_images([image])
    text = f"<|im_start|>User:{embedding.prompt_text} {question}<end_of_utterance>\nAssistant:"
    ids = model.tokenizer.encode(text, add_special_tokens=False)
    media = prompt_media(ids, IDEFICS3_IMAGE_TOKEN, [(embedding.embeds, embedding.digest)])
    return ids, media


def reference(hf_model, ids, image, settings):
    tiles = preprocess_idefics3(image, settings)
    pixels = torch.from_numpy(tiles.pixel_values)[None]
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        first = hf_model(input_ids=input_ids, pixel_values=pixels).logits[0, -1].numpy()
        out = hf_model.generate(
            input_ids=input_ids, pixel_values=pixels, max_new_tokens=NEW_TOKENS, do_sample=False
        )
    return first, out[0, len(ids) :].tolist()


def test_export_writes_a_vision_folder_whose_graphs_take_media(idefics3):
    _, folder = idefics3
    manifest = Manifest.read(folder)
    assert manifest.vision is not None and manifest.vision.family == "idefics3"
    assert manifest.architecture.family == "llama"
    for key, spec in manifest.graphs.items():
        assert set(MEDIA_INPUTS) <= set(spec.inputs), key


def test_first_logits_match_transformers_on_the_same_image(idefics3, loaded):
    hf_model, folder = idefics3
    tower = VisionTower.open(folder)
    image = random_image(90, 150, 3)
    ids, media = image_prompt(loaded, tower, image)
    assert media is not None and len(media.positions) > 16  # tiles and the global view
    ours = first_logits(folder, ids, media)
    first, _ = reference(hf_model, ids, image, tower.settings)
    assert_close_in_scale(ours, first)


@pytest.mark.parametrize(
    "mode,kv_dtype",
    [("continuous", "float32"), ("paged", "float32"), ("continuous", "int8"), ("paged", "int8")],
)
def test_greedy_continuation_beside_a_text_request_in_chunks(idefics3, loaded, mode, kv_dtype):
    hf_model, folder = idefics3
    tower = VisionTower.open(folder)
    image = random_image(120, 80, 7)
    ids, media = image_prompt(loaded, tower, image)
    _, expected = reference(hf_model, ids, image, tower.settings)
    core = engine_core(folder, mode, kv_dtype=kv_dtype)  # 48-token steps: the image's rows come in chunks
    text_ids = loaded.tokenizer.encode("<|im_start|>User: hello there<end_of_utterance>\nAssistant:")
    text_sink, image_sink = run_beside_text(core, text_ids, ids, media, NEW_TOKENS)
    if kv_dtype == "float32":
        assert image_sink.tokens == expected
    else:  # the int8 cache is close, not equal: the reply starts the same
        assert image_sink.tokens[:2] == expected[:2]
    assert len(text_sink.tokens) == NEW_TOKENS and text_sink.report.finish_reason == "length"


@pytest.mark.parametrize("mode", ["continuous", "paged"])
def test_the_same_image_is_reused_next_turn_and_a_different_one_is_not(idefics3, loaded, mode):
    hf_model, folder = idefics3
    tower = VisionTower.open(folder)
    first, other = random_image(100, 100, 11), random_image(100, 100, 12)  # same size: same placeholders
    ids, media = image_prompt(loaded, tower, first)
    core = engine_core(folder, mode)
    seq, sink = submit(core, ids, media, NEW_TOKENS)
    run(core)
    # The next turn: the whole first exchange, then a new question; the same image's media.
    follow_up = loaded.tokenizer.encode("<end_of_utterance>\nUser: and now?<end_of_utterance>\n")
    turn = ids + sink.tokens + follow_up
    again = prompt_media(turn, IDEFICS3_IMAGE_TOKEN, [(media.embeds, tower.embed_images([first])[0].digest)])
    second, second_sink = submit(core, turn, again, NEW_TOKENS)
    run(core)
    # The image's prefix and the reply came from the cache.
    assert second_sink.report.cached_tokens >= len(ids)
    other_ids, other_media = image_prompt(loaded, tower, other)
    assert other_ids == ids  # the very same tokens, another image
    third, third_sink = submit(core, other_ids, other_media, NEW_TOKENS)
    run(core)
    assert third_sink.report.cached_tokens <= int(other_media.positions[0])  # nothing from the image on
    _, expected = reference(hf_model, other_ids, other, tower.settings)
    assert third_sink.tokens == expected
