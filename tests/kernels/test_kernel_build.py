"""Where a C++ compiler exists, the install built the kernel library and it loads."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from clika_runtime.kernels.library import kernel_status, kernels_enabled, library_path


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine: the library is optional")
def test_the_library_is_built_where_gxx_exists():
    if not kernels_enabled():
        pytest.skip("CLIKA_KERNELS=off")
    assert library_path() is not None, (
        "no _clika_kernels*.so: run `pip install -e .` (or build_ext --inplace)"
    )
    status = kernel_status()
    assert status.available, status.reason
    assert status.fp32_engine and status.int8_engine


@pytest.mark.skipif(shutil.which("ldd") is None, reason="no ldd to list the library's dependencies")
def test_the_library_links_nothing_from_onnxruntime():
    path = library_path()
    if path is None:
        pytest.skip("the kernel library is not built")
    linked = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
    assert "onnxruntime" not in linked, linked
