"""A required tool call on the real SmolLM2-135M-Instruct (slow, but the smallest real model), served
under each tool-call format's chat template and asked through the real ``openai`` client: every
reply is a call of an offered tool (the named one when one is named) whose arguments validate
against that tool's schema (the ``jsonschema`` library), whole and streamed. SmolLM2's vocabulary
has no call markers of its own, so the grammar spells them out as text."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import openai
import pytest
from repo_paths import TEMPLATES
from tool_call_checks import Call, check_calls, requested_calls

from clika_runtime import modelverse
from clika_runtime.server import start_server

pytestmark = pytest.mark.slow

FORMATS = {
    "hermes": "hermes_tools.jinja",
    "llama3_json": "llama3_json_tools.jinja",
    "mistral": "mistral_tools.jinja",
    "pythonic": "pythonic_tools.jinja",
    "qwen_xml": "qwen_xml_tools.jinja",
}
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
                    "city": {"type": "string", "maxLength": 24},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add_numbers",
            "description": "Add two integers",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                    "b": {"type": "integer", "minimum": -1000, "maximum": 1000},
                },
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    },
]
QUESTIONS = ["What is the weather in Paris?", "What is 12 plus 30?", "Hello there!"]


@pytest.fixture(scope="module")
def smollm2_folder(smollm2_gguf, tmp_path_factory) -> Path:
    """A copy of SmolLM2's int4 export whose chat template each format replaces in turn."""
    from clika_export.api import cached_export

    export = cached_export(smollm2_gguf, "int4", progress=False)
    folder = tmp_path_factory.mktemp("smollm2")
    for item in export.iterdir():
        try:
            os.link(item, folder / item.name)  # the template is replaced, never written through
        except OSError:
            shutil.copy(item, folder / item.name)
    return folder


@pytest.fixture(scope="module", params=sorted(FORMATS))
def served(request, smollm2_folder):
    """SmolLM2 under the format's template."""
    template = smollm2_folder / "chat_template.jinja"
    template.unlink(missing_ok=True)
    template.write_text((TEMPLATES / FORMATS[request.param]).read_text())
    model = modelverse.load(smollm2_folder)
    assert model.tool_call_format == request.param
    with start_server(model, model_id="smollm2") as running:
        yield openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=300)
    model.close()


def calls_of(client: openai.OpenAI, question: str, choice, *, stream: bool) -> list[Call]:
    request = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": question}],
        "tools": TOOLS,
        "tool_choice": choice,
        "parallel_tool_calls": False,
        "temperature": 0,
        "max_tokens": 96,
    }
    return requested_calls(client, request, stream=stream)


def check(calls: list[Call], named: str | None = None) -> None:
    check_calls(calls, TOOLS, named, one=True)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_required_calls_validate(served, stream):
    for question in QUESTIONS:
        check(calls_of(served, question, "required", stream=stream))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_named_call_is_that_function(served, stream):
    for name, question in (("add_numbers", QUESTIONS[0]), ("get_weather", QUESTIONS[1])):
        choice = {"type": "function", "function": {"name": name}}
        check(calls_of(served, question, choice, stream=stream), name)


def test_an_async_sessions_tool_choice(smollm2_folder):
    """The async sessions read ``tool_choice`` from a turn's options (here under the hermes template)."""
    from clika_runtime.sessions import AsyncChat

    template = smollm2_folder / "chat_template.jinja"
    template.unlink(missing_ok=True)
    template.write_text((TEMPLATES / FORMATS["hermes"]).read_text())

    async def turn() -> list[tuple[str, dict]]:
        result = (
            await AsyncChat(model)
            .create_session(tools=TOOLS)
            .send(QUESTIONS[2], tool_choice="add_numbers", parallel_tool_calls=False, max_new_tokens=96)
        )
        return [(call.name, call.arguments) for call in result.tool_calls]

    model = modelverse.load(smollm2_folder)
    try:
        check(asyncio.run(turn()), "add_numbers")
    finally:
        model.close()
