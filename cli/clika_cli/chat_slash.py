"""The slash commands of ``clika chat``: /clear, /set, /show, /save, /load, /help, /exit."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from clika_cli.chat_audio import read_audio_attachment
from clika_cli.chat_images import read_attachment
from clika_cli.common import dim, say
from clika_cli.conversations import ConversationError

if TYPE_CHECKING:
    from clika_cli.conversations import Conversations
    from clika_runtime.chat.session import ChatSession
    from clika_runtime.modelverse import GenerativeModel


class SlashHost(Protocol):
    """What the slash commands read and change of the chat they run in (the loop is one).

    Named here, so the commands need not import the loop that imports them.
    """

    model: GenerativeModel
    name: str
    budget: int
    overrides: dict[str, Any]
    conversations: Conversations
    conversation_id: str | None
    session: ChatSession
    images: list[Any]
    audio: list[Any]

    @property
    def system(self) -> str | None: ...
    def clear(self) -> str | None: ...
    def set_system(self, text: str | None) -> None: ...
    def save(self, conversation_id: str | None) -> str: ...
    def load(self, conversation_id: str) -> int: ...


HELP = """\
/clear              forget the conversation (the system prompt stays; also /reset)
/set KEY VALUE      change a setting: system, max_tokens, temperature, top_p, top_k, min_p,
                    repetition_penalty, presence_penalty, frequency_penalty, seed,
                    ignore_eos (on/off: replies run to max_tokens, as llama.cpp's --ignore-eos)
                    (/set system TEXT replaces the system prompt and keeps the conversation)
/show               the model, the settings, the context used and the conversation's id
/save [ID]          save the conversation (and every later reply) under ID (default: a new id)
/load [ID]          continue a saved conversation (/load alone lists them)
/image PATH         attach an image file to your next message (models with a vision graph)
/audio PATH.wav     attach a WAV clip to your next message (models with an audio graph)
/help               this list
/exit               leave (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)
A line ending in \\ continues on the next line; \"\"\" opens and closes a multi-line block.
Ctrl-C during a reply stops the reply. `clika chat --resume ID` continues a saved chat."""

EXIT = ("/exit", "/quit", "/bye")

# /set KEY: how VALUE is read. Decode options go through GenerationConfig's own checks.
_NUMBERS: dict[str, type] = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float,
    "repetition_penalty": float,
    "presence_penalty": float,
    "frequency_penalty": float,
    "seed": int,
}
# /set KEY on|off: switches of the decode.
_SWITCHES = ("ignore_eos",)
_ON, _OFF = ("on", "true", "yes", "1"), ("off", "false", "no", "0")
SETTINGS = ("system", "max_tokens", *_NUMBERS, *_SWITCHES)


def run_command(repl: SlashHost, line: str) -> bool:
    """Run one slash command line; False when the chat should end."""
    name, _, argument = line.partition(" ")
    argument = argument.strip()
    if name in EXIT:
        return False
    handler = _COMMANDS.get(name)
    if handler is None:
        say(f"unknown command {name}; /help lists them")
        return True
    try:
        handler(repl, argument)
    except (ConversationError, ValueError) as exc:
        say(f"Error: {exc}")
    return True


def _help(_repl: SlashHost, _argument: str) -> None:
    say(HELP)


def _clear(repl: SlashHost, _argument: str) -> None:
    kept = repl.clear()
    say(dim("(conversation cleared" + (f"; it stays saved as {kept!r})" if kept else ")")))


def _system(repl: SlashHost, argument: str) -> None:
    """/system TEXT (the older spelling of /set system); /system alone shows it."""
    if argument:
        _set(repl, f"system {argument}")
    else:
        say(f"system prompt: {repl.system!r}" if repl.system else "no system prompt")


def _set(repl: SlashHost, argument: str) -> None:
    key, _, value = argument.partition(" ")
    value = value.strip()
    if not key:
        say(f"/set KEY VALUE, KEY one of: {', '.join(SETTINGS)}")
        return
    if key == "system":
        repl.set_system(value or None)
        say(dim(f"(system prompt {'set' if value else 'removed'}; the conversation goes on)"))
        return
    if key not in SETTINGS:
        raise ValueError(f"/set: unknown setting {key!r}; settings: {', '.join(SETTINGS)}")
    if not value:
        raise ValueError(f"/set {key} needs a value")
    if key == "max_tokens":
        repl.budget = _read_number(key, value, int, minimum=1)
    elif key in _SWITCHES:
        repl.overrides[key] = _read_switch(key, value)
    else:
        repl.overrides[key] = checked_decode_option(key, _read_number(key, value, _NUMBERS[key]))
    say(dim(f"({key} = {value})"))


def _read_switch(key: str, value: str) -> bool:
    word = value.lower()
    if word not in _ON + _OFF:
        raise ValueError(f"/set {key}: {value!r} is not on or off")
    return word in _ON


def _read_number(key: str, value: str, kind: type, minimum: int | None = None) -> Any:
    try:
        number = kind(value)
    except ValueError:
        raise ValueError(
            f"/set {key}: {value!r} is not {'an integer' if kind is int else 'a number'}"
        ) from None
    if minimum is not None and number < minimum:
        raise ValueError(f"/set {key}: {value} is below {minimum}")
    return number


def checked_decode_option(key: str, value: Any) -> Any:
    """``value`` when GenerationConfig takes it for ``key``; its ValueError otherwise."""
    from clika_runtime.engine.config import GenerationConfig

    try:
        GenerationConfig(**{key: value})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"/set {key}: {exc}") from None
    return value


def _context_used(repl: SlashHost) -> str:
    """How many of the context window's tokens the conversation takes (as the next turn renders it)."""
    messages = repl.session.messages
    if not messages or not repl.model.has_chat_template:
        return "0"
    try:
        return str(len(repl.model.tokenizer.encode(repl.model.render(messages))))
    except ValueError as exc:  # a template that cannot render this conversation
        return f"unknown ({exc})"


def _show(repl: SlashHost, _argument: str) -> None:
    model = repl.model
    turns = sum(1 for m in repl.session.messages if m["role"] != "system")
    lines = [
        f"model:          {repl.name}",
        f"system prompt:  {repl.system!r}" if repl.system else "system prompt:  none",
        f"max_tokens:     {repl.budget}",
        f"sampling:       {json.dumps(repl.overrides, sort_keys=True) if repl.overrides else 'the model defaults'}",
        f"context:        {_context_used(repl)} of {model.max_seq} tokens used",
        f"conversation:   {turns} turns"
        + (f", saved as {repl.conversation_id!r}" if repl.conversation_id else ", not saved (/save)"),
    ]
    say("\n".join(lines))


def _save(repl: SlashHost, argument: str) -> None:
    saved = repl.save(argument or None)
    say(f"saved as {saved!r} (later replies are saved too); resume with: clika chat --resume {saved}")


def _image(repl: SlashHost, argument: str) -> None:
    pixels = read_attachment(argument, repl.model.supports_vision)
    repl.images.append(pixels)
    height, width = pixels.shape[:2]
    say(dim(f"(image attached: {width} x {height}; it rides your next message)"))


def _audio(repl: SlashHost, argument: str) -> None:
    model = repl.model
    samples = read_audio_attachment(argument, model.supports_audio, model.audio_sampling_rate)
    repl.audio.append(samples)
    seconds = len(samples) / (model.audio_sampling_rate or 1)
    say(dim(f"(audio attached: {seconds:.2f} s; it rides your next message)"))


def _load(repl: SlashHost, argument: str) -> None:
    if not argument:
        ids = repl.conversations.ids()
        say("saved conversations: " + ", ".join(ids) if ids else "no saved conversations yet (/save)")
        return
    turns = repl.load(argument)
    say(f"loaded {argument!r}: {turns} turns; the conversation goes on from there")


_COMMANDS: dict[str, Callable[[SlashHost, str], None]] = {
    "/help": _help,
    "/clear": _clear,
    "/reset": _clear,
    "/system": _system,
    "/set": _set,
    "/show": _show,
    "/save": _save,
    "/load": _load,
    "/image": _image,
    "/audio": _audio,
}
