"""Qwen2-VL end to end: a tiny random checkpoint exported (qwen2 text model rotating by M-RoPE, the
vision tower as its own graph), its prompts, first logits and greedy replies against transformers'
Qwen2VLProcessor and generate on the same image: alone, in chunks beside a text request, and with
the image's prefix reused on the next turn, in both KV modes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
from media_engine import Collected, engine_core, first_logits, run, run_beside_text, submit
from support.lazy import torch
from support.zoo import loaded
from vision_helpers import (
    QWEN2_VL_IMAGE_TOKEN,
    assert_close_in_scale,
    qwen2_vl_processor,
    random_image,
)

from clika_export.api import export
from clika_export.checkpoint import CheckpointError
from clika_runtime import Tensor, modelverse
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.step_graph import MEDIA_INPUTS, MROPE_INPUTS
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.prompt_media import prompt_media
from clika_runtime.engine.sequence import Request, Sequence
from clika_runtime.media.mrope_positions import mrope_span
from clika_runtime.media.vision_tower import VisionTower

NEW_TOKENS = 12
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module")
def qwen2_vl(qwen2_vl_chat_model):
    with loaded(qwen2_vl_chat_model.folder) as model:
        yield (*qwen2_vl_chat_model, model)


def rendered(model, question: str = QUESTION) -> str:
    return model.render(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    )


def reference(hf_model, hf, text: str, image: np.ndarray, new_tokens: int = NEW_TOKENS):
    """transformers' prompt ids, first logits and greedy reply for ``text`` with ``image``."""
    inputs = qwen2_vl_processor(hf)(text=[text], images=[image], return_tensors="pt")
    with torch.no_grad():
        first = hf_model(**inputs).logits[0, -1].numpy()
        out = hf_model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    prompt = inputs["input_ids"][0].tolist()
    return prompt, first, out[0, len(prompt) :].tolist(), inputs


def continued(hf_model, inputs, ids: list[int]) -> list[int]:
    """transformers' greedy reply to ``ids`` (a later turn holding the same image's tokens)."""
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        out = hf_model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            mm_token_type_ids=(input_ids == QWEN2_VL_IMAGE_TOKEN).int(),
            pixel_values=inputs["pixel_values"],
            image_grid_thw=inputs["image_grid_thw"],
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
        )
    return out[0, len(ids) :].tolist()


def test_export_writes_step_graphs_that_take_media_and_mrope_positions(qwen2_vl):
    _, _, folder, _ = qwen2_vl
    manifest = Manifest.read(folder)
    assert manifest.vision is not None and manifest.vision.family == "qwen2_vl"
    assert manifest.architecture.family == "qwen2"
    assert manifest.quality["reference_check"]["max_rel_logits_error"] < 1e-4  # text: plain positions
    for key, spec in manifest.graphs.items():
        assert set(MEDIA_INPUTS) | set(MROPE_INPUTS) <= set(spec.inputs), key


@pytest.mark.parametrize("count", [1, 2, 3])
def test_prompt_ids_and_rotary_positions_equal_transformers(qwen2_vl, count):
    hf_model, hf, _, model = qwen2_vl
    # The third is the first again: the tower's cache gives it, the grids stay in prompt order.
    images = [random_image(60, 90, 1), random_image(100, 44, 2), random_image(60, 90, 1)][:count]
    parts = [{"type": "image"}, {"type": "text", "text": "and"}] * count
    text = model.render([{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}])
    inputs = qwen2_vl_processor(hf)(text=[text], images=images, return_tensors="pt")
    ids, media = model.encode_with_images(text, images)
    assert ids == inputs["input_ids"][0].tolist()
    expected, delta = hf_model.model.get_rope_index(
        inputs["input_ids"], inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"]
    )
    ours = np.repeat(np.arange(len(ids))[:, None], 3, axis=1)
    ours[media.rope.rows] = media.rope.positions
    assert (ours.T == expected[:, 0].numpy()).all()
    assert media.rope.delta == int(delta) < 0  # the image's tokens take fewer positions than slots


