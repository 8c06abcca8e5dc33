"""The kernel library on this machine: whether it is built, which ISA it runs and why.

``kernel_status()`` answers without opening a session; ``register_kernels(options)`` adds
the library's op domain to an ``onnxruntime.SessionOptions`` when it is usable. The library
picks its ISA once per process from the CPU's features; ``CLIKA_KERNEL_ISA`` (scalar,
avx2, avx512, avx512_vnni, avx512_bf16, neon) forces one, and one the CPU lacks makes the
library unusable (the status says so). ``CLIKA_KERNELS=off`` turns the library off.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

KERNELS_ENV = "CLIKA_KERNELS"
ISA_ENV = "CLIKA_KERNEL_ISA"
_OFF = ("off", "0", "false", "no")
_ON = ("", "on", "1", "true", "yes", "auto")
_FOLDER = Path(__file__).resolve().parent


@dataclass(frozen=True)
class KernelStatus:
    """available: the op can run; isa and engines: what it runs with; reason: why (or why not)."""

    available: bool
    path: Path | None
    isa: str | None
    reason: str
    fp32_engine: str | None = None
    int8_engine: str | None = None
    split16_engine: str | None = None  # what an fp32 node with fp32_form "split16" runs

    def describe(self) -> str:
        """One line for logs and ``clika show``."""
        if not self.available:
            return f"clika kernels off: {self.reason}"
        return f"clika kernels {self.isa} ({self.reason}): {self._engines()}"

    def compute_path(self) -> str:
        """What computes the ops, without why: the same engines forced or chosen give the same
        numbers, and every reason the library is off leaves the same MatMulNBits fallback."""
        if not self.available:
            return "MatMulNBits fallback"
        return f"clika kernels {self.isa}: {self._engines()}"

    def _engines(self) -> str:
        split = "" if self.split16_engine == self.fp32_engine else f", fp32 split16 {self.split16_engine}"
        return f"fp32 {self.fp32_engine}, int8 {self.int8_engine}{split}"


def library_path() -> Path | None:
    """The built library inside this package, or None when the install built none."""
    for pattern in ("_clika_kernels*.so", "_clika_kernels*.dylib", "_clika_kernels*.pyd"):
        found = sorted(_FOLDER.glob(pattern))
        if found:
            return found[0]
    return None


def kernels_enabled() -> bool:
    """False when ``CLIKA_KERNELS`` says off; ValueError for a value that is neither on nor off."""
    value = os.environ.get(KERNELS_ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ValueError(
        f"{KERNELS_ENV}={value!r}: use off (or 0) to disable the kernels, on (or unset) to use them"
    )


def kernel_status() -> KernelStatus:
    """What the library would run with in this process (it is loaded to ask)."""
    if not kernels_enabled():
        return KernelStatus(False, library_path(), None, f"{KERNELS_ENV}=off")
    path = library_path()
    if path is None:
        return KernelStatus(
            False, None, None, "the kernel library was not built at install (no C++ compiler or ORT C header)"
        )
    try:
        library = ctypes.CDLL(str(path))
    except OSError as error:
        return KernelStatus(False, path, None, f"the kernel library does not load: {error}")
    for name in ("clika_kernels_isa", "clika_kernels_isa_reason", "clika_kernels_engine"):
        getattr(library, name).restype = ctypes.c_char_p
    isa = library.clika_kernels_isa().decode()
    reason = library.clika_kernels_isa_reason().decode()
    if not isa:
        return KernelStatus(False, path, None, reason)
    fp32 = library.clika_kernels_engine(0).decode()
    int8 = library.clika_kernels_engine(1).decode()
    split16 = library.clika_kernels_engine(2).decode()
    return KernelStatus(True, path, isa, reason, fp32, int8, split16)


def register_kernels(options: ort.SessionOptions) -> KernelStatus:
    """Registers the op domain on ``options`` when the library is usable; returns the status either way."""
    status = kernel_status()
    if status.available:
        options.register_custom_ops_library(str(status.path))
    return status
