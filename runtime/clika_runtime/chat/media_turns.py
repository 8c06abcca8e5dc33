"""Images riding a conversation's user turns, as the chat layer handles them.

A user turn with images holds them as content parts ``{"type": "image",
"image": <tensor>}`` before its text part (what ``attach_images`` builds), and
its videos as ``{"type": "video", "video": (frames, timestamps)}`` after the
images. The chat template sees each as ``{"type": "image"}`` /
``{"type": "video"}`` and emits the model's marker there; the pixels stay in
this process (the template renders in a separate one) and are handed, in
prompt order, to the model, which runs its vision graph and expands each
marker into the media's tokens (a video travels among the images as a
``VideoInput``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clika_runtime.media.arguments import VideoInput

IMAGE_PART = "image"
VIDEO_PART = "video"


def refuse_media(
    images: Sequence[Any], audio: Sequence[Any], videos: Sequence[Any], *, vision: bool, video: bool = False
) -> None:
    """Raise ValueError naming the first kind of media the model does not read."""
    for name, given, read in (("images", images, vision), ("audio", audio, False), ("videos", videos, video)):
        if _given(given, name) and not read:
            what = "reads text only" if name == "images" or not vision else "reads text and images"
            raise ValueError(f"this model {what}; it takes no {name}")


def _given(value: Any, name: str) -> bool:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence (a list of tensors), got {type(value).__name__}")
    return len(value) > 0


def attach_images(
    message: Mapping[str, Any], images: Sequence[Any], videos: Sequence[Any] = ()
) -> dict[str, Any]:
    """``message`` (a user turn) with ``images`` as image parts, then ``videos`` as video parts,
    before its content."""
    if not images and not videos:
        return dict(message)
    content = message.get("content")
    if isinstance(content, str):
        parts: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = list(content)
    else:
        parts = []
    media = [
        *({"type": IMAGE_PART, IMAGE_PART: image} for image in images),
        *({"type": VIDEO_PART, VIDEO_PART: video} for video in videos),
    ]
    return {**message, "content": [*media, *parts]}


def with_images_on_last_user_turn(
    messages: Sequence[Mapping[str, Any]], images: Sequence[Any], videos: Sequence[Any] = ()
) -> list[Any]:
    """``messages`` with ``images`` (and ``videos``) riding the last user turn (ValueError when
    there is none)."""
    out = list(messages)
    if not images and not videos:
        return out
    for index in range(len(out) - 1, -1, -1):
        if isinstance(out[index], Mapping) and out[index].get("role") == "user":
            out[index] = attach_images(out[index], images, videos)
            return out
    raise ValueError("images and videos ride a user turn: the messages have none")


def split_images(messages: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The messages as the template reads them (image and video parts without their pixels) and
    the media they held, in prompt order (each video as a ``VideoInput``)."""
    images: list[Any] = []
    rendered: list[Mapping[str, Any]] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list) or not any(_holds_media(part) for part in content):
            rendered.append(message)
            continue
        parts = []
        for part in content:
            if _holds_media(part):
                kind = part["type"]
                images.append(part[IMAGE_PART] if kind == IMAGE_PART else VideoInput(part[VIDEO_PART]))
                parts.append({"type": kind})
            else:
                parts.append(part)
        rendered.append({**message, "content": parts})
    return rendered, images


def _holds_media(part: Any) -> bool:
    """An image or video part that still holds its pixels."""
    if not isinstance(part, Mapping):
        return False
    kind = part.get("type")
    return kind in (IMAGE_PART, VIDEO_PART) and kind in part