def test_first_logits_match_transformers_on_the_same_image(qwen2_vl):
    hf_model, hf, folder, model = qwen2_vl
    image = random_image(90, 60, 2)
    text = rendered(model)
    ids, media = model.encode_with_images(text, [image])
    ours = first_logits(folder, ids, media)
    _, first, _, _ = reference(hf_model, hf, text, image)
    assert_close_in_scale(ours, first)


def test_generate_with_an_image_equals_transformers(qwen2_vl):
    hf_model, hf, _, model = qwen2_vl
    image = random_image(70, 110, 3)
    batches = model.stream_generate(
        prompt=QUESTION, images=[Tensor(image)], decode=False, max_new_tokens=NEW_TOKENS, temperature=0.0,
        ignore_eos=True,
    )  # fmt: skip
    ours = [token for batch in batches for token in batch]
    prompt, _, expected, _ = reference(hf_model, hf, rendered(model), image)
    assert model.report.prompt_tokens == len(prompt)
    assert ours == expected


def greedy(new_tokens: int = NEW_TOKENS) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)


@pytest.mark.parametrize(
    "mode,kv_dtype",
    [("continuous", "float32"), ("paged", "float32"), ("continuous", "int8"), ("paged", "int8")],
)
def test_greedy_continuation_beside_a_text_request_in_chunks(qwen2_vl, mode, kv_dtype):
    hf_model, hf, folder, model = qwen2_vl
    image = random_image(84, 56, 7)
    text = rendered(model)
    ids, media = model.encode_with_images(text, [image])
    _, _, expected, _ = reference(hf_model, hf, text, image)
    # 16-token steps: the prompt comes in chunks
    core = engine_core(folder, mode, kv_dtype=kv_dtype, max_step_tokens=16)
    text_ids = model.tokenizer.encode("<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n")
    _, text_alone = reference_text(hf_model, text_ids)
    text_sink, image_sink = run_beside_text(core, text_ids, ids, media, NEW_TOKENS)
    if kv_dtype == "float32":
        assert image_sink.tokens == expected
        assert text_sink.tokens == text_alone  # the text row rotates by its plain positions
    else:  # the int8 cache is close, not equal: the replies start the same
        assert image_sink.tokens[:2] == expected[:2] and text_sink.tokens[:2] == text_alone[:2]


def reference_text(hf_model, ids: list[int]) -> tuple[list[int], list[int]]:
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        out = hf_model.generate(input_ids=input_ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    return ids, out[0, len(ids) :].tolist()


@pytest.mark.parametrize("mode", ["continuous", "paged"])
def test_the_image_prefix_is_reused_next_turn_and_the_reply_equals_transformers(qwen2_vl, mode):
    hf_model, hf, folder, model = qwen2_vl
    image = random_image(56, 84, 11)
    text = rendered(model)
    ids, media = model.encode_with_images(text, [image])
    _, _, first_reply, inputs = reference(hf_model, hf, text, image)
    core = engine_core(folder, mode, max_step_tokens=16)
    _, sink = submit(core, ids, media, NEW_TOKENS)
    run(core)
    assert sink.tokens == first_reply
    follow_up = model.tokenizer.encode(
        "<|im_end|>\n<|im_start|>user\nand now?<|im_end|>\n<|im_start|>assistant\n"
    )
    turn = ids + sink.tokens + follow_up
    (embedding,) = VisionTower.open(folder).embed_images([image])
    again = prompt_media(turn, QWEN2_VL_IMAGE_TOKEN, [(embedding.embeds, embedding.digest)])
    again = dataclasses.replace(again, rope=mrope_span(len(turn), again.positions, [embedding.grid]))
    _, second_sink = submit(core, turn, again, NEW_TOKENS)
    run(core)
    assert second_sink.report.cached_tokens >= len(ids)  # the image's prefix and the reply from the cache
    assert second_sink.tokens == continued(hf_model, inputs, turn)


def test_text_embeddings_run_on_the_vision_folder(qwen2_vl):
    _, _, _, model = qwen2_vl
    (vector,) = model.embed(["hello there"])
    assert np.isfinite(vector).all() and float(np.abs(vector).max()) > 0


def test_a_session_reuses_its_image_prefix_next_turn(qwen2_vl):
    hf_model, hf, _, model = qwen2_vl
    image = random_image(84, 84, 13)
    session = model.chat_session()
    events = []
    model.set_stage_observer(events.append)
    try:
        first = session.send(
            QUESTION, images=[image], max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True
        )
        prompt = session.report.prompt_tokens
        second = session.send("And the colours?", max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    finally:
        model.set_stage_observer(None)
    assert session.report.cached_tokens >= prompt  # the image's KV (and the first reply's) reused
    # The history renders the image again: its embeddings come from the tower's cache.
    vision = [e.detail for e in events if e.stage == "vision"]
    assert vision == [{"images": 1, "cached": 0}, {"images": 1, "cached": 1}]
    history = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "And the colours?"},
    ]
    _, _, expected, _ = reference(hf_model, hf, model.render(history), image, NEW_TOKENS)
    assert second == model.tokenizer.decode(expected)


