"""Builds the optional CPU kernel library; pyproject.toml holds all other metadata.

The kernels (kernels/src, C++17) become clika_runtime/kernels/_clika_kernels*.so, an ONNX
Runtime custom-op library loaded with SessionOptions.register_custom_ops_library. Plain
g++ flags and no -march: every ISA path carries its own target options and the library
picks one at run time. Without a compiler or the ORT C header the install still
succeeds, with a warning and no library; the runtime then runs its fallback graphs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "kernels"))
import ort_headers  # noqa: E402  (build-time helper beside the sources)

KERNELS = Extension(
    "clika_runtime.kernels._clika_kernels",
    sources=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "kernels" / "src").glob("*.cpp")),
    depends=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "kernels" / "src").glob("*.h")),
    language="c++",
    # -ffp-contract=off: the portable code rounds exactly as written on every ISA; the
    # engines' fused multiply-adds are explicit intrinsics.
    # -fno-wrapv: Python's own CFLAGS carry -fwrapv, which keeps GCC from reasoning about
    # the engines' index arithmetic and halved their speed (Q4_1 int8, K=576: 201 vs 111 us).
    # -Wno-(maybe-)uninitialized: GCC 12 flags its own AVX-512 headers (_mm512_undefined_*).
    extra_compile_args=[
        "-O3",
        "-fno-wrapv",
        "-std=c++17",
        "-fPIC",
        "-fvisibility=hidden",
        "-ffp-contract=off",
        "-Wno-uninitialized",
        "-Wno-maybe-uninitialized",
    ],
    optional=True,
)


def warn(message: str) -> None:
    print(f"WARNING: clika kernels not built: {message}", file=sys.stderr)


class BuildKernels(build_ext):
    """Finds (or fetches) the ORT header first; any failure leaves the extension out."""

    def build_extension(self, ext: Extension) -> None:
        include = ort_headers.find_include_dir(log=warn)
        if include is None:
            warn("no ONNX Runtime C API header; the runtime will use its fallback graphs")
            return
        ext.include_dirs = [str(include), *ext.include_dirs]
        super().build_extension(ext)


setup(ext_modules=[KERNELS], cmdclass={"build_ext": BuildKernels})
