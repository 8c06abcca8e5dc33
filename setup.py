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
        compile_sources_in_parallel(self.compiler)
        super().build_extension(ext)


def compile_sources_in_parallel(compiler) -> None:
    """One compiler process per CPU over the extension's sources (setuptools runs them one by one).

    The ISA files compile in tens of seconds each, so on two cores this halves the install. It
    drives the compiler's per-object step as ``CCompiler.compile`` does; a compiler class
    without those steps keeps its own sequential ``compile``.
    """
    if not all(hasattr(compiler, step) for step in ("_setup_compile", "_get_cc_args", "_compile")):
        return
    jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=False,
                extra_preargs=None, extra_postargs=None, depends=None):  # fmt: skip
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs
        )
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
        todo = [(obj, *build[obj]) for obj in objects if obj in build]  # up to date: not in ``build``
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for done in [pool.submit(compiler._compile, obj, src, ext, cc_args, extra_postargs, pp_opts)
                         for obj, src, ext in todo]:  # fmt: skip
                done.result()  # the first failure is raised, as the sequential loop raises it
        return objects

    compiler.compile = compile


setup(ext_modules=[KERNELS], cmdclass={"build_ext": BuildKernels})