def test_prompt_lookup_drafts_after_the_image_keep_the_greedy_reply(qwen2_vl):
    hf_model, hf, folder, model = qwen2_vl
    image = random_image(56, 56, 17)
    text = rendered(model)
    ids, media = model.encode_with_images(text, [image])
    _, _, expected, _ = reference(hf_model, hf, text, image, 24)
    core = engine_core(folder, "continuous", max_step_tokens=16)
    config = GenerationConfig(max_new_tokens=24, temperature=0.0, ignore_eos=True, prompt_lookup_num_tokens=4)
    sink = Collected()
    core.add(Sequence(Request(1, core.check_request(ids, config, media), config, media=media)), sink)
    run(core)
    assert sink.tokens == expected
    assert sink.report.draft_tokens > 0  # drafted rows ran past the prompt at index + delta


def test_media_without_rotary_positions_are_refused_by_name(qwen2_vl):
    _, _, folder, model = qwen2_vl
    ids, media = model.encode_with_images(rendered(model), [random_image(56, 56, 1)])
    core = engine_core(folder, "continuous", max_step_tokens=16)
    with pytest.raises(ValueError, match="M-RoPE and the media carry no rotary positions"):
        core.check_request(ids, greedy(), dataclasses.replace(media, rope=None))
    with pytest.raises(ValueError, match="for a .*-token prompt, not this"):
        core.check_request(ids[:-1], greedy(), media)


def test_a_first_release_config_with_its_text_settings_at_the_top_exports_the_same_model(qwen2_vl, tmp_path):
    _, hf, _, model = qwen2_vl
    flat = tmp_path / "flat-hf"
    shutil.copytree(hf, flat)
    config = json.loads((flat / "config.json").read_text())
    text = config.pop("text_config")
    text["rope_scaling"] = {"type": "mrope", "mrope_section": text.pop("rope_parameters")["mrope_section"]}
    text.pop("model_type")
    (flat / "config.json").write_text(json.dumps({**config, **text, "rope_theta": 1e6}))
    folder = export(flat, tmp_path / "model", context_window=512, progress=False)
    image = random_image(56, 84, 19)
    other = modelverse.load(folder, threads=1)
    try:
        assert other.generate(QUESTION, images=[image], max_new_tokens=6, temperature=0.0) == model.generate(
            QUESTION, images=[image], max_new_tokens=6, temperature=0.0
        )
    finally:
        other.close()


def test_a_rope_section_that_does_not_cover_the_head_is_refused_naming_it(qwen2_vl, tmp_path):
    _, hf, _, _ = qwen2_vl
    bad = tmp_path / "bad-hf"
    shutil.copytree(hf, bad)
    config = json.loads((bad / "config.json").read_text())
    config["text_config"]["rope_parameters"]["mrope_section"] = [2, 2, 2]
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"mrope_section \[2, 2, 2\] covers 6 frequencies, the rope has 8"
    ):
        export(bad, tmp_path / "model", progress=False)
