"""``clika chat``: a conversation in the terminal, streamed, kept in a ChatSession.

Input: a line; a line ending in ``\\`` continues on the next; a ``\"\"\"`` line
opens a block that the next ``\"\"\"`` closes. Ctrl-C during a reply stops it
(what was said stays in the conversation); Ctrl-C at the prompt twice in a
row, ``/exit`` or EOF (Ctrl-D) leaves.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from clika_cli.common import (
    EngineChoice,
    dim,
    draft_tally,
    engine_options,
    load_model,
    local_model,
    precision_option,
    pulled_note,
    reply_options,
    say,
)
from clika_cli.models import DEFAULT_MODEL
from clika_runtime.engine.assistant import DEFAULT_ASSISTANT_TOKENS

if TYPE_CHECKING:
    from clika_runtime.chat.session import ChatSession
    from clika_runtime.modelverse import GenerativeModel

PROMPT, MORE = ">>> ", "... "
BLOCK = '"""'
HELP = """\
/reset          forget the conversation (the system prompt stays)
/system TEXT    set the system prompt and start a new conversation (/system alone shows it)
/help           this list
/exit           leave (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)
A line ending in \\ continues on the next line; \"\"\" opens and closes a multi-line block.
Ctrl-C during a reply stops the reply."""


@click.command()
@click.argument("model", required=False, default=DEFAULT_MODEL)
@precision_option
@click.option("--system", default=None, help="System prompt.")
@reply_options(max_tokens=512)
@engine_options
def chat(
    model: str,
    precision: str | None,
    system: str | None,
    max_tokens: int,
    temperature: float | None,
    seed: int | None,
    assistant: str | None,
    prompt_lookup: int,
    engine: EngineChoice,
) -> None:
    """Chat with MODEL (default: smollm2-135m-instruct, pulled on first use)."""
    local = local_model(model, precision)
    pulled_note(local)
    loaded = load_model(local, engine, assistant=assistant)
    if not loaded.has_chat_template:
        loaded.close()
        raise click.ClickException(
            f"{model} has no chat template (a base model: it continues text, it does not take turns); "
            f'use `clika generate {model} "your text"`'
        )
    # A temperature on the command line takes the sampling policy over whole.
    overrides = chat_sampling(loaded) if temperature is None else {"temperature": temperature}
    if seed is not None:
        overrides["seed"] = seed
    if prompt_lookup:
        overrides["prompt_lookup_num_tokens"] = prompt_lookup
    if assistant is not None:
        overrides["num_assistant_tokens"] = DEFAULT_ASSISTANT_TOKENS
    say(dim("/help lists the commands; Ctrl-D or /exit leaves."))
    repl = ChatRepl(loaded, system=system, budget=max_tokens, overrides=overrides)
    try:
        repl.run()
    finally:
        repl.close()
        loaded.close()


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


class ChatRepl:
    """The read-reply loop over one ChatSession (replaced by /system)."""

    def __init__(self, model: GenerativeModel, *, system: str | None, budget: int, overrides: dict) -> None:
        self.model = model
        self.system = system
        self.budget = budget
        self.overrides: dict[str, Any] = overrides
        self.session: ChatSession = self._new_session()

    def _new_session(self) -> ChatSession:
        return self.model.chat_session(system=self.system, default_budget=self.budget)

    def close(self) -> None:
        self.session.close()

    def run(self) -> None:
        interrupted = False  # the last prompt ended in Ctrl-C
        while True:
            try:
                text = read_message()
            except EOFError:
                click.echo()
                return
            except KeyboardInterrupt:
                click.echo()
                if interrupted:
                    return
                interrupted = True
                say(dim("(Ctrl-C again, /exit or Ctrl-D to leave)"))
                continue
            interrupted = False
            if not text:
                continue
            if text.startswith("/"):
                if not self.command(text):
                    return
                continue
            self.reply(text)

    def reply(self, text: str) -> None:
        pieces = self.session.send(text, stream=True, **self.overrides)
        try:
            for piece in pieces:
                if isinstance(piece, str):
                    sys.stdout.write(piece)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            pieces.close()  # type: ignore[attr-defined]  # cancels the decode; the partial reply stays
            click.echo()
            say(dim("[stopped]"))
        else:
            click.echo()
        self.stats()

    def stats(self) -> None:
        report = self.session.report
        if report is None:
            return
        parts = [f"{report.completion_tokens} tokens"]
        if report.decode_tokens_per_s:
            parts.append(f"{report.decode_tokens_per_s:.1f} tokens/s")
        if report.time_to_first_token_s is not None:
            parts.append(f"first token {report.time_to_first_token_s:.2f} s")
        tally = draft_tally(report)
        if tally:
            parts.append(tally)
        say(dim(", ".join(parts)))

    def command(self, line: str) -> bool:
        """Run a slash command; False when the chat should end."""
        name, _, argument = line.partition(" ")
        argument = argument.strip()
        if name in ("/exit", "/quit", "/bye"):
            return False
        if name == "/help":
            say(HELP)
        elif name == "/reset":
            self.session.reset()
            say(dim("(conversation cleared)"))
        elif name == "/system":
            self._system(argument)
        else:
            say(f"unknown command {name}; /help lists them")
        return True

    def _system(self, text: str) -> None:
        if not text:
            say(f"system prompt: {self.system!r}" if self.system else "no system prompt")
            return
        self.session.close()
        self.system = text
        self.session = self._new_session()
        say(dim("(system prompt set; new conversation)"))


def read_message() -> str:
    """One message: a line, continued lines (``\\``), or a triple-quoted block; stripped."""
    line = input(PROMPT)
    stripped = line.strip()
    if stripped.startswith(BLOCK):
        return _read_block(stripped[len(BLOCK) :])
    lines = []
    while line.endswith("\\"):
        lines.append(line[:-1])
        line = input(MORE)
    lines.append(line)
    return "\n".join(lines).strip()


def _read_block(first: str) -> str:
    if first.endswith(BLOCK):  # """one line"""
        return first[: -len(BLOCK)].strip()
    lines = [first] if first else []
    while True:
        line = input(MORE)
        if line.rstrip().endswith(BLOCK):
            lines.append(line.rstrip()[: -len(BLOCK)])
            return "\n".join(lines).strip()
        lines.append(line)
