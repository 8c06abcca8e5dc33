"""Builds the optional CPU kernel library; pyproject.toml holds all other metadata.

The kernels (kernels/src, C++17) become clika_runtime/kernels/_clika_kernels*.so, an ONNX
Runtime custom-op library loaded with SessionOptions.register_custom_ops_library. Plain
g++ flags and no -march: every ISA path carries its own target options and the library
picks one at run time. Without a compiler or the ORT C header the install still
succeeds, with a warning and no library; the runtime then runs its fallback graphs.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "kernels"))
import build_cache  # noqa: E402  (build-time helpers beside the sources)
import ort_headers  # noqa: E402

KERNELS = Extension(
    "clika_runtime.kernels._clika_kernels",
    sources=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "kernels" / "src").glob("*.cpp")),
    depends=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "kernels" / "src").glob("*.h")),
    language="c++",
    # -ffp-contract=off: the portable code rounds exactly as written on every ISA; the
    # engines' fused multiply-adds are explicit intrinsics.
    # -fno-wrapv: Python's own CFLAGS carry -fwrapv, which keeps GCC from reasoning about
    # the engines' index arithmetic and halved their speed (Q4_1 int8, K=576: 201 vs 111 us).
    # -fno-trapping-math: no code here reads floating-point exception flags; without it GCC
    # keeps a float clamp as branches and leaves the activation epilogue unvectorized (4x slower).
    # -Wno-(maybe-)uninitialized: GCC 12 flags its own AVX-512 headers (_mm512_undefined_*).
    extra_compile_args=[
        "-O3",
        "-fno-wrapv",
        "-std=c++17",
        "-fPIC",
        "-fvisibility=hidden",
        "-ffp-contract=off",
        "-fno-trapping-math",
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

        def build() -> None:
            compile_sources_in_parallel(self.compiler)
            build_ext.build_extension(self, ext)

        command = list(getattr(self.compiler, "compiler_so", None) or [])
        sources, header = ROOT / "kernels" / "src", include / ort_headers.HEADER
        target = Path(self.get_ext_fullpath(ext.name))
        if build_cache.built_once(target, sources, header, ext.extra_compile_args, command, build):
            print(f"clika kernels: the library built from these sources, copied from {build_cache.ENV}")


def compile_sources_in_parallel(compiler) -> None:
    """One compiler process per CPU over the extension's sources (setuptools runs them one by one).

    The ISA files compile in tens of seconds each, so on two cores this halves the install.
    Each source goes through the compiler's own public ``compile`` (its up-to-date check
    included), the objects returned in the sources' order.
    """
    jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    one_by_one = compiler.compile

    def compile(sources, *args, **kwargs):
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            # map raises the first failure, as the sequential loop does
            objects = list(pool.map(lambda source: one_by_one([source], *args, **kwargs), sources))
        return [obj for part in objects for obj in part]

    compiler.compile = compile


setup(ext_modules=[KERNELS], cmdclass={"build_ext": BuildKernels})
