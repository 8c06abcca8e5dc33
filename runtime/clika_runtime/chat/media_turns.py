"""Images and audio riding a conversation's user turns, as the chat layer handles them.

A user turn with images holds them as content parts ``{"type": "image",
"image": <tensor>}`` before its text part (what ``attach_images`` builds), and
its videos as ``{"type": "video", "video": (frames, timestamps)}`` after the
images. The chat template sees each as ``{"type": "image"}`` /
``{"type": "video"}`` and emits the model's marker there; the pixels stay in
this process (the template renders in a separate one) and are handed, in
prompt order, to the model, which runs its vision graph and expands each
marker into the media's tokens (a video travels among the images as a
``VideoInput``). Audio clips ride as ``{"type": "audio", "audio": <tensor>}``
(``attach_audio``); the template sees ``{"type": "audio", "audio": True}`` (Qwen
templates test for the ``audio`` key, not the type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from clika_runtime.media.arguments import VideoInput
from clika_runtime.media.content_parts import replaced_parts

IMAGE_PART = "image"
VIDEO_PART = "video"
AUDIO_PART = "audio"


def refuse_media(
    images: Sequence[Any],
    audio: Sequence[Any],
    videos: Sequence[Any],
    *,
    vision: bool,
    video: bool = False,
    hearing: bool = False,
) -> None:
    """Raise ValueError naming the first kind of media the model does not read."""
    reads = "text and images" if vision else "text and audio" if hearing else "text only"
    for name, given, read in (
        ("images", images, vision),
        ("audio", audio, hearing),
        ("videos", videos, video),
    ):
        if _given(given, name) and not read:
            raise ValueError(f"this model reads {reads}; it takes no {name}")


def refuse_media_for(model: Any, images: Sequence[Any], audio: Sequence[Any], videos: Sequence[Any]) -> None:
    """``refuse_media`` with what ``model`` (a ``ChatModel``) reads."""
    refuse_media(
        images,
        audio,
        videos,
        vision=model.supports_vision,
        video=model.supports_video,
        hearing=model.supports_audio,
    )


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
    media = [
        *({"type": IMAGE_PART, IMAGE_PART: image} for image in images),
        *({"type": VIDEO_PART, VIDEO_PART: video} for video in videos),
    ]
    return _with_parts_first(message, media)


def with_images_on_last_user_turn(
    messages: Sequence[Mapping[str, Any]], images: Sequence[Any], videos: Sequence[Any] = ()
) -> list[Any]:
    """``messages`` with ``images`` (and ``videos``) riding the last user turn (ValueError when
    there is none)."""
    if not images and not videos:
        return list(messages)
    return _on_last_user_turn(
        messages,
        lambda turn: attach_images(turn, images, videos),
        "images and videos ride a user turn: the messages have none",
    )


def split_images(messages: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The messages as the template reads them (image and video parts without their pixels) and
    the media they held, in prompt order (each video as a ``VideoInput``)."""
    return _split_parts(messages, _holds_media, _rendered_media)


def _rendered_media(part: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    kind = part["type"]
    return (part[IMAGE_PART] if kind == IMAGE_PART else VideoInput(part[VIDEO_PART])), {"type": kind}


def _holds_media(part: Any) -> bool:
    """An image or video part that still holds its pixels."""
    if not isinstance(part, Mapping):
        return False
    kind = part.get("type")
    return kind in (IMAGE_PART, VIDEO_PART) and kind in part


# What a rendered audio part holds instead of its samples: never a clip, so it is not split again.
_RENDERED = True


def attach_audio(message: Mapping[str, Any], audio: Sequence[Any]) -> dict[str, Any]:
    """``message`` (a user turn) with ``audio`` clips as audio parts before its content."""
    if not audio:
        return dict(message)
    return _with_parts_first(message, [{"type": AUDIO_PART, AUDIO_PART: clip} for clip in audio])


def with_audio_on_last_user_turn(messages: Sequence[Mapping[str, Any]], audio: Sequence[Any]) -> list[Any]:
    """``messages`` with ``audio`` riding the last user turn (ValueError when there is none)."""
    if not audio:
        return list(messages)
    return _on_last_user_turn(
        messages, lambda turn: attach_audio(turn, audio), "audio ride a user turn: the messages have none"
    )


def split_audio(messages: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The messages as the template reads them (audio parts with ``True`` for their samples) and
    the clips they held, in prompt order."""
    return _split_parts(messages, _holds_audio, _rendered_audio)


def _rendered_audio(part: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    return part[AUDIO_PART], {"type": AUDIO_PART, AUDIO_PART: _RENDERED}


def _holds_audio(part: Any) -> bool:
    """An audio part that still holds its samples."""
    return (
        isinstance(part, Mapping)
        and part.get("type") == AUDIO_PART
        and AUDIO_PART in part
        and part[AUDIO_PART] is not _RENDERED
    )


def _with_parts_first(message: Mapping[str, Any], media: list[dict[str, Any]]) -> dict[str, Any]:
    """``message`` with the ``media`` parts before its content (a string becomes a text part)."""
    content = message.get("content")
    if isinstance(content, str):
        parts: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = list(content)
    else:
        parts = []
    return {**message, "content": [*media, *parts]}


def _on_last_user_turn(
    messages: Sequence[Mapping[str, Any]], attach: Callable[[Mapping[str, Any]], Any], none: str
) -> list[Any]:
    """``messages`` with the last user turn passed through ``attach`` (ValueError ``none`` when
    there is no user turn)."""
    out = list(messages)
    for index in range(len(out) - 1, -1, -1):
        if isinstance(out[index], Mapping) and out[index].get("role") == "user":
            out[index] = attach(out[index])
            return out
    raise ValueError(none)


def _split_parts(
    messages: Sequence[Mapping[str, Any]],
    holds: Callable[[Any], bool],
    take: Callable[[Mapping[str, Any]], tuple[Any, dict[str, Any]]],
) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The messages with each part ``holds`` accepts replaced by what ``take`` renders for it, and
    what ``take`` took from those parts, in prompt order; turns without such parts stay as they are."""
    taken: list[Any] = []

    def take_one(part: Mapping[str, Any], _where: str) -> dict[str, Any]:
        media, shown = take(part)
        taken.append(media)
        return shown

    return replaced_parts(messages, holds, take_one), taken
