"""An image_url part on the OpenAI API for a served tiny Qwen2-VL (M-RoPE text model) and Qwen2.5-VL
(windowed vision tower too): the real openai client's reply must be transformers' greedy reply on
the same pixels."""

from __future__ import annotations

import pytest
from qwen2_5_vl_helpers import qwen2_5_vl_processor
from support.served_chat import openai_greedy_reply
from support.zoo import loaded
from vision_helpers import png_data_url, qwen2_vl_processor, random_image

pytest.importorskip("PIL.Image")
from support.lazy import torch

QUESTION = "What is this?"
NEW_TOKENS = 8
# model id -> (the session fixture of its chat model, transformers' processor for its checkpoint)
CASES = {
    "tiny-qwen2-vl": ("qwen2_vl_chat_model", qwen2_vl_processor),
    "tiny-qwen2.5-vl": ("qwen2_5_vl_chat_model", qwen2_5_vl_processor),
}


@pytest.fixture(scope="module", params=list(CASES))
def served(request):
    fixture, processor = CASES[request.param]
    chat = request.getfixturevalue(fixture)
    with loaded(chat.folder) as model:
        yield request.param, chat.reference, processor(chat.checkpoint), model


def test_the_openai_client_sends_an_image_url_part(served):
    model_id, hf_model, processor, model = served
    image = random_image(70, 98, 21)
    text = model.render(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    )
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    with torch.no_grad():
        out = hf_model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    prompt = inputs["input_ids"][0].tolist()
    expected = model.tokenizer.decode(out[0, len(prompt) :].tolist())
    parts = [
        {"type": "image_url", "image_url": {"url": png_data_url(image)}},
        {"type": "text", "text": QUESTION},
    ]
    reply = openai_greedy_reply(model, model_id, [{"role": "user", "content": parts}], NEW_TOKENS)
    assert reply.choices[0].message.content == expected
    assert reply.usage.prompt_tokens == len(prompt)
