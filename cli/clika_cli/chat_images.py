"""Images in ``clika chat``: ``/image PATH`` attaches one to the next message; saved chats keep them.

An attached image rides the next user turn (the session keeps it in its
history as an image part). The conversation store keeps the pixels (once per
image, by sha256), so a resumed chat sees the same images; chats saved before
it did that hold each image as a PNG data URL, which loading still reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clika_cli.saved_parts import map_parts
from clika_runtime.media.image_files import ImageFileError, read_image_file, read_image_url

_DATA = "image_data"  # an older saved image part's key: its PNG as a data: URL


def read_attachment(path: str, supports_vision: bool) -> np.ndarray:
    """The pixels of the image file at ``path`` for ``/image`` (ValueError naming the problem)."""
    if not path:
        raise ValueError("/image PATH: name an image file (PNG, JPEG, WebP)")
    if not supports_vision:
        raise ValueError("this model reads text only; /image needs a model with a vision graph")
    return read_image_file(path.strip().strip("'\""), f"/image {path}")


def restored(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Saved ``messages`` with each image part kept as a PNG data URL (older saves) as pixels."""
    return map_parts(messages, _decoded)


def _decoded(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") != "image" or _DATA not in part:
        return part
    try:
        return {"type": "image", "image": read_image_url(part[_DATA], "a saved image")}
    except ImageFileError as exc:
        raise ValueError(str(exc)) from None
