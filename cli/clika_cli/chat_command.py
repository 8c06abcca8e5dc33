"""``clika chat``: a conversation in the terminal, streamed, with line editing, history and saved chats.

The loop lives in ``chat_repl``, the slash commands in ``chat_slash``, line
reading and history in ``chat_input`` and saved conversations in
``conversations``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from clika_cli.arguments import checked_text
from clika_cli.chat_input import line_editing
from clika_cli.chat_repl import ChatRepl
from clika_cli.common import (
    EngineChoice,
    dim,
    engine_options,
    load_model,
    local_model,
    precision_option,
    pulled_note,
    reply_options,
    say,
)
from clika_cli.conversations import ConversationError, Conversations, history_file
from clika_export.pull.catalog import default_model

if TYPE_CHECKING:
    from clika_runtime.modelverse import GenerativeModel


@click.command(help=f"Chat with MODEL (default: {default_model()}, pulled on first use).")
@click.argument("model", required=False, default=None)
@precision_option
@click.option("--system", default=None, help="System prompt.")
@click.option(
    "--resume",
    default=None,
    metavar="ID",
    help="Continue the conversation saved under ID (/save in a chat; /load lists them).",
)
@click.option(
    "--web",
    is_flag=True,
    help="Chat in the browser: serve every cached model (MODEL the default) and open the chat page.",
)
@reply_options(max_tokens=512)
@engine_options
def chat(
    model: str | None,
    precision: str | None,
    system: str | None,
    resume: str | None,
    web: bool,
    max_tokens: int,
    temperature: float | None,
    seed: int | None,
    assistant: str | None,
    prompt_lookup: int,
    engine: EngineChoice,
) -> None:
    if web:
        from clika_cli.serve_store import chat_in_the_browser

        local = local_model(model, precision, role="read as the model") if model else None
        return chat_in_the_browser(local, engine, resume)
    if resume is not None and system is not None:
        raise click.UsageError(
            "--system and --resume exclude each other (a saved chat has its own system prompt)"
        )
    if system is not None:
        checked_text(system, "--system")
    conversations = Conversations()
    saved = _saved_conversation(conversations, resume)
    name = model or default_model()
    role = "read as the model (chat takes no message on the command line: type it at the prompt)"
    local = local_model(name, precision, role=role if model else "")
    pulled_note(local)
    loaded = load_model(local, engine, assistant=assistant)
    if not loaded.has_chat_template:
        loaded.close()
        raise click.ClickException(
            f"{name} has no chat template (a base model: it continues text, it does not take turns); "
            f'use `clika generate {name} "your text"`'
        )
    overrides = _reply_overrides(loaded, temperature, seed, prompt_lookup)
    repl = ChatRepl(
        loaded,
        system=system,
        budget=max_tokens,
        overrides=overrides,
        name=local.name,
        conversations=conversations,
    )
    try:
        if resume is not None and saved is not None:
            _resume(repl, resume, saved)
        say(dim("/help lists the commands; Ctrl-D or /exit leaves."))
        _run_interactively(repl)
    finally:
        repl.close()
        loaded.close()
    if repl.conversation_id is not None:
        say(
            dim(f"saved as {repl.conversation_id!r}; resume with: clika chat --resume {repl.conversation_id}")
        )


def _reply_overrides(
    model: GenerativeModel, temperature: float | None, seed: int | None, prompt_lookup: int
) -> dict[str, Any]:
    """How the chat's replies decode, from the command line (``/set`` changes them later)."""
    # A temperature on the command line takes the sampling policy over whole.
    overrides = chat_sampling(model) if temperature is None else {"temperature": temperature}
    if seed is not None:
        overrides["seed"] = seed
    if prompt_lookup:
        overrides["prompt_lookup_num_tokens"] = prompt_lookup
    return overrides


def _saved_conversation(conversations: Conversations, resume: str | None) -> list[dict[str, Any]] | None:
    """The transcript ``--resume`` names, read before the model loads so a wrong id fails fast."""
    if resume is None:
        return None
    try:
        return conversations.load(resume)
    except ConversationError as exc:
        raise click.ClickException(str(exc)) from None


def _resume(repl: ChatRepl, conversation_id: str, saved: list[dict[str, Any]]) -> None:
    try:
        turns = repl.adopt(conversation_id, saved)
    except ConversationError as exc:
        raise click.ClickException(str(exc)) from None
    say(dim(f"resumed {conversation_id!r} ({turns} turns)"))
    if repl.restored_tokens:
        say(dim(f"its saved KV holds {repl.restored_tokens:,} tokens: they are not read again"))
    last = next((m for m in reversed(saved) if m.get("role") == "assistant"), None)
    if last is not None and isinstance(last.get("content"), str):
        say(dim("last reply: ") + last["content"])


def _run_interactively(repl: ChatRepl) -> None:
    """The loop, with line editing and history when a person types (stdin is a terminal)."""
    if not sys.stdin.isatty():
        repl.run()
        return
    with line_editing(history_file()) as warning:
        if warning:
            say(dim(warning))
        repl.run()


# What an interactive chat samples with when the checkpoint names no policy of its
# own: llama.cpp's defaults. Greedy decoding makes small models loop, and a
# repetition penalty over the whole context penalizes the end-of-turn token the
# prompt is full of, so replies stop ending (measured on SmolLM2-135M).
INTERACTIVE_SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}


def chat_sampling(model: GenerativeModel) -> dict[str, Any]:
    """The chat's decode overrides: none when the checkpoint samples by itself."""
    if model.defaults.temperature > 0:
        return {}
    return dict(INTERACTIVE_SAMPLING)
