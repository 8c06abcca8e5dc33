"""Audio through the whole pipeline: a tiny random Qwen2-Audio exported (qwen2 text model with media
inputs, the audio graph beside it), ``audio=`` on the public API, against transformers'
Qwen2AudioProcessor and generate on the same clip."""

from __future__ import annotations

import asyncio
import json
import shutil

import numpy as np
import pytest
from audio_helpers import AUDIO_TOKEN, N_MELS, processor
from audio_signals import speech_like
from media_engine import engine_core, first_logits, run, run_beside_text, submit
from support.lazy import torch
from support.zoo import loaded
from vision_helpers import assert_close_in_scale

from clika_runtime import Tensor, modelverse
from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.contract.step_graph import MEDIA_INPUTS
from clika_runtime.media.audio_features import AudioSettings, log_mel_features
from clika_runtime.sessions import AsyncChat

NEW_TOKENS = 10
QUESTION = "What is said?"
SETTINGS = AudioSettings(n_mels=N_MELS)


@pytest.fixture(scope="module")
def qwen2_audio(qwen2_audio_chat_model):
    with loaded(qwen2_audio_chat_model.folder) as model:
        yield qwen2_audio_chat_model.reference, qwen2_audio_chat_model.folder, model


def audio_turn(question: str = QUESTION, clips: int = 1) -> dict:
    return {
        "role": "user",
        "content": [
            *({"type": "audio", "audio_url": "clip.wav"} for _ in range(clips)),
            {"type": "text", "text": question},
        ],
    }


def transformers_reply(
    hf_model, text: str, clips: list[np.ndarray]
) -> tuple[list[int], np.ndarray, list[int]]:
    """The processor's prompt ids; the first logits and greedy tokens of transformers' model fed our
    features (its torch STFT differs from the NumPy extractor by float rounding)."""
    inputs = processor()(text=[text], audio=clips, sampling_rate=16000, return_tensors="pt")
    features = torch.from_numpy(np.stack([log_mel_features(c, SETTINGS) for c in clips]))
    fed = {**inputs, "input_features": features}
    with torch.no_grad():
        first = hf_model(**fed).logits[0, -1].numpy()
        out = hf_model.generate(**fed, max_new_tokens=NEW_TOKENS, do_sample=False)
    prompt = inputs["input_ids"][0].tolist()
    return prompt, first, out[0, len(prompt) :].tolist()


def greedy_ids(model, **kwargs) -> list[int]:
    batches = model.stream_generate(
        decode=False, max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, **kwargs
    )
    return [token for batch in batches for token in batch]


def test_export_writes_an_audio_folder_whose_graphs_take_media(qwen2_audio):
    _, folder, model = qwen2_audio
    manifest = Manifest.read(folder)
    assert manifest.audio is not None and manifest.audio.family == "qwen2_audio"
    assert manifest.audio.audio_token_id == AUDIO_TOKEN and manifest.vision is None
    assert manifest.architecture.family == "qwen2"
    for key, spec in manifest.graphs.items():
        assert set(MEDIA_INPUTS) <= set(spec.inputs), key
    assert model.supports_audio and not model.supports_vision and not model.supports_video


def test_prompt_ids_and_first_logits_match_transformers(qwen2_audio):
    hf_model, folder, model = qwen2_audio
    wave = speech_like(2.5, seed=3)
    rendered = model.render([audio_turn()])
    assert "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>" in rendered
    ids, media = model.encode_with_audio(rendered, [wave])
    prompt, first, _ = transformers_reply(hf_model, rendered, [wave])
    assert ids == prompt and prompt.count(AUDIO_TOKEN) == 62  # 250 frames, conv stride 2, pooled by 2
    ours = first_logits(folder, ids, media)
    assert_close_in_scale(ours, first)


def test_generate_with_audio_equals_transformers(qwen2_audio):
    hf_model, _, model = qwen2_audio
    wave = speech_like(1.5, seed=4)
    events = []
    model.set_stage_observer(events.append)
    try:
        ours = greedy_ids(model, prompt=QUESTION, audio=[Tensor(wave)])
    finally:
        model.set_stage_observer(None)
    prompt, _, expected = transformers_reply(hf_model, model.render([audio_turn()]), [wave])
    assert model.report.prompt_tokens == len(prompt)
    assert ours == expected
    audio = [e for e in events if e.stage == "audio"]
    assert len(audio) == 1 and audio[0].tokens == prompt.count(AUDIO_TOKEN)
    assert audio[0].detail == {"clips": 1, "cached": 0}


