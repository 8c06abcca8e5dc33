"""Reading the words of a command line: which one names the model, which one is the prompt.

``clika generate "Write a haiku"`` runs the default model on that prompt;
``clika generate MODEL`` reads the prompt from stdin; ``clika generate MODEL
PROMPT`` is both. A word names a model when it is a catalog name, a name
pulled before, or a path (it exists, or it looks like one). Every refusal says which word was read as
what, so a prompt taken for a model (or the reverse) is plain to see.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from clika_export.pull.catalog import CATALOG, default_model
from clika_runtime.store.names import read_record

NAME_MAX = 255  # bytes in one file name (one path component) on the file systems we run on
STDIN = "-"


@dataclass(frozen=True)
class ModelAndPrompt:
    """What the words were read as; ``prompt`` None means: read it from stdin."""

    model: str
    prompt: str | None
    model_is_default: bool


def read_model_and_prompt(first: str | None, second: str | None) -> ModelAndPrompt:
    """``[MODEL] [PROMPT]`` as the user typed them, read as a model and a prompt."""
    if second is not None:
        return ModelAndPrompt(first or default_model(), _prompt_or_stdin(second), False)
    if first is None:
        return ModelAndPrompt(default_model(), None, True)
    if names_a_model(first):
        return ModelAndPrompt(first, None, False)
    return ModelAndPrompt(default_model(), _prompt_or_stdin(first), True)


def _prompt_or_stdin(word: str) -> str | None:
    return None if word == STDIN else word


def names_a_model(word: str) -> bool:
    """True when ``word`` is a catalog name, a name pulled before, or a path (existing, or shaped like one)."""
    if word in CATALOG or read_record(word) is not None:
        return True
    if "/" in word or word.startswith((".", "~")) or word.lower().endswith(".gguf"):
        return True
    try:
        return Path(word).expanduser().exists()
    except (OSError, ValueError):  # too long for a file name, a NUL byte: no path
        return False


def check_model_word(word: str) -> None:
    """A UsageError naming the problem when ``word`` cannot be a model name or path at all."""
    if "\0" in word:
        raise click.UsageError(f"the model {word[:40]!r}... holds a NUL character: no name or path does")
    for part in Path(word).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise click.UsageError(
                f"{part[:40]!r}... ({size} bytes) was read as the model, and no model name or file name "
                f"is longer than {NAME_MAX} bytes"
            )


def utf8_problem(text: str) -> str | None:
    """Why ``text`` is not UTF-8 text (bytes Python kept as lone surrogates), or None when it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = ord(text[exc.start])
        byte = f"byte 0x{char - 0xDC00:02x}" if 0xDC80 <= char <= 0xDCFF else f"character U+{char:04X}"
        return f"{byte} at character {exc.start} is not UTF-8 text"
    return None


def checked_text(text: str, what: str) -> str:
    """``text`` when it is UTF-8 text; a UsageError naming ``what`` and the first bad byte otherwise."""
    problem = utf8_problem(text)
    if problem:
        raise click.UsageError(f"{what}: {problem}")
    return text


def read_stdin_prompt() -> str:
    """The prompt from stdin, as UTF-8 text; a UsageError saying where it is not."""
    if sys.stdin is None:
        raise click.UsageError("no prompt was given and there is no stdin to read it from")
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.UsageError(
            f"the prompt on stdin is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
            f"({exc.reason})"
        ) from None
