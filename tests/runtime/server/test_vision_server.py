"""image_url parts on the OpenAI API: the real openai client against a served tiny Idefics3.

The reply to an image sent as a data: URL must be the reply ``generate`` gives for the same
pixels; local files are read only behind the server's flag, remote URLs never.
"""

from __future__ import annotations

import base64
import functools
import io

import httpx
import numpy as np
import pytest
from support.served_chat import openai_greedy_reply, refused_400
from support.zoo import loaded
from vision_helpers import random_image

from clika_runtime.server import start_server

PIL = pytest.importorskip("PIL.Image")

MODEL = "tiny-vision"
QUESTION = "What is this?"


@pytest.fixture(scope="module")
def vision_model(idefics3_chat_model):
    with loaded(idefics3_chat_model.folder) as model:
        yield model


def png_bytes(image: np.ndarray) -> bytes:
    out = io.BytesIO()
    PIL.fromarray(image).save(out, format="PNG")
    return out.getvalue()


def data_url(image: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode()


def image_message(url: str) -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}]
    return [{"role": "user", "content": parts}]


def test_the_openai_client_sends_an_image_url_part(vision_model):
    image = random_image(70, 110, 21)
    expected = vision_model.generate(
        QUESTION, images=[image], max_new_tokens=8, temperature=0.0, ignore_eos=True
    )
    reply = openai_greedy_reply(vision_model, MODEL, image_message(data_url(image)), max_tokens=8)
    assert reply.choices[0].message.content == expected
    assert reply.usage.prompt_tokens == vision_model.report.prompt_tokens


def test_bad_image_parts_are_400s_naming_the_part(vision_model, tiny_model, tmp_path):
    image_file = tmp_path / "picture.png"
    image_file.write_bytes(png_bytes(random_image(40, 40, 2)))
    with (
        start_server(vision_model, model_id=MODEL) as running,
        httpx.Client(base_url=running.base_url) as http,
    ):
        refused = functools.partial(refused_400, http, MODEL)

        error = refused(image_message("https://example.com/cat.png"), "remote image URLs are not fetched")
        assert error["param"] == "messages[0].content[0].image_url"
        refused(image_message(str(image_file)), "--allow-image-files")
        refused(image_message("data:image/png;base64,@@@"), "malformed")
        refused(
            image_message("data:image/png;base64," + base64.b64encode(b"not a png").decode()), "not an image"
        )
        too_many = [
            {"type": "image_url", "image_url": {"url": data_url(random_image(128, 128, i))}} for i in range(7)
        ]
        refused([{"role": "user", "content": too_many}], "context window")
    with (
        start_server(vision_model, model_id=MODEL, image_files=True) as running,
        httpx.Client(base_url=running.base_url) as http,
    ):
        body = {"model": MODEL, "messages": image_message(image_file.as_uri()), "max_tokens": 2}
        assert http.post("/v1/chat/completions", json=body, timeout=60).status_code == 200
    with (
        start_server(tiny_model, model_id="tiny") as running,
        httpx.Client(base_url=running.base_url) as http,
    ):
        body = {"model": "tiny", "messages": image_message(data_url(random_image(8, 8, 1))), "max_tokens": 2}
        response = http.post("/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 400 and "reads text only" in response.json()["error"]["message"]


def test_the_ollama_client_sends_a_messages_images(vision_model, tiny_model):
    ollama = pytest.importorskip("ollama")
    image = random_image(50, 80, 23)
    expected = vision_model.generate(QUESTION, images=[image], max_new_tokens=6, temperature=0.0)
    message = {"role": "user", "content": QUESTION, "images": [png_bytes(image)]}
    with start_server(vision_model, model_id=MODEL) as running:
        client = ollama.Client(host=running.base_url)
        reply = client.chat(model=MODEL, messages=[message], options={"temperature": 0, "num_predict": 6})
    assert reply.message.content == expected
    with start_server(tiny_model, model_id="tiny") as running:
        with pytest.raises(ollama.ResponseError, match="reads text only"):
            ollama.Client(host=running.base_url).chat(model="tiny", messages=[message])


def test_the_ollama_client_generates_with_images(vision_model, tiny_model):
    ollama = pytest.importorskip("ollama")
    image = random_image(60, 70, 24)
    options = {"temperature": 0, "num_predict": 6}
    expected = vision_model.generate(QUESTION, images=[image], max_new_tokens=6, temperature=0.0)
    with start_server(vision_model, model_id=MODEL) as running:
        client = ollama.Client(host=running.base_url)
        whole = client.generate(model=MODEL, prompt=QUESTION, images=[png_bytes(image)], options=options)
        pieces = client.generate(
            model=MODEL, prompt=QUESTION, images=[png_bytes(image)], options=options, stream=True
        )
        streamed = "".join(piece.response for piece in pieces)
        with pytest.raises(ollama.ResponseError, match="raw") as raw:
            client.generate(model=MODEL, prompt=QUESTION, images=[png_bytes(image)], raw=True)
        with httpx.Client(base_url=running.base_url) as http:
            bad = http.post("/api/generate", json={"model": MODEL, "prompt": QUESTION, "images": ["%%"]})
    assert whole.response == expected and streamed == expected
    assert whole.prompt_eval_count > 16  # the image's tokens were read
    assert raw.value.status_code == 400
    assert bad.status_code == 400 and "images[0]" in bad.json()["error"] and "base64" in bad.json()["error"]
    with start_server(tiny_model, model_id="tiny") as running:
        with pytest.raises(ollama.ResponseError, match=r"images\[0\]: this model reads text only") as refused:
            ollama.Client(host=running.base_url).generate(
                model="tiny", prompt=QUESTION, images=[png_bytes(image)]
            )
    assert refused.value.status_code == 400
