"""Open checkpoint files only when they are regular files.

A checkpoint folder is untrusted: an entry named ``*.safetensors`` may be a
FIFO (opening it blocks until a writer comes) or a link to a device such as
``/dev/zero`` (reading it never ends). Every reader and the source digest open
files here, so such entries are refused before a byte is read.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import BinaryIO, Protocol

from clika_export.checkpoint_error import CheckpointError


class SupportsUpdate(Protocol):
    """What a digest reports its progress to (a tqdm bar has it)."""

    def update(self, n: int) -> object: ...


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for binary reading, or CheckpointError when it is not a regular file."""
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CheckpointError(f"{path.name} is missing") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointError(f"{path.name} is not a regular file (a device, pipe or socket): not read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def file_sha256(path: Path, progress: SupportsUpdate | None = None) -> str:
    """sha256 of a regular file, streamed; ``progress`` (a tqdm bar) is told each chunk's size."""
    digest = hashlib.sha256()
    with open_regular(Path(path)) as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
            if progress is not None:
                progress.update(len(chunk))
    return digest.hexdigest()
