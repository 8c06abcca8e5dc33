"""A chat request's media parts read: ``image_url`` into pixels, ``input_audio`` into samples;
400s name the part.

The protocol keeps a turn's parts when it has media ones (``image_url``,
``input_audio``: the shapes below); each reader here swaps the parts of its
kind for the chat layer's parts (``{"type": "image"}`` / ``{"type": "audio"}``
in what the template renders, the pixels or samples in prompt order beside
it) and leaves every other part, and every string turn, as it is.

Images: ``data:`` URLs are read; local files only when the server allows
them; remote URLs never. Audio: OpenAI's part is ``{"type": "input_audio",
"input_audio": {"data": <base64>, "format": "wav"}}``; WAV is read with the
standard library and resampled to the encoder's rate; other formats would
need a decoder this server does not carry.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from clika_runtime.chat.media_turns import split_audio, split_images
from clika_runtime.media.content_parts import replaced_parts
from clika_runtime.media.image_files import ImageFileError, read_image_url
from clika_runtime.media.wav import WavError, read_wav
from clika_runtime.server.errors import bad_request

AUDIO_FORMATS = ("wav",)


def image_url_part(url: str, param: str) -> dict[str, Any]:
    """An image part as the protocols keep it (``param``: where the request holds it)."""
    return {"type": "image_url", "url": url, "param": param}


def input_audio_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    """The part's ``data`` and ``format`` checked for shape (the bytes are read later)."""
    value = part.get("input_audio")
    param = f"{where}.input_audio"
    if not isinstance(value, dict) or not isinstance(value.get("data"), str) or not value["data"]:
        raise bad_request(f"{param} must be {{'data': '<base64 WAV>', 'format': 'wav'}}", param)
    if value.get("format") not in AUDIO_FORMATS:
        raise bad_request(
            f"{param}.format {value.get('format')!r} is not read (formats: {', '.join(AUDIO_FORMATS)})",
            f"{param}.format",
        )
    return {"type": "input_audio", "data": value["data"], "format": value["format"], "param": param}


def _samples(part: dict[str, Any], sampling_rate: int) -> Any:
    where = part["param"]
    try:
        data = base64.b64decode(part["data"], validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"{where}.data is not valid base64", f"{where}.data") from None
    try:
        return read_wav(data, sampling_rate=sampling_rate)
    except WavError as exc:
        raise bad_request(f"{where}.data: {exc}", f"{where}.data") from None


def request_audio(
    messages: list[dict[str, Any]], supports_audio: bool, sampling_rate: int | None
) -> tuple[list[dict[str, Any]], list[Any]]:
    """The messages as the template reads them and their clips in prompt order (none: unchanged)."""
    if not any(isinstance(m.get("content"), list) for m in messages):
        return messages, []

    def read(part: dict[str, Any], _where: str) -> dict[str, Any]:
        if not supports_audio:
            raise bad_request(f"{part['param']}: this model takes no audio", part["param"])
        return {"type": "audio", "audio": _samples(part, sampling_rate or 16000)}

    return split_audio(replaced_parts(messages, lambda part: part.get("type") == "input_audio", read))


def request_images(
    messages: list[dict[str, Any]], supports_vision: bool, image_files: bool
) -> tuple[list[dict[str, Any]], list[Any]]:
    """The messages as the template reads them and their images in prompt order (none: unchanged)."""
    if not any(isinstance(m.get("content"), list) for m in messages):
        return messages, []

    def read(part: dict[str, Any], _where: str) -> dict[str, Any]:
        where = part["param"]
        if not supports_vision:
            raise bad_request(f"{where}: this model reads text only; it takes no images", where)
        try:
            pixels = read_image_url(part["url"], where, allow_files=image_files)
        except ImageFileError as exc:
            raise bad_request(str(exc), where) from None
        return {"type": "image", "image": pixels}

    return split_images(replaced_parts(messages, lambda part: part.get("type") == "image_url", read))
