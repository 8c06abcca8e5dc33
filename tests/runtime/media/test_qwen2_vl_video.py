"""Qwen2-VL videos end to end: a tiny random checkpoint (with its own video processor config) exported,
a clip's frames sampled, paired into temporal patches and embedded, its prompt ids and M-RoPE positions
and greedy reply against transformers, alone and beside an image in one prompt.

transformers' Qwen2VLVideoProcessor needs torchvision, which this environment does not have; the
reference ``pixel_values_videos`` are built from its image processor's frames, each temporal patch
the two frames' patches side by side as the video processor lays them out, and the prompt's video
pads are expanded as Qwen2VLProcessor's ``replace_video_token`` does (grid product / merge**2).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.lazy import torch, transformers
from support.zoo import loaded
from vision_helpers import (
    QWEN2_VL_IMAGE_TOKEN,
    QWEN2_VL_PROCESSOR,
    assert_close_in_scale,
    build_qwen2_vl_chat,
    qwen2_vl_processor,
    random_image,
)

from clika_export.media.vision_export import export_vision
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_model_folder
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.core import EngineCore
from clika_runtime.engine.executor import Executor
from clika_runtime.engine.kv.continuous_cache import ContinuousKVCache
from clika_runtime.engine.kv.kv_cache import CacheShape
from clika_runtime.engine.kv.paged_cache import PagedKVCache
from clika_runtime.engine.options import EngineOptions
from clika_runtime.engine.sequence import Request, Sequence
from clika_runtime.media.arguments import VideoInput, video_clips
from clika_runtime.media.mrope_positions import mrope_span
from clika_runtime.media.processor_config import ProcessorConfigError
from clika_runtime.media.qwen2_vl import preprocess_qwen2_vl_video
from clika_runtime.media.qwen2_vl_video import VIDEO_PROCESSOR_FILE, read_video_settings
from clika_runtime.media.video import sample_frames
from clika_runtime.media.vision_tower import VisionTower, media_support

NEW_TOKENS = 10
QUESTION = "What happens in the clip?"
# Video bounds unlike the image processor's, so the test sees which one a clip is resized by.
VIDEO_PROCESSOR = {
    "video_processor_type": "Qwen2VLVideoProcessor",
    "size": {"shortest_edge": 28 * 28 * 8, "longest_edge": 28 * 28 * 16},
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "fps": 2.0,
    "max_frames": 8,
}
# Qwen2-VL's template shape: an image or a video part as one pad marker in its vision frame.
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'video' %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def qwen2_vl_video(tiny_zoo):
    hf_model, chat = tiny_zoo.checkpoint(build_qwen2_vl_chat)
    hf = tiny_zoo.variant(chat, with_video_processor)
    folder = tiny_zoo.export(hf, context_window=512)
    with loaded(folder) as model:
        yield hf_model, hf, folder, model


def with_video_processor(hf):
    """The video processor config and a template that takes video parts."""
    (hf / VIDEO_PROCESSOR_FILE).write_text(json.dumps(VIDEO_PROCESSOR))
    config = json.loads((hf / "tokenizer_config.json").read_text())
    (hf / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))


def clip(frames: int, fps: float, seed: int, height: int = 60, width: int = 90):
    """``frames`` random frames ``1 / fps`` apart from 0 s."""
    pixels = np.stack([random_image(height, width, seed * 100 + i) for i in range(frames)])
    return pixels, np.arange(frames) / fps


def reference_video(frames: np.ndarray):
    """transformers' pixel_values_videos and video_grid_thw for already sampled ``frames``."""
    bounds = {
        "min_pixels": VIDEO_PROCESSOR["size"]["shortest_edge"],
        "max_pixels": VIDEO_PROCESSOR["size"]["longest_edge"],
    }
    processor = transformers.Qwen2VLImageProcessorPil(**{**QWEN2_VL_PROCESSOR, **bounds})
    p, tp = 14, 2
    per_frame = []
    for frame in frames:
        out = processor(images=[frame], return_tensors="np")
        patches = out["pixel_values"].reshape(-1, 3, tp, p, p)[:, :, 0]  # a still fills both slots
        per_frame.append(patches)
        _, h, w = out["image_grid_thw"][0]
    if len(per_frame) % tp:
        per_frame.append(per_frame[-1])  # an odd count repeats the last frame
    pairs = [np.stack(per_frame[i : i + tp], axis=2) for i in range(0, len(per_frame), tp)]
    pixels = np.concatenate([pair.reshape(len(pair), -1) for pair in pairs])
    return torch.from_numpy(pixels), torch.tensor([[len(pairs), int(h), int(w)]])


