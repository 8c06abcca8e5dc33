"""A chat request's ``image_url`` parts read into pixels: 400s name the part.

The protocol keeps a turn's parts when it has ``image_url`` ones; here each
becomes an image part for the chat layer (``{"type": "image"}`` in what the
template renders, the pixels in prompt order beside it). ``data:`` URLs are
read; local files only when the server allows them; remote URLs never.
"""

from __future__ import annotations

from typing import Any

from clika_runtime.chat.media_turns import split_images
from clika_runtime.media.content_parts import replaced_parts
from clika_runtime.media.image_files import ImageFileError, read_image_url
from clika_runtime.server.errors import bad_request


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
