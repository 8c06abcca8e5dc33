"""Images riding a conversation's user turns, as the chat layer handles them.

A user turn with images holds them as content parts ``{"type": "image",
"image": <tensor>}`` before its text part (what ``attach_images`` builds). The
chat template sees each as ``{"type": "image"}`` and emits the model's image
marker there; the pixels stay in this process (the template renders in a
separate one) and are handed, in prompt order, to the model, which runs its
vision graph and expands each marker into the image's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

IMAGE_PART = "image"


def refuse_media(images: Sequence[Any], audio: Sequence[Any], videos: Sequence[Any], *, vision: bool) -> None:
    """Raise ValueError naming the first kind of media the model does not read."""
    for name, given, read in (("images", images, vision), ("audio", audio, False), ("videos", videos, False)):
        if _given(given, name) and not read:
            what = "reads text only" if name == "images" or not vision else "reads text and images"
            raise ValueError(f"this model {what}; it takes no {name}")


def _given(value: Any, name: str) -> bool:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence (a list of tensors), got {type(value).__name__}")
    return len(value) > 0


def attach_images(message: Mapping[str, Any], images: Sequence[Any]) -> dict[str, Any]:
    """``message`` (a user turn) with ``images`` as image parts before its content."""
    if not images:
        return dict(message)
    content = message.get("content")
    if isinstance(content, str):
        parts: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = list(content)
    else:
        parts = []
    return {**message, "content": [*({"type": IMAGE_PART, IMAGE_PART: image} for image in images), *parts]}


def with_images_on_last_user_turn(messages: Sequence[Mapping[str, Any]], images: Sequence[Any]) -> list[Any]:
    """``messages`` with ``images`` riding the last user turn (ValueError when there is none)."""
    out = list(messages)
    if not images:
        return out
    for index in range(len(out) - 1, -1, -1):
        if isinstance(out[index], Mapping) and out[index].get("role") == "user":
            out[index] = attach_images(out[index], images)
            return out
    raise ValueError("images ride a user turn: the messages have none")


def split_images(messages: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The messages as the template reads them (image parts without their pixels) and the images
    they held, in prompt order."""
    images: list[Any] = []
    rendered: list[Mapping[str, Any]] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list) or not any(_is_image(part) for part in content):
            rendered.append(message)
            continue
        parts = []
        for part in content:
            if _is_image(part):
                images.append(part[IMAGE_PART])
                parts.append({"type": IMAGE_PART})
            else:
                parts.append(part)
        rendered.append({**message, "content": parts})
    return rendered, images


def _is_image(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") == IMAGE_PART and IMAGE_PART in part
