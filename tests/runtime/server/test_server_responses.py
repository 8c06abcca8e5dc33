"""``/v1/responses`` through the real ``openai`` client's ``client.responses.create(...)``.

The tiny model checks the protocol (replies equal the engine's own greedy
decode, whole and streamed, in the Responses event shape); Qwen2.5-Coder-0.5B
checks a real function call and its output fed back as input items.
"""

from __future__ import annotations

import json

import openai
import pytest
from repo_paths import TEMPLATES

from clika_runtime import modelverse
from clika_runtime.server import start_server

MODEL = "tiny"


@pytest.fixture(scope="module")
def client(tiny_model):
    with start_server(tiny_model, model_id=MODEL, max_active=4) as running:
        yield openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=60)


def greedy(model, messages, tokens: int) -> str:
    return model.generate(messages=messages, max_new_tokens=tokens, temperature=0.0)


def test_text_input_whole_equals_the_engines_greedy_reply(client, tiny_model):
    response = client.responses.create(model=MODEL, input="hello", max_output_tokens=8, temperature=0)
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.output_text == greedy(tiny_model, [{"role": "user", "content": "hello"}], 8)
    [message] = response.output
    assert (
        message.type == "message" and message.role == "assistant" and message.content[0].type == "output_text"
    )
    assert response.usage.output_tokens == 8 and response.usage.input_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + 8
    # The tiny model's noise runs to the limit: the response says it was cut, and why.
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"


def test_instructions_and_message_items(client, tiny_model):
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
        {"role": "user", "content": "again"},
    ]
    response = client.responses.create(
        model=MODEL, instructions="be brief", input=items, max_output_tokens=6, temperature=0
    )
    conversation = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "again"},
    ]
    assert response.output_text == greedy(tiny_model, conversation, 6)
    assert response.instructions == "be brief"


def test_streamed_events_in_the_responses_shape(client):
    whole = client.responses.create(model=MODEL, input="hello", max_output_tokens=8, temperature=0)
    events = list(
        client.responses.create(model=MODEL, input="hello", max_output_tokens=8, temperature=0, stream=True)
    )
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"} and len(kinds[4:-4]) > 1
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == whole.output_text == final.output_text == events[-4].text
    assert events[0].response.status == "in_progress" and final.usage.output_tokens == 8
    assert events[2].item.id == events[-2].item.id == final.output[0].id


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format"),
        ({"input": [{"type": "file_search_call", "id": "x"}]}, "input[0]"),
        ({"temperature": 3}, "temperature"),
    ],
)
def test_refusals_name_the_field(client, fields, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**{"model": MODEL, "input": "hello", **fields})
    assert caught.value.body["param"] == param


@pytest.fixture(scope="module")
def qwen_client(qwen05_gguf):
    from clika_export.api import cached_export

    model = modelverse.load(cached_export(qwen05_gguf, "int4", progress=False))
    with start_server(model, model_id="qwen") as running:
        yield openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=300)
    model.close()


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name"}},
        "required": ["city"],
    },
}


@pytest.mark.slow
def test_a_function_call_and_its_output_on_qwen(qwen_client):
    question = "What is the weather like in Paris right now?"
    called = qwen_client.responses.create(
        model="qwen", input=question, tools=[WEATHER], temperature=0, max_output_tokens=64
    )
    [call] = [item for item in called.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    streamed = list(
        qwen_client.responses.create(
            model="qwen", input=question, tools=[WEATHER], temperature=0, max_output_tokens=64, stream=True
        )
    )
    done = [e for e in streamed if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Paris"}
    assert streamed[-1].type == "response.completed"
    answer = qwen_client.responses.create(
        model="qwen",
        instructions="When a tool result arrives, answer the question with it in one sentence.",
        input=[
            {"role": "user", "content": question},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": "18 degrees Celsius, light rain",
            },
        ],
        temperature=0,
        max_output_tokens=64,
    )
    assert answer.status == "completed" and "18" in answer.output_text, answer.output


@pytest.fixture(scope="module")
def thinking_client(tiny_llama_model, tmp_path_factory):
    """The tiny model under a template whose prompt opens a reasoning block (all its noise is reasoning)."""
    import shutil

    folder = tmp_path_factory.mktemp("thinking") / "model"
    shutil.copytree(tiny_llama_model, folder)
    shutil.copy(TEMPLATES / "always_thinking.jinja", folder / "chat_template.jinja")
    model = modelverse.load(folder, threads=1)
    with start_server(model, model_id=MODEL) as running:
        yield openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=60)
    model.close()


def test_reasoning_is_its_own_output_item_whole_and_streamed(thinking_client):
    fields = {"model": MODEL, "input": "hello", "max_output_tokens": 12, "temperature": 0}
    whole = thinking_client.responses.create(**fields)
    [reasoning, message] = whole.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text and message.content[0].text == ""
    events = list(thinking_client.responses.create(**fields, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == reasoning.content[0].text
    assert events[2].type == "response.output_item.added" and events[2].item.type == "reasoning"
