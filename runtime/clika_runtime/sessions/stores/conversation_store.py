"""Where conversations are remembered: the ConversationStore protocol and the in-memory store.

A store maps a conversation id to its transcript (a list of message dicts, the
shape a session's ``messages`` has). Its four methods are coroutines, so a
store that touches a disk or a network does that off the event loop; any
object with these methods works (the protocol is structural), and a transcript
store with ``get`` / ``save`` of this shape plugs into agent clients that keep
conversations the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from clika_runtime.sessions.stores.stored_audio import attach_audio, audio_digests, detach_audio
from clika_runtime.sessions.stores.stored_media import (
    StoredImageError,
    attach_images,
    detach_images,
    image_digests,
)

MAX_ID_LENGTH = 256


class StoreError(RuntimeError):
    """A store that cannot be opened or used: the message names the problem."""


@runtime_checkable
class ConversationStore(Protocol):
    """Conversations by id: ``get`` (None when unknown), ``save`` (replace), ``list``, ``delete``."""

    async def get(self, conversation_id: str) -> list[dict[str, Any]] | None:
        """The transcript saved under ``conversation_id``, or None."""
        ...

    async def save(self, conversation_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """Replace the transcript under ``conversation_id`` (all of it, or none of it)."""
        ...

    async def list(self) -> list[str]:
        """The ids of the saved conversations, the most recently saved first."""
        ...

    async def delete(self, conversation_id: str) -> bool:
        """Forget a conversation; True when there was one."""
        ...


def checked_id(conversation_id: Any) -> str:
    """``conversation_id`` when it is a usable id; ValueError naming the problem otherwise."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ValueError(f"a conversation id must be a non-empty string, got {conversation_id!r}")
    if len(conversation_id) > MAX_ID_LENGTH:
        raise ValueError(f"a conversation id may have at most {MAX_ID_LENGTH} characters")
    return conversation_id


def encode_messages(messages: Sequence[Mapping[str, Any]]) -> str:
    """The transcript as JSON text, checked: a list of message mappings, each with a string role."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of message dicts, got {type(messages).__name__}")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValueError(f"message {index} must be a mapping with a string 'role', got {message!r}")
    try:
        return json.dumps([dict(m) for m in messages], ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"messages must hold JSON values only: {exc}") from None


def decode_messages(text: str) -> list[dict[str, Any]]:
    return json.loads(text)


class InMemoryStore:
    """The default store: transcripts in a dict for the life of the process.

    Transcripts go in and out as copies (through the JSON form a durable store
    keeps), so a caller never edits a stored one by accident and what this
    store takes a file-backed store takes too. Their images and audio clips are
    kept once each by sha256 (read-only arrays shared by the transcripts that
    use them; an image's digest and a clip's never coincide).
    """

    def __init__(self) -> None:
        self._saved: dict[str, tuple[str, frozenset[str]]] = {}
        self._images: dict[str, np.ndarray] = {}

    async def get(self, conversation_id: str) -> list[dict[str, Any]] | None:
        saved = self._saved.get(checked_id(conversation_id))
        if saved is None:
            return None
        return attach_audio(attach_images(decode_messages(saved[0]), self._images.get), self._images.get)

    async def save(self, conversation_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        key = checked_id(conversation_id)
        try:
            stored, images = detach_images(messages)
            stored, clips = detach_audio(stored)
        except StoredImageError as exc:
            raise ValueError(str(exc)) from None
        text = encode_messages(stored)
        named_images, named_clips = frozenset(image_digests(stored)), frozenset(audio_digests(stored))
        for kind, named, lacks in (("image", named_images, "pixels"), ("audio clip", named_clips, "samples")):
            missing = sorted(named - images.keys() - clips.keys() - self._images.keys())
            if missing:
                raise ValueError(
                    f"messages name {kind} {missing[0][:16]}... without its {lacks}, and the store holds none"
                )
        named = named_images | named_clips
        for digest, pixels in {**images, **clips}.items():
            if digest not in self._images:
                kept = pixels.copy()  # the caller's array may change later; readers share this one
                kept.flags.writeable = False
                self._images[digest] = kept
        previous = self._saved.pop(key, None)  # re-insert: the dict's order is the save order
        self._saved[key] = (text, named)
        if previous is not None:
            self._drop_unused(previous[1])

    async def list(self) -> list[str]:
        return list(reversed(self._saved))

    async def delete(self, conversation_id: str) -> bool:
        return self._forget(checked_id(conversation_id))

    def _forget(self, key: str) -> bool:
        saved = self._saved.pop(key, None)
        if saved is None:
            return False
        self._drop_unused(saved[1])
        return True

    def _drop_unused(self, digests: frozenset[str]) -> None:
        used = set().union(*(names for _, names in self._saved.values()))
        for digest in digests - used:
            self._images.pop(digest, None)
