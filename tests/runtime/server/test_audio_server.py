"""input_audio parts on the OpenAI API: the real openai client against a served tiny Qwen2-Audio.

The reply to a WAV sent as base64 must be the reply ``generate`` gives for the same samples;
formats other than WAV, bad bytes and audio for a text-only model are 400s naming the part.
"""

from __future__ import annotations

import base64
import functools
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest
from audio_files import pcm16_values, wav_bytes
from audio_signals import speech_like
from support.served_chat import openai_greedy_reply, refused_400
from support.zoo import loaded

from clika_runtime.server import start_server

MODEL = "tiny-audio"
QUESTION = "What is said?"


@pytest.fixture(scope="module")
def audio_folder(qwen2_audio_chat_model):
    return qwen2_audio_chat_model.folder


@pytest.fixture(scope="module")
def audio_model(audio_folder):
    with loaded(audio_folder) as model:
        yield model


def audio_message(data: bytes, audio_format: str = "wav") -> list[dict]:
    part = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(data).decode(), "format": audio_format},
    }
    return [{"role": "user", "content": [part, {"type": "text", "text": QUESTION}]}]


def test_the_openai_client_sends_an_input_audio_part(audio_model):
    wave = speech_like(1.5, seed=12)
    expected = audio_model.generate(
        QUESTION, audio=[pcm16_values(wave)], max_new_tokens=8, temperature=0.0, ignore_eos=True
    )
    reply = openai_greedy_reply(audio_model, MODEL, audio_message(wav_bytes(wave)), max_tokens=8)
    assert reply.choices[0].message.content == expected
    assert reply.usage.prompt_tokens == audio_model.report.prompt_tokens


def test_bad_audio_parts_are_400s_naming_the_part(audio_model, tiny_model):
    clip = wav_bytes(speech_like(0.5, seed=1))
    long_clips = [wav_bytes(speech_like(12.0, seed=i)) for i in range(2)]
    with (
        start_server(audio_model, model_id=MODEL) as running,
        httpx.Client(base_url=running.base_url) as http,
    ):
        refused = functools.partial(refused_400, http, MODEL)

        error = refused(audio_message(clip, "mp3"), "format 'mp3' is not read (formats: wav)")
        assert error["param"] == "messages[0].content[0].input_audio.format"
        error = refused(audio_message(b"RIFF....WAVEjunk"), "not a PCM WAV file")
        assert error["param"] == "messages[0].content[0].input_audio.data"
        broken = audio_message(clip)
        broken[0]["content"][0]["input_audio"]["data"] = "***"
        refused(broken, "input_audio.data is not valid base64")
        broken[0]["content"][0]["input_audio"] = "just a string"
        refused(broken, "input_audio must be {'data': '<base64 WAV>', 'format': 'wav'}")
        too_long = audio_message(long_clips[0])
        too_long[0]["content"].insert(0, audio_message(long_clips[1])[0]["content"][0])
        error = refused(too_long, "audio[1]")
        assert error["code"] == "context_length_exceeded"
    with (
        start_server(tiny_model, model_id="text") as running,
        httpx.Client(base_url=running.base_url) as http,
    ):
        body = {"model": "text", "messages": audio_message(clip), "max_tokens": 2}
        response = http.post("/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["message"] == "messages[0].content[0].input_audio: this model takes no audio"
        assert error["param"] == "messages[0].content[0].input_audio"


def test_clika_serve_takes_an_input_audio_part_from_the_openai_client(audio_folder, audio_model):
    wave = speech_like(1.0, seed=16)
    expected = audio_model.generate(
        QUESTION, audio=[pcm16_values(wave)], max_new_tokens=6, temperature=0.0, ignore_eos=True
    )
    command = [sys.executable, "-m", "clika_cli.main", "serve", str(audio_folder), "--port", "0"]
    process = subprocess.Popen(
        [*command, "--model-id", MODEL, "--threads", "1"], stderr=subprocess.PIPE, text=True
    )
    try:
        url = _served_url(process)
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        reply = client.chat.completions.create(
            model=MODEL, messages=audio_message(wav_bytes(wave)), max_tokens=6, temperature=0.0,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        assert reply.choices[0].message.content == expected
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()


def _served_url(process: subprocess.Popen) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + 60  # a bound on a hung start, not a timed assertion
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if " at http://" in line:
            return line.split(" at ")[1].split()[0]
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"clika serve did not report its address (exit {process.poll()})")
