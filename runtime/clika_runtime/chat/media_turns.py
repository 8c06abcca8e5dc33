"""Images and audio riding a conversation's user turns, as the chat layer handles them.

A user turn with media holds them as content parts ``{"type": "image",
"image": <tensor>}`` or ``{"type": "audio", "audio": <tensor>}`` before its
text part (what ``attach_images`` / ``attach_audio`` build). The chat template
sees each as ``{"type": "image"}`` / ``{"type": "audio", "audio": True}`` (Qwen
templates test for the ``audio`` key, not the type) and emits the model's
marker there; the pixels and samples stay in this process (the
template renders in a separate one) and are handed, in prompt order, to the
model, which runs its tower and expands each marker into the item's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

IMAGE_PART = "image"
AUDIO_PART = "audio"


def refuse_media(
    images: Sequence[Any],
    audio: Sequence[Any],
    videos: Sequence[Any],
    *,
    vision: bool,
    hearing: bool = False,
) -> None:
    """Raise ValueError naming the first kind of media the model does not read."""
    reads = "text and images" if vision else "text and audio" if hearing else "text only"
    for name, given, read in (
        ("images", images, vision),
        ("audio", audio, hearing),
        ("videos", videos, False),
    ):
        if _given(given, name) and not read:
            raise ValueError(f"this model reads {reads}; it takes no {name}")


def _given(value: Any, name: str) -> bool:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence (a list of tensors), got {type(value).__name__}")
    return len(value) > 0


def _attach(message: Mapping[str, Any], kind: str, items: Sequence[Any]) -> dict[str, Any]:
    if not items:
        return dict(message)
    content = message.get("content")
    if isinstance(content, str):
        parts: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = list(content)
    else:
        parts = []
    return {**message, "content": [*({"type": kind, kind: item} for item in items), *parts]}


def attach_images(message: Mapping[str, Any], images: Sequence[Any]) -> dict[str, Any]:
    """``message`` (a user turn) with ``images`` as image parts before its content."""
    return _attach(message, IMAGE_PART, images)


def attach_audio(message: Mapping[str, Any], audio: Sequence[Any]) -> dict[str, Any]:
    """``message`` (a user turn) with ``audio`` clips as audio parts before its content."""
    return _attach(message, AUDIO_PART, audio)


def with_images_on_last_user_turn(messages: Sequence[Mapping[str, Any]], images: Sequence[Any]) -> list[Any]:
    """``messages`` with ``images`` riding the last user turn (ValueError when there is none)."""
    return _on_last_user_turn(messages, IMAGE_PART, images, "images")


def with_audio_on_last_user_turn(messages: Sequence[Mapping[str, Any]], audio: Sequence[Any]) -> list[Any]:
    """``messages`` with ``audio`` riding the last user turn (ValueError when there is none)."""
    return _on_last_user_turn(messages, AUDIO_PART, audio, "audio")


def _on_last_user_turn(
    messages: Sequence[Mapping[str, Any]], kind: str, items: Sequence[Any], argument: str
) -> list[Any]:
    out = list(messages)
    if not items:
        return out
    for index in range(len(out) - 1, -1, -1):
        if isinstance(out[index], Mapping) and out[index].get("role") == "user":
            out[index] = _attach(out[index], kind, items)
            return out
    raise ValueError(f"{argument} ride a user turn: the messages have none")


def split_images(messages: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The messages as the template reads them (image parts without their pixels) and the images
    they held, in prompt order."""
    return _split(messages, IMAGE_PART)


def split_audio(messages: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The messages as the template reads them (audio parts with ``True`` for their samples) and
    the clips they held, in prompt order."""
    return _split(messages, AUDIO_PART, {AUDIO_PART: _RENDERED})


# What a rendered audio part holds instead of its samples: never a clip, so it is not split again.
_RENDERED = True


def _split(
    messages: Sequence[Mapping[str, Any]], kind: str, rendered_part: Mapping[str, Any] | None = None
) -> tuple[list[Mapping[str, Any]], list[Any]]:
    items: list[Any] = []
    rendered: list[Mapping[str, Any]] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list) or not any(_is_part(part, kind) for part in content):
            rendered.append(message)
            continue
        parts = []
        for part in content:
            if _is_part(part, kind):
                items.append(part[kind])
                parts.append({"type": kind, **(rendered_part or {})})
            else:
                parts.append(part)
        rendered.append({**message, "content": parts})
    return rendered, items


def _is_part(part: Any, kind: str) -> bool:
    return (
        isinstance(part, Mapping)
        and part.get("type") == kind
        and kind in part
        and part[kind] is not _RENDERED
    )