def messages(parts):
    return [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}]


def expected_prompt(hf, text: str, video_grid, images=()):
    """Qwen2VLProcessor's inputs for ``text``: each pad expanded to its grid's product / merge**2
    (``replace_image_token`` / ``replace_video_token``), images by its image processor."""
    processor = qwen2_vl_processor(hf)
    inputs = dict(processor.image_processor(images=list(images), return_tensors="pt")) if images else {}
    grids = iter(inputs["image_grid_thw"]) if images else iter(())
    pieces = text.split("<|image_pad|>")
    text = pieces[0] + "".join("<|image_pad|>" * int(next(grids).prod() // 4) + p for p in pieces[1:])
    text = text.replace("<|video_pad|>", "<|video_pad|>" * int(video_grid[0].prod() // 4))
    inputs.update(processor.tokenizer([text], return_tensors="pt"))
    ids = inputs["input_ids"]
    video_id = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    types = (ids == QWEN2_VL_IMAGE_TOKEN).int() + 2 * (ids == video_id).int()
    return inputs, types


def ours_positions(media, length: int) -> np.ndarray:
    table = np.repeat(np.arange(length)[:, None], 3, axis=1)
    table[media.rope.rows] = media.rope.positions
    return table.T


def test_export_records_the_video_token_and_the_video_processor(qwen2_vl_video):
    _, hf, folder, model = qwen2_vl_video
    manifest = Manifest.read(folder)
    video_id = json.loads((hf / "config.json").read_text())["video_token_id"]
    assert manifest.vision.video_token_id == video_id == model.tokenizer.token_to_id("<|video_pad|>")
    assert media_support(folder, manifest)["video"] and model.supports_video
    settings = read_video_settings(folder)
    assert (settings.fps, settings.max_frames) == (2.0, 8)
    assert (settings.pixels.min_pixels, settings.pixels.max_pixels) == (28 * 28 * 8, 28 * 28 * 16)


@pytest.mark.parametrize("count", [4, 3])
def test_clip_pixels_and_embeddings_equal_transformers(qwen2_vl_video, count):
    """A clip at 10 fps sampled at 2 fps: ``count`` frames, the odd one paired with itself."""
    hf_model, _, folder, _ = qwen2_vl_video
    frames, times = clip(5 * (count - 1) + 1, 10.0, seed=count)
    (sampled,) = [sample_frames(c, fps=2.0, max_frames=8) for c in video_clips([(frames, times)])]
    assert len(sampled.frames) == count and (sampled.frames == frames[::5]).all()
    pixels, grid = reference_video(frames[::5])
    ours = preprocess_qwen2_vl_video(sampled.frames, read_video_settings(folder).pixels)
    assert ours.grid_thw == tuple(grid[0].tolist()) and grid[0, 0] == 2
    assert np.abs(ours.pixel_values - pixels.numpy()).max() < 1e-5
    (embedding,) = VisionTower.open(folder, threads=1).embed_videos([(frames, times)])
    with torch.no_grad():
        ref = hf_model.model.get_video_features(pixel_values_videos=pixels, video_grid_thw=grid)
    assert_close_in_scale(embedding.embeds, ref.pooler_output[0].numpy())
    assert embedding.grid == (2, int(grid[0, 1]) // 2, int(grid[0, 2]) // 2)
    assert embedding.timestamps == (0.0, 1.0)


@pytest.mark.parametrize("with_image", [False, True])
def test_prompt_positions_and_greedy_reply_equal_transformers(qwen2_vl_video, with_image):
    """A 1.5 s clip (four frames at 2 fps: two temporal patches), after an image in the same turn."""
    hf_model, hf, _, model = qwen2_vl_video
    frames, times = clip(16, 10.0, seed=7)
    images = [random_image(90, 60, 3)] if with_image else []
    text = model.render(messages([{"type": "image"}] * len(images) + [{"type": "video"}]))
    pixels, grid = reference_video(frames[::5])
    inputs, types = expected_prompt(hf, text, grid, images)
    ids, media = model.encode_with_images(text, [*images, VideoInput((frames, times))])
    assert ids == inputs["input_ids"][0].tolist()
    expected, delta = hf_model.model.get_rope_index(
        inputs["input_ids"], types, image_grid_thw=inputs.get("image_grid_thw"), video_grid_thw=grid
    )
    assert (ours_positions(media, len(ids)) == expected[:, 0].numpy()).all()
    assert media.rope.delta == int(delta) < 0

    stills = (
        {"pixel_values": inputs["pixel_values"], "image_grid_thw": inputs["image_grid_thw"]} if images else {}
    )
    with torch.no_grad():
        out = hf_model.generate(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], mm_token_type_ids=types,
            pixel_values_videos=pixels, video_grid_thw=grid, max_new_tokens=NEW_TOKENS, do_sample=False, **stills,
        )  # fmt: skip
    pieces = model.stream_generate(
        QUESTION, images=images, videos=[(frames, times)], decode=False,
        max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True,
    )  # fmt: skip
    assert [token for piece in pieces for token in piece] == out[0, len(ids) :].tolist()


def test_a_session_reuses_its_video_prefix_next_turn(qwen2_vl_video):
    hf_model, hf, _, model = qwen2_vl_video
    frames, times = clip(11, 10.0, seed=11, height=84, width=56)
    greedy = {"max_new_tokens": NEW_TOKENS, "temperature": 0.0, "ignore_eos": True}
    session = model.chat_session()
    first = session.send(QUESTION, videos=[(frames, times)], **greedy)
    prompt = session.report.prompt_tokens
    second = session.send("And then?", **greedy)
    assert session.report.cached_tokens >= prompt  # the clip's KV (and the first reply's) reused
    history = [
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": QUESTION}]},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "And then?"},
    ]
    pixels, grid = reference_video(frames[::5])
    inputs, types = expected_prompt(hf, model.render(history), grid)
    with torch.no_grad():
        out = hf_model.generate(
            **inputs, mm_token_type_ids=types, pixel_values_videos=pixels, video_grid_thw=grid,
            max_new_tokens=NEW_TOKENS, do_sample=False,
        )  # fmt: skip
    assert second == model.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :].tolist())


def test_text_after_a_long_clip_continues_past_its_last_temporal_position():
    """Eight temporal patches of a 2 x 2 grid: the next text position is p + 8, one past the
    clip's largest (temporal) position, as Qwen2-VL's reference get_rope_index counts."""
    prompt = [0, 0, *([1] * 32), 0, 0]
    span = mrope_span(len(prompt), np.flatnonzero(np.array(prompt)), [(8, 2, 2)])
    table = np.repeat(np.arange(len(prompt))[:, None], 3, axis=1)
    table[span.rows] = span.positions
    assert table[2:34, 0].max() == 2 + 7 and table[2:34, 1:].max() == 2 + 1
    assert (table[34:] == (2 + 8 + np.arange(2))[:, None]).all()
    assert span.delta == 2 + 8 - 34


@pytest.mark.parametrize(
    "config,message",
    [
        ({"fps": 0}, "video_preprocessor_config.json: fps must be a positive number"),
        ({"max_frames": "all"}, "video_preprocessor_config.json: max_frames must be a positive integer"),
        ({"temporal_patch_size": 3}, "video_preprocessor_config.json: its patch sizes disagree"),
        ({"size": {"shortest_edge": 10, "longest_edge": 5}}, "video_preprocessor_config.json: need 0 < min"),
    ],
)
def test_a_bad_video_processor_config_is_refused_naming_the_file(qwen2_vl_video, tmp_path, config, message):
    _, hf, _, _ = qwen2_vl_video
    for name in ("config.json", "preprocessor_config.json", "model.safetensors"):
        (tmp_path / name).symlink_to(hf / name)
    (tmp_path / VIDEO_PROCESSOR_FILE).write_text(json.dumps({**VIDEO_PROCESSOR, **config}))
    with pytest.raises(ProcessorConfigError, match=message):
        read_video_settings(tmp_path)
    with pytest.raises(ProcessorConfigError, match=message):
        export_vision(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before any graph is written


def engine_core(folder, mode: str) -> EngineCore:
    """A synchronous engine core on the folder's ``mode`` graph taking 16-token steps (chunked prefill)."""
    opened = open_model_folder(folder, kv_mode=mode, threads=1)
    arch, window = opened.manifest.architecture, opened.manifest.context_window
    shape = CacheShape(arch.num_layers, arch.num_kv_heads, arch.head_dim, opened.graph.kv.dtype)
    if mode == "paged":
        block = opened.graph.kv.block_size
        cache = PagedKVCache(shape, block_size=block, max_bytes=1 << 26, num_slots=4, max_seq=window)
    else:
        cache = ContinuousKVCache(shape, num_slots=4, max_seq=window, slack=16)
    executor = Executor(
        opened.session, opened.graph, cache, num_layers=arch.num_layers, vocab_size=arch.vocab_size,
        context_window=window,
    )  # fmt: skip
    options = EngineOptions(max_active=4, max_step_tokens=16)
    return EngineCore(
        executor, cache, opened.tokenizer, max_seq=window, vocab_size=arch.vocab_size, options=options
    )


class Collected:
    def __init__(self) -> None:
        self.tokens: list[int] = []

    def put(self, delta) -> None:
        self.tokens.extend(delta.token_ids)

    def end(self, report) -> None:
        pass


@pytest.mark.parametrize("mode", ["continuous", "paged"])
def test_a_clip_prompt_in_chunks_beside_a_text_request_replies_as_transformers(qwen2_vl_video, mode):
    hf_model, hf, folder, model = qwen2_vl_video
    frames, times = clip(16, 10.0, seed=5)
    text = model.render(messages([{"type": "video"}]))
    ids, media = model.encode_with_images(text, [VideoInput((frames, times))])
    pixels, grid = reference_video(frames[::5])
    inputs, types = expected_prompt(hf, text, grid)
    text_ids = model.tokenizer.encode("<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n")
    with torch.no_grad():
        video_reply = hf_model.generate(
            **inputs, mm_token_type_ids=types, pixel_values_videos=pixels, video_grid_thw=grid,
            max_new_tokens=NEW_TOKENS, do_sample=False,
        )[0, len(ids) :].tolist()  # fmt: skip
        text_reply = hf_model.generate(
            input_ids=torch.tensor([text_ids]), max_new_tokens=NEW_TOKENS, do_sample=False
        )[0, len(text_ids) :].tolist()
    core = engine_core(folder, mode)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    sinks = []
    for request_id, (prompt_ids, prompt_media) in enumerate([(text_ids, None), (ids, media)], start=1):
        prompt = core.check_request(prompt_ids, config, prompt_media)
        sinks.append(Collected())
        core.add(Sequence(Request(request_id, prompt, config, media=prompt_media)), sinks[-1])
    plans = []
    while core.has_work:
        plans.append(core.step())
    chunks = [
        r for p in plans if p is not None for r in p.rows if r.seq.request_id == 2 and r.start < len(ids)
    ]
    assert len(chunks) > 2 and any(p is not None and len(p.rows) == 2 for p in plans)
    assert sinks[1].tokens == video_reply and sinks[0].tokens == text_reply
