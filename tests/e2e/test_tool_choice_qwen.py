"""A required tool call on the real Qwen2.5-Coder-0.5B-Instruct int4 behind ``clika serve``'s app
on 127.0.0.1, through the real ``openai`` client (slow): with three tools of different schemas,
``tool_choice`` "required" and a named function give a call in every reply, to an offered tool
(the named one), whose arguments validate against that tool's schema (the ``jsonschema`` library),
whole and streamed, on /v1/chat/completions and /v1/responses, and through a chat session's
``tool_choice``. Qwen's ``<tool_call>`` is one special token of its vocabulary: the grammar
names it by id."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from tool_call_checks import Call, check_calls, requested_calls

from clika_runtime import modelverse
from clika_runtime.server import start_server

pytestmark = pytest.mark.slow

MODEL = "qwen"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "schedule_meeting",
            "description": "Put a meeting in the calendar",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "day": {
                        "type": "string",
                        "enum": ["monday", "tuesday", "wednesday", "thursday", "friday"],
                    },
                    "attendees": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4},
                    "minutes": {"type": "integer", "minimum": 15, "maximum": 240},
                },
                "required": ["title", "day", "attendees"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert_currency",
            "description": "Convert an amount of money between currencies",
            "parameters": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "minimum": 0},
                    "source": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "target": {"type": "string", "pattern": "^[A-Z]{3}$"},
                },
                "required": ["amount", "source", "target"],
                "additionalProperties": False,
            },
        },
    },
]
NAMES = [tool["function"]["name"] for tool in TOOLS]
QUESTIONS = [
    "Is it cold in Oslo today?",
    "Book a project sync with Ana and Li on Tuesday for half an hour.",
    "How many euros are 250 US dollars?",
    "Hello there!",
    "Write me a haiku about tea.",
]


@pytest.fixture(scope="module")
def model(qwen05_gguf):
    from clika_export.api import cached_export

    loaded = modelverse.load(cached_export(qwen05_gguf, "int4", progress=False), max_active=4)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def client(model):
    with start_server(model, model_id=MODEL, max_active=4) as server:
        yield openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=600)


def check(calls: list[Call], named: str | None = None, *, one: bool = False) -> None:
    check_calls(calls, TOOLS, named, one=one)


def chat_calls(client, question: str, choice, *, stream: bool, **fields) -> list[Call]:
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": question}],
        "tools": TOOLS,
        "tool_choice": choice,
        "temperature": 0,
        "max_tokens": 160,
        **fields,
    }
    return requested_calls(client, request, stream=stream)


def at_once(ask, cases):
    """``ask(*case)`` for every case, sent together: the server batches them (four rows active), so
    the requests share each decode step instead of waiting for each other. In the cases' order."""
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        return list(pool.map(lambda case: ask(*case), cases))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_required_calls_validate(client, stream):
    def ask(question):
        return chat_calls(client, question, "required", stream=stream)

    for calls in at_once(ask, [(q,) for q in (QUESTIONS if not stream else QUESTIONS[1::2])]):
        check(calls)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_named_call_is_that_function_whatever_was_asked(client, stream):
    cases = list(zip(NAMES, QUESTIONS[:-4:-1], strict=True))

    def ask(name, question):
        return chat_calls(client, question, {"type": "function", "function": {"name": name}}, stream=stream)

    for (name, _), calls in zip(cases, at_once(ask, cases), strict=True):
        check(calls, name)


def test_one_call_when_parallel_calls_are_off(client):
    question = "What is the weather in Paris and in Rome?"
    check(chat_calls(client, question, "required", stream=False, parallel_tool_calls=False), one=True)


def responses_calls(client, question: str, choice, stream: bool) -> list[Call]:
    """The function calls of a /v1/responses reply: its output items, or its streamed done events."""
    tools = [{"type": "function", **tool["function"]} for tool in TOOLS]
    request = dict(model=MODEL, input=question, tools=tools, tool_choice=choice, temperature=0)
    if not stream:
        response = client.responses.create(**request, max_output_tokens=160)
        return [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]
    events = client.responses.create(**request, max_output_tokens=160, stream=True)
    done = [e for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    return [(e.item.name, json.loads(e.item.arguments)) for e in done]


def test_responses_required_and_named(client):
    choices = (("required", None), ({"type": "function", "name": "convert_currency"}, "convert_currency"))
    cases = [
        (question, choice, stream)
        for choice, _ in choices
        for question, stream in ((QUESTIONS[3], False), (QUESTIONS[0], True))
    ]
    named = [name for _, name in choices for _ in range(2)]
    for calls, name in zip(at_once(lambda *case: responses_calls(client, *case), cases), named, strict=True):
        check(calls, name)


def test_a_chat_sessions_tool_choice(model):
    with model.chat_session(tools=TOOLS) as chat:
        for question in QUESTIONS[3:]:
            chat.send(question, tool_choice="required", max_new_tokens=160)
            check([(call.name, call.arguments) for call in chat.tool_calls])
        chat.send(QUESTIONS[0], tool_choice="schedule_meeting", max_new_tokens=160)
        check([(call.name, call.arguments) for call in chat.tool_calls], "schedule_meeting")


def test_auto_stays_free(client):
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hello in French, one word."}],
        tools=TOOLS,
        tool_choice="auto",
        temperature=0,
        max_tokens=16,
    )
    message = reply.choices[0].message
    assert message.tool_calls is None and message.content  # the model chose to answer


def test_a_required_call_with_a_response_format_is_refused(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            tools=TOOLS,
            tool_choice="required",
            response_format={"type": "json_object"},
            max_tokens=8,
        )
    assert caught.value.body["param"] == "tool_choice"
