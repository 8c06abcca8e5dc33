"""An identical kernel build is copied from $CLIKA_KERNEL_BUILD_CACHE; any change compiles anew."""

from __future__ import annotations

import importlib.util

import pytest
from repo_paths import REPO

spec = importlib.util.spec_from_file_location("build_cache", REPO / "kernels" / "build_cache.py")
build_cache = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_cache)

FLAGS = ["-O3", "-std=c++17"]
COMPILER = ["true"]  # prints no version: the key still holds the command


@pytest.fixture
def tree(tmp_path):
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "a.cpp").write_text("int a() { return 1; }\n")
    (sources / "a.h").write_text("int a();\n")
    header = tmp_path / "onnxruntime_c_api.h"
    header.write_text("// api 21\n")
    return sources, header


def test_the_key_changes_with_every_input_and_only_then(tree):
    sources, header = tree
    key = build_cache.build_key(sources, header, FLAGS, COMPILER)
    assert build_cache.build_key(sources, header, FLAGS, COMPILER) == key
    assert build_cache.build_key(sources, header, [*FLAGS, "-g"], COMPILER) != key
    assert build_cache.build_key(sources, header, FLAGS, ["false"]) != key
    (sources / "a.h").write_text("int a(void);\n")
    changed_header = build_cache.build_key(sources, header, FLAGS, COMPILER)
    assert changed_header != key
    header.write_text("// api 22\n")
    assert build_cache.build_key(sources, header, FLAGS, COMPILER) != changed_header
    (sources / "b.cpp").write_text("")
    assert build_cache.build_key(sources, header, FLAGS, COMPILER) not in (key, changed_header)


def test_a_kept_library_is_copied_whole_and_nothing_without_the_setting(tmp_path, monkeypatch):
    built = tmp_path / "build" / "_clika_kernels.so"
    built.parent.mkdir()
    built.write_bytes(b"\x7fELF library bytes")
    target = tmp_path / "install" / "_clika_kernels.so"
    monkeypatch.delenv(build_cache.ENV, raising=False)
    build_cache.keep("k1", built)
    assert not build_cache.reuse("k1", target) and not target.exists()
    monkeypatch.setenv(build_cache.ENV, str(tmp_path / "cache"))
    assert not build_cache.reuse("k1", target)  # an empty cache: compile
    build_cache.keep("k1", built)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["k1.so"]  # no partial file left
    assert build_cache.reuse("k1", target) and target.read_bytes() == built.read_bytes()
    assert not build_cache.reuse("k2", tmp_path / "other.so")


def test_a_build_runs_once_per_key_and_always_without_the_setting(tree, tmp_path, monkeypatch):
    sources, header = tree
    target = tmp_path / "install" / "_clika_kernels.so"
    builds = []

    def build():
        builds.append(1)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"built %d" % len(builds))

    def run() -> bool:
        return build_cache.built_once(target, sources, header, FLAGS, COMPILER, build)

    monkeypatch.delenv(build_cache.ENV, raising=False)
    assert not run() and not run() and len(builds) == 2  # no cache: every install compiles
    monkeypatch.setenv(build_cache.ENV, str(tmp_path / "cache"))
    assert not run() and len(builds) == 3  # a miss compiles and keeps the result
    target.unlink()
    assert run() and len(builds) == 3 and target.read_bytes() == b"built 3"  # the same build: copied
    (sources / "a.cpp").write_text("int a() { return 2; }\n")
    assert not run() and len(builds) == 4  # a changed source compiles again
