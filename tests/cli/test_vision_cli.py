"""``clika chat``'s ``/image PATH`` on an exported tiny Idefics3: the image rides the next message,
a saved chat keeps it, and a text-only model refuses it by name."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from support.chat_input import chat_repl, repl_errors, typed
from vision_helpers import random_image

from clika_cli.common import local_model
from clika_cli.conversations import Conversations
from clika_cli.model_info import describe
from clika_runtime import modelverse

PIL = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def vision_folder(idefics3_chat_model):
    return idefics3_chat_model.folder


def test_an_image_rides_the_next_message_and_a_saved_chat_keeps_it(
    monkeypatch, capsys, vision_folder, tmp_path
):
    image = random_image(60, 90, 4)
    path = tmp_path / "photo.png"
    PIL.fromarray(image).save(path)
    typed(
        monkeypatch,
        f"/image {path}",
        "/image nowhere.png",
        "What is this?",
        "/save pic",
        "/clear",
        "/load pic",
    )
    with chat_repl(vision_folder, tmp_path, budget=3, overrides={"temperature": 0.0}) as (model, repl):
        repl.run()
        history = repl.session.messages
        repl.reply("And now?")  # the resumed chat renders the image again
        cached = repl.session.report.cached_tokens
        prompt = repl.session.report.prompt_tokens
    err = capsys.readouterr().err
    assert "(image attached: 90 x 60; it rides your next message)" in err
    assert "Error: /image nowhere.png: no such image file" in err
    parts = history[0]["content"]
    assert parts[0]["type"] == "image" and np.array_equal(parts[0]["image"], image)  # PNG is lossless
    assert parts[1] == {"type": "text", "text": "What is this?"}
    assert prompt > 5 * 16 and cached > 0


def test_a_text_only_model_refuses_image(monkeypatch, capsys, tiny_llama_model, tmp_path):
    path = tmp_path / "photo.png"
    PIL.fromarray(random_image(8, 8, 1)).save(path)
    err = repl_errors(monkeypatch, capsys, tiny_llama_model, tmp_path, f"/image {path}")
    assert "Error: this model reads text only; /image needs a model with a vision graph" in err


def test_show_names_what_the_model_reads(vision_folder, tiny_llama_model):
    def media_of(folder) -> dict:
        return describe(local_model(str(folder), None, pull=False, quiet=True))["media"]

    assert media_of(vision_folder) == {"vision": True, "audio": False, "video": False}
    assert media_of(tiny_llama_model)["vision"] is False


def chat_process(folder, home, lines: list[str], *options: str) -> str:
    """``clika chat FOLDER`` in a new process, its input piped; its stderr (what it told the user)."""
    command = [sys.executable, "-m", "clika_cli.main", "chat", str(folder), "--temperature", "0"]
    command += ["--max-tokens", "3", "--threads", "1", *options]
    env = {**os.environ, "CLIKA_CHAT_HOME": str(home)}
    done = subprocess.run(
        command, input="\n".join(lines) + "\n", env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_resumed_chat_keeps_its_image(vision_folder, tmp_path):
    image = random_image(60, 90, 7)
    path = tmp_path / "photo.png"
    PIL.fromarray(image).save(path)
    home = tmp_path / "chat"
    first = chat_process(vision_folder, home, [f"/image {path}", "What is this?", "/save pic", "/exit"])
    assert "(image attached: 90 x 60; it rides your next message)" in first
    resumed = chat_process(vision_folder, home, ["And now?", "/exit"], "--resume", "pic")
    assert "resumed 'pic' (2 turns)" in resumed
    kept = int(re.search(r"its saved KV holds (\d+) tokens", resumed).group(1))
    saved = Conversations(home / "conversations.db").load("pic")
    assert [m["role"] for m in saved] == ["user", "assistant", "user", "assistant"]
    assert np.array_equal(saved[0]["content"][0]["image"], image)  # through two saves and a resume
    model = modelverse.load(vision_folder, threads=1)
    try:
        chat = model.chat_session(messages=saved[:2])
        assert kept == len(chat.transcript_tokens()) > 5 * 16  # the image's tokens were not read again
        assert chat.send("And now?", max_new_tokens=3, temperature=0.0) == saved[3]["content"]
    finally:
        model.close()
