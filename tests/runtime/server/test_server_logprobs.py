"""Token log-probabilities through the server (tiny random llama, the real openai client): one
entry per generated token, read from the model's own distribution, the same whole and streamed."""

from __future__ import annotations

import math

import openai
import pytest

from clika_runtime.server import start_server

MODEL = "tiny"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def client(tiny_model):
    with start_server(tiny_model, model_id=MODEL, max_active=4) as server:
        yield openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


def entries(content) -> list[tuple[str, float, list[str]]]:
    return [(e.token, round(e.logprob, 5), [t.token for t in e.top_logprobs]) for e in content]


def test_chat_logprobs_whole_and_streamed(client, tiny_model):
    ask = {
        "model": MODEL,
        "messages": HELLO,
        "max_tokens": 10,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
    }
    whole = client.chat.completions.create(**ask)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy: the pick is the most likely
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob >= entry.top_logprobs[2].logprob
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
    assert sum(math.exp(t.logprob) for t in content[0].top_logprobs) <= 1.0 + 1e-6
    streamed = []
    for chunk in client.chat.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            if choice.logprobs is not None and choice.logprobs.content:
                streamed.extend(choice.logprobs.content)
    assert entries(streamed) == entries(content)
    alone = tiny_model.generate(messages=HELLO, max_new_tokens=10, temperature=0.0, logprobs=3)
    assert [round(e.logprob, 5) for e in tiny_model.report.logprobs] == [e[1] for e in entries(content)]
    assert alone == whole.choices[0].message.content


def test_no_logprobs_unless_asked(client):
    reply = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4)
    assert reply.choices[0].logprobs is None


def test_completion_logprobs_and_echo_offsets(client):
    reply = client.completions.create(
        model=MODEL, prompt="abc", max_tokens=5, temperature=0, logprobs=2, echo=True
    )
    logprobs = reply.choices[0].logprobs
    assert len(logprobs.tokens) == reply.usage.completion_tokens == len(logprobs.token_logprobs)
    # Alternatives are keyed by their text, so two that decode alike (partial bytes) share a key.
    assert logprobs.text_offset[0] == len("abc") and all(1 <= len(top) <= 2 for top in logprobs.top_logprobs)
    assert logprobs.text_offset == sorted(logprobs.text_offset) and reply.choices[0].text.startswith("abc")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"logprobs": "yes"}, "logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
    ],
)
def test_bad_logprobs_fields_are_400s(client, fields, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4, **fields)
    assert caught.value.body["param"] == param
