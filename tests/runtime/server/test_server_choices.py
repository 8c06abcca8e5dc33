"""``n`` choices on the tiny random llama with the real openai client: n replies decode
together; a seeded request gives choice i the reply of seed + i alone, whole and streamed."""

from __future__ import annotations

import openai
import pytest

from clika_runtime.server import start_server

MODEL = "tiny"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def client(tiny_model):
    with start_server(tiny_model, model_id=MODEL, max_active=8) as server:
        yield openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


def alone(client, seed: int) -> str:
    reply = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=12, temperature=1.0, seed=seed
    )
    return reply.choices[0].message.content


def test_n_choices_are_the_replies_of_consecutive_seeds(client):
    reply = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=12, temperature=1.0, seed=40, n=3
    )
    assert [choice.index for choice in reply.choices] == [0, 1, 2]
    assert [choice.message.content for choice in reply.choices] == [alone(client, 40 + i) for i in range(3)]
    single = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=12, temperature=1.0, seed=40
    )
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens  # the prompt is counted once
    assert reply.usage.completion_tokens > single.usage.completion_tokens


def test_streamed_choices_carry_their_index(client):
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=HELLO,
            max_tokens=12,
            temperature=1.0,
            seed=7,
            n=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = {0: "", 1: ""}
    finished = set()
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finished.add(choice.index)
    assert finished == {0, 1}
    assert [texts[0], texts[1]] == [alone(client, 7), alone(client, 8)]
    usage = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert len(usage) == 1 and chunks[-1].usage is not None and usage[0].completion_tokens > 0


def test_completions_take_n_per_prompt(client):
    reply = client.completions.create(
        model=MODEL, prompt=["one", "two"], max_tokens=6, temperature=1.0, seed=3, n=2
    )
    assert [choice.index for choice in reply.choices] == [0, 1, 2, 3]
    again = client.completions.create(model=MODEL, prompt="two", max_tokens=6, temperature=1.0, seed=4)
    assert reply.choices[3].text == again.choices[0].text


@pytest.mark.parametrize("n", [0, 9, "2", 1.5])
def test_a_bad_n_is_a_400_naming_it(client, n):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4, n=n)
    assert caught.value.body["param"] == "n"


def test_a_streamed_completion_takes_one_choice(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="x", max_tokens=4, n=2, stream=True)
    assert caught.value.body["param"] == "n"
