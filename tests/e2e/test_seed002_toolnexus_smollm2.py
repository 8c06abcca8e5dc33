"""Seed 002's tool-running rows on the real SmolLM2-135M-Instruct (slow) under the hermes
tool-call template, with ``tool_choice="required"`` so that every model turn is a call whatever
the 135M model would say: a toolnexus Toolkit's tools run in a conversation, in a durable
``ask(prompt, toolkit, id=...)`` and in the streamed loop (with its suspension events), and the
toolkit's skills catalog joins the system turn."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from repo_paths import TEMPLATES
from toolnexus import create_toolkit, pending
from toolnexus import tool as nexus_tool
from toolnexus.skill import SkillDef

from clika_runtime import modelverse
from clika_runtime.sessions import AsyncChat, SQLiteStore

pytestmark = pytest.mark.slow

CALL = {"temperature": 0.0, "max_new_tokens": 48, "tool_choice": "required", "parallel_tool_calls": False}
ran: list[dict] = []


@nexus_tool
def lookup(word: str) -> str:
    """Look a word up in the dictionary."""
    ran.append({"word": word})
    return f"{word}: a word"


@nexus_tool(name="approve")
def approve(item: str):
    """Ask a person to approve an item."""
    return pending(kind="approval", prompt=f"Approve {item}?")


@pytest.fixture(scope="module")
def model(smollm2_gguf, tmp_path_factory):
    from clika_export.api import cached_export

    export = cached_export(smollm2_gguf, "int4", progress=False)
    folder = tmp_path_factory.mktemp("smollm2-hermes")
    for item in export.iterdir():
        if item.name != "chat_template.jinja":
            try:
                os.link(item, folder / item.name)
            except OSError:
                shutil.copy(item, folder / item.name)
    (folder / "chat_template.jinja").write_text((TEMPLATES / "hermes_tools.jinja").read_text())
    loaded = modelverse.load(folder)
    assert loaded.supports_tools
    yield loaded
    loaded.close()


def answered(messages) -> list[str]:
    return [m["tool_call_id"] for m in messages if m["role"] == "tool"]


def test_seed002_a_toolnexus_toolkits_tools_run_in_the_conversation(model):
    ran.clear()

    async def main():
        tk = await create_toolkit(builtins=False, extra_tools=[lookup])
        try:
            convo = AsyncChat(model).conversation(tk, max_turns=2)
            return await convo.send("Look up the word 'sea'.", **CALL), convo.messages
        finally:
            await tk.close()

    result, messages = asyncio.run(main())
    assert result.tool_call_count == len(ran) >= 1 and result.turns == 2
    assert (result.run_status, result.limit) == ("incomplete", "maxTurns")  # every turn was a call
    assert len(answered(messages)) == result.tool_call_count


def test_seed002_the_durable_ask_runs_tools_and_saves_their_turns(model, tmp_path):
    ran.clear()

    async def main():
        tk = await create_toolkit(builtins=False, extra_tools=[lookup])
        try:
            with SQLiteStore(tmp_path / "conversations.db") as store:
                chat = AsyncChat(model, store=store)
                result = await chat.ask("Look up the word 'sea'.", tk, id="words", max_turns=2, **CALL)
                return result, await store.get("words")
        finally:
            await tk.close()

    result, saved = asyncio.run(main())
    assert result.tool_call_count == len(ran) >= 1
    assert len(answered(saved)) == result.tool_call_count and saved == list(result.messages)


def test_seed002_stream_runs_the_tool_loop_with_suspension_events(model):
    async def main():
        tk = await create_toolkit(builtins=False, extra_tools=[approve])
        try:
            chat = AsyncChat(model)
            return [event async for event in chat.stream("Approve the invoice.", tk, **CALL)]
        finally:
            await tk.close()

    events = asyncio.run(main())
    kinds = [event["type"] for event in events]
    assert kinds[-2:] == ["usage", "done"] and "tool_call" in kinds
    assert kinds.index("tool_call") < kinds.index("pending") < kinds.index("tool_result")
    request = next(event["request"] for event in events if event["type"] == "pending")
    result = events[-1]["result"]
    assert result.run_status == "pending" and result.pending is request and request.kind == "approval"
    assert result.turns == 1  # the loop stopped at the suspension


def test_seed002_the_skills_catalog_joins_the_system_turn(model):
    async def main():
        skills = [SkillDef(name="greeting", content="Greet warmly.", description="How to greet people")]
        tk = await create_toolkit(builtins=False, skills=skills)
        try:
            convo = AsyncChat(model, system="You are terse.").conversation(tk, max_turns=1)
            await convo.send("Hello!", **CALL)
            return tk.skills_prompt(), convo.messages
        finally:
            await tk.close()

    catalog, messages = asyncio.run(main())
    assert catalog and messages[0] == {"role": "system", "content": f"You are terse.\n\n{catalog}"}