def test_two_clips_in_one_turn_equal_transformers(qwen2_audio):
    hf_model, _, model = qwen2_audio
    clips = [speech_like(1.0, seed=5), speech_like(2.0, seed=6)]
    messages = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    messages.append({"role": "user", "content": QUESTION})
    reply = model.chat(messages, audio=clips, max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    rendered = model.render([*messages[:2], audio_turn(clips=2)])
    assert "Audio 2: <|audio_bos|>" in rendered
    _, _, expected = transformers_reply(hf_model, rendered, clips)
    assert reply == model.tokenizer.decode(expected)


@pytest.mark.parametrize(
    "mode,kv_dtype",
    [("continuous", "float32"), ("paged", "float32"), ("continuous", "int8"), ("paged", "int8")],
)
def test_audio_beside_a_text_request_in_chunks_then_reused_next_turn(qwen2_audio, mode, kv_dtype):
    hf_model, folder, model = qwen2_audio
    wave = speech_like(2.0, seed=7)
    rendered = model.render([audio_turn()])
    ids, media = model.encode_with_audio(rendered, [wave])
    _, _, expected = transformers_reply(hf_model, rendered, [wave])
    core = engine_core(folder, mode, kv_dtype=kv_dtype)  # 48-token steps: the clip's rows come in chunks
    text_ids = model.tokenizer.encode(model.render([{"role": "user", "content": "hi"}]))
    text_sink, audio_sink = run_beside_text(core, text_ids, ids, media, NEW_TOKENS)
    # The int8 cache is close, not equal: its reply starts the same.
    same = NEW_TOKENS if kv_dtype == "float32" else 2
    assert audio_sink.tokens[:same] == expected[:same]
    assert len(text_sink.tokens) == NEW_TOKENS and text_sink.report.finish_reason == "length"
    # The next turn: the first exchange, then a question; the same clip keeps its KV.
    history = [audio_turn(), {"role": "assistant", "content": model.tokenizer.decode(audio_sink.tokens)}]
    history.append({"role": "user", "content": "And then?"})
    turn_text = model.render(history)
    turn_ids, turn_media = model.encode_with_audio(turn_text, [wave])
    _, second_sink = submit(core, turn_ids, turn_media, NEW_TOKENS)
    run(core)
    assert second_sink.report.cached_tokens >= len(ids)
    _, _, expected_next = transformers_reply(hf_model, turn_text, [wave])
    assert second_sink.tokens[:same] == expected_next[:same]


def test_a_session_reuses_its_audio_next_turn_and_another_clip_is_not(qwen2_audio):
    hf_model, _, model = qwen2_audio
    wave = speech_like(2.0, seed=8)
    session = model.chat_session()
    events = []
    model.set_stage_observer(events.append)
    try:
        first = session.send(QUESTION, audio=[wave], max_new_tokens=4, temperature=0.0, ignore_eos=True)
        prompt = session.report.prompt_tokens
        second = session.send("And then?", max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    finally:
        model.set_stage_observer(None)
    assert first and second
    # The history renders the clip again; its embeddings and KV come from the caches.
    assert session.report.cached_tokens >= prompt
    assert [e.detail for e in events if e.stage == "audio"] == [
        {"clips": 1, "cached": 0},
        {"clips": 1, "cached": 1},
    ]
    history = [
        audio_turn(),
        {"role": "assistant", "content": session.messages[1]["content"]},
        {"role": "user", "content": "And then?"},
    ]
    _, _, expected = transformers_reply(hf_model, model.render(history), [wave])
    assert second == model.tokenizer.decode(expected)
    other, clip = model.chat_session(), speech_like(2.0, seed=9)
    other.send(QUESTION, audio=[clip], max_new_tokens=2, temperature=0.0)
    assert other.report.prompt_tokens == prompt  # the same placeholder tokens, another clip
    ids, _ = model.encode_with_audio(model.render([audio_turn()]), [clip])
    assert other.report.cached_tokens <= ids.index(AUDIO_TOKEN)  # the template's opening, nothing of the clip


@pytest.mark.parametrize(
    "audio,message",
    [
        ([np.zeros((2, 16000), np.float32)], r"audio\[0\]: expected \[S\] float mono"),
        ([np.zeros(16000, np.int16)], r"audio\[0\]: dtype int16"),
        ([np.full(16000, np.nan, np.float32)], r"audio\[0\]: samples must be finite"),
        ([np.zeros(31 * 16000, np.float32)], r"audio\[0\]: 31.00 s .* longer than the 30 s"),
        ([np.zeros(100, np.float32)], r"audio\[0\]: 100 samples are too short"),
        ([speech_like(0.5, seed=1)] * 9, "audio: 9 given, this model takes at most 8"),
        ([speech_like(12.0, seed=i) for i in range(2)], r"audio\[1\].*context window"),
        (np.zeros(16000, np.float32), "audio must be a sequence"),
    ],
)
def test_bad_audio_is_refused_naming_the_argument(qwen2_audio, audio, message):
    _, _, model = qwen2_audio
    with pytest.raises((ValueError, TypeError), match=message):
        model.generate(QUESTION, audio=audio, max_new_tokens=2)


def test_images_on_an_audio_model_and_audio_on_a_text_model_are_refused(qwen2_audio, tiny_model):
    _, _, model = qwen2_audio
    with pytest.raises(ValueError, match="reads text and audio; it takes no images"):
        model.generate(QUESTION, images=[np.zeros((8, 8, 3), np.uint8)])
    with pytest.raises(ValueError, match="reads text only; it takes no audio"):
        tiny_model.generate(QUESTION, audio=[speech_like(0.5, seed=1)])
    with pytest.raises(ValueError, match="takes no audio"):
        tiny_model.chat([{"role": "user", "content": [{"type": "audio", "audio": speech_like(0.5, seed=1)}]}])
    assert not tiny_model.supports_audio


def test_an_async_session_takes_audio_parts(qwen2_audio):
    hf_model, _, model = qwen2_audio
    wave = speech_like(1.5, seed=10)

    async def turn():
        async with AsyncChat(model) as chat:
            session = chat.create_session(persist=False)
            session.messages = [
                {
                    "role": "user",
                    "content": [{"type": "audio", "audio": wave}, {"type": "text", "text": QUESTION}],
                }
            ]
            return await session.respond(max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)

    result = asyncio.run(turn())
    _, _, expected = transformers_reply(hf_model, model.render([audio_turn()]), [wave])
    assert result.result == model.tokenizer.decode(expected)


def test_a_folder_without_a_chat_template_puts_the_clips_in_front(qwen2_audio, tmp_path):
    hf_model, folder, _ = qwen2_audio
    plain = shutil.copytree(folder, tmp_path / "plain")
    manifest = json.loads((plain / "manifest.json").read_text())
    manifest["chat_template_file"] = None
    (plain / "manifest.json").write_text(json.dumps(manifest))
    wave = speech_like(1.0, seed=14)
    model = modelverse.load(plain, threads=1)
    try:
        ours = greedy_ids(model, prompt=QUESTION, audio=[wave])
        placed = greedy_ids(
            model, prompt=f"Listen: <|audio_bos|><|AUDIO|><|audio_eos|>{QUESTION}", audio=[wave]
        )
    finally:
        model.close()
    _, _, expected = transformers_reply(hf_model, f"<|audio_bos|><|AUDIO|><|audio_eos|>{QUESTION}", [wave])
    assert ours == expected
    _, _, expected = transformers_reply(
        hf_model, f"Listen: <|audio_bos|><|AUDIO|><|audio_eos|>{QUESTION}", [wave]
    )
    assert placed == expected


def test_generate_with_messages_and_audio_rides_the_last_user_turn(qwen2_audio):
    hf_model, _, model = qwen2_audio
    wave = speech_like(1.0, seed=15)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    ours = greedy_ids(model, messages=messages, audio=[wave])
    rendered = model.render([messages[0], audio_turn()])
    _, _, expected = transformers_reply(hf_model, rendered, [wave])
    assert ours == expected
    with pytest.raises(ValueError, match="ride one prompt: pass a single prompt, not a list"):
        model.generate([QUESTION, QUESTION], audio=[wave])


@pytest.mark.parametrize(
    "change,message",
    [
        (
            lambda a: a.update(file="../audio.onnx"),
            "audio.file '../audio.onnx' points outside the model folder",
        ),
        (lambda a: a.update(file="gone.onnx"), "gone.onnx named by the manifest is missing"),
        (lambda a: a.update(speed=2), r"unknown AudioSpec fields in manifest: \['speed'\]"),
        (lambda a: a["details"].update(hop="160"), "audio.details.hop must be a positive integer"),
        (lambda a: a["details"].update(hop=320), "chunks of other than 3000 feature frames"),
        (lambda a: a.update(audio_token_id=5), "is not the manifest's audio token id"),
    ],
)
def test_a_malformed_audio_entry_is_refused_by_name(qwen2_audio, tmp_path, change, message):
    _, folder, _ = qwen2_audio
    copy = shutil.copytree(folder, tmp_path / "copy")
    manifest = json.loads((copy / "manifest.json").read_text())
    change(manifest["audio"])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=message):
        model = modelverse.load(copy, threads=1)
        try:
            model.generate(QUESTION, audio=[speech_like(0.5, seed=1)], max_new_tokens=1)
        finally:
            model.close()
