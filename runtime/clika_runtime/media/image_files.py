"""Image files and URLs (an API's ``image_url`` parts, a chat's ``/image PATH``) as pixels.

Decoding PNG / JPEG / WebP needs Pillow (the ``vision`` extra), imported when
an image arrives. Every input is untrusted: its size and pixel count are
capped before and while decoding, and each refusal is an ``ImageFileError``
naming where the image came from. A URL is a ``data:`` URL (base64), or, only
when the caller allows it, a local file (``file://`` or a path); the runtime
never fetches a remote URL.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np

MAX_IMAGE_BYTES = 20 << 20
MAX_IMAGE_PIXELS = 50_000_000  # a decompression bomb stops here (about 7000 x 7000)


class ImageFileError(ValueError):
    """An image that cannot be read (the message names its source and the problem)."""


def decode_image(data: bytes, where: str) -> np.ndarray:
    """``data`` (an encoded image) as uint8 RGB ``[H, W, 3]``."""
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageFileError(f"{where}: the image is {len(data)} bytes, more than {MAX_IMAGE_BYTES}")
    try:
        from PIL import Image
    except ImportError:
        raise ImageFileError(
            f"{where}: reading image files needs Pillow: pip install 'clika-runtime[vision]'"
        ) from None
    import io
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                if image.width * image.height > MAX_IMAGE_PIXELS:
                    raise ImageFileError(
                        f"{where}: the image is {image.width} x {image.height} pixels, "
                        f"more than {MAX_IMAGE_PIXELS}"
                    )
                return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except ImageFileError:
        raise
    except Exception as exc:  # Pillow raises many kinds for a damaged or unknown file
        raise ImageFileError(
            f"{where}: not an image this runtime reads ({type(exc).__name__}: {exc})"
        ) from None


def read_image_file(path: str | Path, where: str | None = None) -> np.ndarray:
    """The image file at ``path`` as pixels (a regular file, at most MAX_IMAGE_BYTES)."""
    path = Path(path).expanduser()
    where = where or str(path)
    if not path.is_file():
        raise ImageFileError(f"{where}: no such image file")
    if path.stat().st_size > MAX_IMAGE_BYTES:
        raise ImageFileError(f"{where}: the file is larger than {MAX_IMAGE_BYTES} bytes")
    return decode_image(path.read_bytes(), where)


def read_image_url(url: str, where: str, *, allow_files: bool = False) -> np.ndarray:
    """A ``data:`` URL's image, or a local file's when ``allow_files``; remote URLs are refused."""
    if not isinstance(url, str) or not url:
        raise ImageFileError(f"{where}: the image url must be a non-empty string")
    if url.startswith("data:"):
        return decode_image(_data_url_bytes(url, where), where)
    parsed = urlparse(url)
    if parsed.scheme in ("http", "https", "ftp"):
        raise ImageFileError(f"{where}: remote image URLs are not fetched; send the image as a data: URL")
    if parsed.scheme not in ("", "file"):
        raise ImageFileError(f"{where}: unsupported image URL scheme {parsed.scheme!r}")
    if not allow_files:
        raise ImageFileError(
            f"{where}: local image files are off on this server (start it with --allow-image-files); "
            "send the image as a data: URL"
        )
    return read_image_file(unquote(parsed.path) if parsed.scheme == "file" else url, where)


def _data_url_bytes(url: str, where: str) -> bytes:
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        raise ImageFileError(f"{where}: a data: URL must be base64 (data:image/png;base64,...)")
    if len(payload) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise ImageFileError(f"{where}: the image is larger than {MAX_IMAGE_BYTES} bytes")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageFileError(f"{where}: the data: URL's base64 payload is malformed") from None
