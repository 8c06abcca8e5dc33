"""``clika chat``'s ``/image PATH`` on an exported tiny Idefics3: the image rides the next message,
a saved chat keeps it, and a text-only model refuses it by name."""

from __future__ import annotations

import builtins

import numpy as np
import pytest
from vision_helpers import build_idefics3_chat, random_image

from clika_cli.chat_repl import ChatRepl
from clika_cli.common import local_model
from clika_cli.conversations import Conversations
from clika_cli.model_info import describe
from clika_export.api import export
from clika_runtime import modelverse

PIL = pytest.importorskip("PIL.Image")


def typed(monkeypatch: pytest.MonkeyPatch, *lines: str) -> None:
    feed = iter(lines)

    def fake_input(prompt: str = "") -> str:
        line = next(feed, None)
        if line is None:
            raise EOFError
        return line

    monkeypatch.setattr(builtins, "input", fake_input)


@pytest.fixture(scope="module")
def vision_folder(tmp_path_factory):
    _, hf = build_idefics3_chat(tmp_path_factory.mktemp("idefics3-cli-hf"))
    return export(hf, tmp_path_factory.mktemp("idefics3-cli") / "model", context_window=512, progress=False)


def test_an_image_rides_the_next_message_and_a_saved_chat_keeps_it(
    monkeypatch, capsys, vision_folder, tmp_path
):
    image = random_image(60, 90, 4)
    path = tmp_path / "photo.png"
    PIL.fromarray(image).save(path)
    model = modelverse.load(vision_folder, threads=1)
    conversations = Conversations(tmp_path / "c.db")
    repl = ChatRepl(model, system=None, budget=3, overrides={"temperature": 0.0}, conversations=conversations)
    typed(
        monkeypatch,
        f"/image {path}",
        "/image nowhere.png",
        "What is this?",
        "/save pic",
        "/clear",
        "/load pic",
    )
    try:
        repl.run()
        history = repl.session.messages
        repl.reply("And now?")  # the resumed chat renders the image again
        cached = repl.session.report.cached_tokens
        prompt = repl.session.report.prompt_tokens
    finally:
        repl.close()
        model.close()
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
    model = modelverse.load(tiny_llama_model, threads=1)
    repl = ChatRepl(
        model, system=None, budget=2, overrides={}, conversations=Conversations(tmp_path / "c.db")
    )
    typed(monkeypatch, f"/image {path}")
    try:
        repl.run()
    finally:
        repl.close()
        model.close()
    assert (
        "Error: this model reads text only; /image needs a model with a vision graph"
        in capsys.readouterr().err
    )


def test_show_names_what_the_model_reads(vision_folder, tiny_llama_model):
    def media_of(folder) -> dict:
        return describe(local_model(str(folder), None, pull=False, quiet=True))["media"]

    assert media_of(vision_folder) == {"vision": True, "audio": False, "video": False}
    assert media_of(tiny_llama_model)["vision"] is False
