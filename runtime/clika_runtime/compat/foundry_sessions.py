"""Foundry Local's task sessions over :class:`~clika_runtime.compat.foundry_local.Session`.

Each is a Session (every Session method works on it, as Foundry's ``Deref`` gives) with the
methods of its task::

    chat = await ChatSession.new(model)
    print(await chat.send("What is 2 + 2?"))
    async for piece in chat.stream("Tell me a story."):
        print(piece, end="")

    embeddings = await EmbeddingsSession.new(model)
    vectors = await embeddings.embed(["a cat", "a dog"])      # [2, D], L2-normalized

    audio = await AudioSession.new(whisper_like_model)        # a model whose supports_audio
    print(await audio.transcribe(samples))                    # [S] float mono at 16 kHz
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np

from clika_runtime.compat.foundry_errors import InvalidRequestError, foundry_errors
from clika_runtime.compat.foundry_local import Item, Request, RequestOptions, Session
from clika_runtime.modelverse import GenerativeModel

__all__ = ["AudioSession", "ChatSession", "EmbeddingsSession"]

TRANSCRIBE_PROMPT = "Transcribe the audio."


class ChatSession(Session):
    """A conversation in text: ``send`` returns the reply, ``stream`` yields its pieces."""

    async def send(self, text: str, options: RequestOptions | None = None) -> str:
        """Add a user turn; the reply's text."""
        return (await self.process_request(Request([_text(text)], options))).text

    async def stream(self, text: str, options: RequestOptions | None = None) -> AsyncIterator[str]:
        """Add a user turn; the reply's text pieces as they are made (leaving early stops it)."""
        stream = self.process_streaming_request(Request([_text(text)], options))
        try:
            async for item in stream:
                yield item.text
        finally:
            await stream.aclose()


class EmbeddingsSession(Session):
    """Embedding vectors of texts, computed off the event loop beside the model's engine."""

    @classmethod
    def _check_model(cls, model: GenerativeModel) -> None:
        with foundry_errors():
            model.embedder  # noqa: B018  (opening it names why a model cannot embed)

    async def embed(self, texts: str | Sequence[str], *, dimensions: int | None = None) -> np.ndarray:
        """``[D]`` for one text, ``[N, D]`` for a list (L2-normalized; ``dimensions`` keeps the first)."""
        model = self.model
        with foundry_errors():
            return await asyncio.to_thread(model.embed, texts, dimensions=dimensions)


class AudioSession(Session):
    """Speech in, text out, on a model whose ``supports_audio``."""

    @classmethod
    def _check_model(cls, model: GenerativeModel) -> None:
        if not model.supports_audio:
            raise InvalidRequestError("an AudioSession needs a model that takes audio (supports_audio)")

    async def transcribe(
        self, samples: Any, *, prompt: str = TRANSCRIBE_PROMPT, options: RequestOptions | None = None
    ) -> str:
        """What the model hears in ``samples`` ([S] float mono at 16 kHz), asked as ``prompt``."""
        return (await self.process_request(Request([Item(prompt), Item.audio(samples)], options))).text


def _text(text: Any) -> Item:
    if not isinstance(text, str):
        raise InvalidRequestError(f"a chat turn is a string, got {type(text).__name__}")
    return Item(text)
