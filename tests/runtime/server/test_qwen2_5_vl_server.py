"""An image_url part on the OpenAI API for a served tiny Qwen2.5-VL (windowed vision tower, M-RoPE text model): the real
openai client's reply must be transformers' greedy reply on the same pixels."""

from __future__ import annotations

import openai
import pytest
from qwen2_5_vl_helpers import qwen2_5_vl_processor
from support.zoo import loaded
from vision_helpers import png_data_url, random_image

from clika_runtime.server import start_server

pytest.importorskip("PIL.Image")
from support.lazy import torch

MODEL = "tiny-qwen2.5-vl"
QUESTION = "What is this?"
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def qwen2_5_vl(qwen2_5_vl_chat_model):
    with loaded(qwen2_5_vl_chat_model.folder) as model:
        yield qwen2_5_vl_chat_model.reference, qwen2_5_vl_chat_model.checkpoint, model


def test_the_openai_client_sends_an_image_url_part(qwen2_5_vl):
    hf_model, hf, model = qwen2_5_vl
    image = random_image(70, 98, 21)
    text = model.render(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    )
    inputs = qwen2_5_vl_processor(hf)(text=[text], images=[image], return_tensors="pt")
    with torch.no_grad():
        out = hf_model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    prompt = inputs["input_ids"][0].tolist()
    expected = model.tokenizer.decode(out[0, len(prompt) :].tolist())
    parts = [
        {"type": "image_url", "image_url": {"url": png_data_url(image)}},
        {"type": "text", "text": QUESTION},
    ]
    with start_server(model, model_id=MODEL) as running:
        client = openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=120)
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": parts}], max_tokens=NEW_TOKENS, temperature=0.0,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
    assert reply.choices[0].message.content == expected
    assert reply.usage.prompt_tokens == len(prompt)
