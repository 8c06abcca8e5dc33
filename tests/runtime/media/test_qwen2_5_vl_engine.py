"""Qwen2.5-VL end to end: a tiny random checkpoint exported (qwen2 text model rotating by M-RoPE, the
windowed vision tower as its own graph), its prompts, vision embeddings, first logits and greedy
replies against transformers' Qwen2_5_VLProcessor and generate on the same images: alone, in chunks
beside a text request, and with the image's prefix reused on the next turn.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
from media_engine import engine_core, first_logits, run, run_beside_text, submit
from qwen2_5_vl_helpers import qwen2_5_vl_processor
from support.lazy import torch
from support.zoo import loaded
from vision_helpers import QWEN2_VL_IMAGE_TOKEN, assert_close_in_scale, random_image

from clika_export.api import export
from clika_export.checkpoint import CheckpointError
from clika_runtime import Tensor, modelverse
from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.contract.step_graph import MEDIA_INPUTS, MROPE_INPUTS
from clika_runtime.engine.prompt_media import prompt_media
from clika_runtime.media.mrope_positions import mrope_span
from clika_runtime.media.qwen2_5_vl_windows import window_inputs
from clika_runtime.media.qwen2_vl import preprocess_qwen2_vl
from clika_runtime.media.vision_tower import VisionTower

NEW_TOKENS = 12
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module")
def qwen2_5_vl(qwen2_5_vl_chat_model):
    with loaded(qwen2_5_vl_chat_model.folder) as model:
        yield (*qwen2_5_vl_chat_model, model)


def rendered(model, question: str = QUESTION) -> str:
    return model.render(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    )


def reference(hf_model, hf, text: str, images: list[np.ndarray], new_tokens: int = NEW_TOKENS):
    """transformers' inputs, first logits and greedy reply for ``text`` with ``images``."""
    inputs = qwen2_5_vl_processor(hf)(text=[text], images=images, return_tensors="pt")
    with torch.no_grad():
        first = hf_model(**inputs).logits[0, -1].numpy()
        out = hf_model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    return inputs, first, out[0, inputs["input_ids"].shape[1] :].tolist()


def test_export_writes_a_windowed_tower_and_step_graphs_that_take_media_and_mrope(qwen2_5_vl):
    _, _, folder, model = qwen2_5_vl
    manifest = Manifest.read(folder)
    vision = manifest.vision
    assert vision is not None and vision.family == "qwen2_vl"  # Qwen2-VL's processor and prompts
    assert {"window_order", "window_bias", "window_restore"} <= set(vision.inputs)
    assert vision.details["window_size"] == 2 and vision.details["full_attention_blocks"] == [1]
    assert manifest.architecture.family == "qwen2"
    for key, spec in manifest.graphs.items():
        assert set(MEDIA_INPUTS) | set(MROPE_INPUTS) <= set(spec.inputs), key
    assert model.supports_vision and not model.supports_video  # video positions count seconds


@pytest.mark.parametrize("count", [1, 2])
def test_prompt_ids_and_rotary_positions_equal_transformers(qwen2_5_vl, count):
    hf_model, hf, _, model = qwen2_5_vl
    images = [random_image(60, 90, 1), random_image(100, 44, 2)][:count]
    parts = [{"type": "image"}, {"type": "text", "text": "and"}] * count
    text = model.render([{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}])
    inputs = qwen2_5_vl_processor(hf)(text=[text], images=images, return_tensors="pt")
    ids, media = model.encode_with_images(text, images)
    assert ids == inputs["input_ids"][0].tolist()
    expected, delta = hf_model.model.get_rope_index(
        inputs["input_ids"], inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"]
    )
    ours = np.repeat(np.arange(len(ids))[:, None], 3, axis=1)
    ours[media.rope.rows] = media.rope.positions
    assert (ours.T == expected[:, 0].numpy()).all()
    assert media.rope.delta == int(delta) < 0


