"""``clika chat``'s ``/audio PATH.wav`` on an exported tiny Qwen2-Audio: the clip rides the next
message, a saved chat keeps it losslessly, and a text-only model refuses it by name."""

from __future__ import annotations

import numpy as np
import pytest
from audio_files import pcm16_values, wav_bytes
from audio_helpers import AUDIO_TOKEN
from audio_signals import speech_like
from support.chat_input import chat_repl, repl_errors, typed

from clika_cli.common import local_model
from clika_cli.model_info import describe


@pytest.fixture(scope="module")
def audio_folder(qwen2_audio_chat_model):
    return qwen2_audio_chat_model.folder


def test_a_clip_rides_the_next_message_and_a_saved_chat_keeps_it(monkeypatch, capsys, audio_folder, tmp_path):
    wave = speech_like(1.25, seed=13)
    path = tmp_path / "clip.wav"
    path.write_bytes(wav_bytes(wave))
    (tmp_path / "broken.wav").write_bytes(b"RIFF")
    typed(
        monkeypatch,
        f"/audio {path}",
        f"/audio {tmp_path / 'broken.wav'}",
        "/audio nowhere.wav",
        "What is said?",
        "/save clip",
        "/clear",
        "/load clip",
    )
    with chat_repl(audio_folder, tmp_path, budget=3, overrides={"temperature": 0.0}) as (model, repl):
        repl.run()
        history = repl.session.messages
        repl.reply("And now?")  # the resumed chat renders the clip again
        cached = repl.session.report.cached_tokens
        turn = {
            "role": "user",
            "content": [
                {"type": "audio", "audio_url": "clip.wav"},
                {"type": "text", "text": "What is said?"},
            ],
        }
        ids, _ = model.encode_with_audio(model.render([turn]), [pcm16_values(wave)])
    err = capsys.readouterr().err
    assert "(audio attached: 1.25 s; it rides your next message)" in err
    assert "broken.wav: not a PCM WAV file" in err
    assert "Error: /audio nowhere.wav: no such WAV file" in err
    assert "KV was not" not in err  # a chat with media keeps no KV file: it is read again on resume
    parts = history[0]["content"]
    assert parts[0]["type"] == "audio" and np.array_equal(parts[0]["audio"], pcm16_values(wave))
    assert parts[1] == {"type": "text", "text": "What is said?"}
    assert ids.count(AUDIO_TOKEN) == 31 and cached > len(ids) - ids[::-1].index(
        AUDIO_TOKEN
    )  # the clip's KV again


def test_a_text_only_model_refuses_audio(monkeypatch, capsys, tiny_llama_model, tmp_path):
    path = tmp_path / "clip.wav"
    path.write_bytes(wav_bytes(speech_like(0.5, seed=1)))
    err = repl_errors(monkeypatch, capsys, tiny_llama_model, tmp_path, f"/audio {path}")
    assert "Error: this model takes no audio; /audio needs a model with an audio graph" in err


def test_show_names_audio(audio_folder):
    media = describe(local_model(str(audio_folder), None, pull=False, quiet=True))["media"]
    assert media == {"vision": False, "audio": True, "video": False}