def test_vision_embeddings_match_transformers_across_windows(qwen2_5_vl):
    hf_model, hf, folder, _ = qwen2_5_vl
    # 5 x 4 merged patches in 2 x 2 windows, the last row of them cut short; two images in one run.
    images = [random_image(150, 140, 3), random_image(60, 90, 4)]
    tower = VisionTower.open(folder, threads=1)
    ours = np.concatenate([e.embeds for e in tower.embed_images(images)])
    inputs = qwen2_5_vl_processor(hf).image_processor(images=images, return_tensors="pt")
    grids = [tuple(g) for g in inputs["image_grid_thw"].tolist()]
    assert grids == [(1, 10, 8), (1, 4, 6)]
    ours_pixels = np.concatenate(
        [preprocess_qwen2_vl(image, tower.settings).pixel_values for image in images]
    )
    assert np.abs(ours_pixels - inputs["pixel_values"].numpy()).max() <= 1e-5
    windows = window_inputs(grids, merge=2, window=2)
    assert len(np.unique(windows.bias, axis=0)) > 2  # several windows per image
    with torch.no_grad():
        ref = hf_model.model.visual(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"]).pooler_output
    assert_close_in_scale(ours, ref.numpy())


def test_first_logits_match_transformers_on_the_same_image(qwen2_5_vl):
    hf_model, hf, folder, model = qwen2_5_vl
    image = random_image(90, 60, 2)
    text = rendered(model)
    ids, media = model.encode_with_images(text, [image])
    ours = first_logits(folder, ids, media)
    _, first, _ = reference(hf_model, hf, text, [image])
    assert_close_in_scale(ours, first)


def test_generate_with_an_image_equals_transformers(qwen2_5_vl):
    hf_model, hf, _, model = qwen2_5_vl
    image = random_image(70, 110, 3)
    batches = model.stream_generate(
        prompt=QUESTION, images=[Tensor(image)], decode=False, max_new_tokens=NEW_TOKENS, temperature=0.0,
        ignore_eos=True,
    )  # fmt: skip
    ours = [token for batch in batches for token in batch]
    inputs, _, expected = reference(hf_model, hf, rendered(model), [image])
    assert model.report.prompt_tokens == inputs["input_ids"].shape[1]
    assert ours == expected


@pytest.mark.parametrize("mode", ["continuous", "paged"])
def test_the_image_prefix_is_reused_next_turn_and_the_replies_equal_transformers(qwen2_5_vl, mode):
    hf_model, hf, folder, model = qwen2_5_vl
    image = random_image(84, 112, 11)
    text = rendered(model)
    ids, media = model.encode_with_images(text, [image])
    inputs, _, first_reply = reference(hf_model, hf, text, [image])
    core = engine_core(folder, mode, max_step_tokens=16)  # the prompt comes in chunks
    text_ids = model.tokenizer.encode("<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n")
    text_sink, sink = run_beside_text(core, text_ids, ids, media, NEW_TOKENS)
    assert sink.tokens == first_reply
    with torch.no_grad():
        alone = hf_model.generate(
            input_ids=torch.tensor([text_ids]), max_new_tokens=NEW_TOKENS, do_sample=False
        )
    assert text_sink.tokens == alone[0, len(text_ids) :].tolist()  # the text row beside it, plain rope
    follow_up = model.tokenizer.encode(
        "<|im_end|>\n<|im_start|>user\nand now?<|im_end|>\n<|im_start|>assistant\n"
    )
    turn = ids + sink.tokens + follow_up
    (embedding,) = VisionTower.open(folder, threads=1).embed_images([image])
    again = prompt_media(turn, QWEN2_VL_IMAGE_TOKEN, [(embedding.embeds, embedding.digest)])
    again = dataclasses.replace(again, rope=mrope_span(len(turn), again.positions, [embedding.grid]))
    _, second = submit(core, turn, again, NEW_TOKENS)
    run(core)
    assert second.report.cached_tokens >= len(ids)  # the image's prefix and the reply from the cache
    input_ids = torch.tensor([turn])
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
    assert second.tokens == out[0, len(turn) :].tolist()


def test_a_session_reuses_its_image_prefix_next_turn(qwen2_5_vl):
    hf_model, hf, _, model = qwen2_5_vl
    image = random_image(84, 84, 13)
    session = model.chat_session()
    first = session.send(
        QUESTION, images=[image], max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True
    )
    prompt = session.report.prompt_tokens
    second = session.send("And the colours?", max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    assert session.report.cached_tokens >= prompt
    history = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "And the colours?"},
    ]
    _, _, expected = reference(hf_model, hf, model.render(history), [image])
    assert second == model.tokenizer.decode(expected)


def test_videos_are_refused_by_name(qwen2_5_vl):
    _, _, _, model = qwen2_5_vl
    clip = (np.zeros((2, 56, 56, 3), np.uint8), np.array([0.0, 0.5]))
    with pytest.raises(ValueError, match="video"):
        model.generate(QUESTION, videos=[clip], max_new_tokens=2)


def test_a_hub_layout_checkpoint_exports_the_same_model(qwen2_5_vl, tmp_path):
    """The hub's Qwen2.5-VL folders: text settings at the config's top level (rope_scaling's mrope),
    weights under ``model.layers.*`` / ``visual.*`` / ``lm_head``."""
    from safetensors.numpy import load_file, save_file

    _, hf, _, model = qwen2_5_vl
    flat = tmp_path / "hub-hf"
    shutil.copytree(hf, flat)
    config = json.loads((flat / "config.json").read_text())
    text = config.pop("text_config")
    text["rope_scaling"] = {"type": "mrope", "mrope_section": text.pop("rope_parameters")["mrope_section"]}
    text.pop("model_type")
    (flat / "config.json").write_text(json.dumps({**config, **text, "rope_theta": 1e6}))
    (weights,) = flat.glob("*.safetensors")
    renamed = {
        name.replace("model.language_model.", "model.").replace("model.visual.", "visual."): tensor
        for name, tensor in load_file(weights).items()
    }
    assert any(n.startswith("visual.blocks.") for n in renamed) and any(
        n.startswith("model.layers.") for n in renamed
    )
    save_file(renamed, weights)
    folder = export(flat, tmp_path / "model", context_window=512, progress=False)
    image = random_image(56, 84, 19)
    other = modelverse.load(folder, threads=1)
    try:
        assert other.generate(QUESTION, images=[image], max_new_tokens=6, temperature=0.0) == model.generate(
            QUESTION, images=[image], max_new_tokens=6, temperature=0.0
        )
    finally:
        other.close()


@pytest.mark.parametrize(
    "change,message",
    [
        ({"window_size": 20}, "window_size 20 is smaller than one merged patch"),
        ({"fullatt_block_indexes": [1, 3]}, r"fullatt_block_indexes \[1, 3\] name blocks outside the 3"),
    ],
)
def test_a_malformed_window_config_is_refused_naming_it(qwen2_5_vl, tmp_path, change, message):
    _, hf, _, _ = qwen2_5_vl
    bad = tmp_path / "bad-hf"
    shutil.copytree(hf, bad)
    config = json.loads((bad / "config.json").read_text())
    config["vision_config"].update(change)
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        export(bad, tmp_path / "model", progress=False)


def test_a_manifest_without_its_window_size_is_refused(qwen2_5_vl):
    _, _, folder, _ = qwen2_5_vl
    spec = Manifest.read(folder).vision
    broken = dataclasses.replace(spec, details={k: v for k, v in spec.details.items() if k != "window_size"})
    with pytest.raises(ManifestError, match="window_size must be a positive integer"):
        VisionTower(folder, broken, VisionTower.open(folder).settings)
