"""The model store: names, checkpoints and folders -> model folders; list and rm; load() by name.

Tiny checkpoints written by the test are pulled into an empty ``$CLIKA_CACHE``
(the runtime-only install is checked in ``test_packaging.py``).
"""

from __future__ import annotations

import pytest

from clika_export.pull.puller import source_sha256
from clika_runtime import modelverse
from clika_runtime.store import ModelError, cached_exports, remove, resolve
from clika_runtime.store.names import NameRecord, names_dir, record_path, write_record


def _reply(model) -> str:
    return model.generate("hello", max_new_tokens=6, temperature=0.0)


def test_load_takes_a_gguf_and_then_finds_its_export(tiny_gguf, tmp_cache):
    gguf = tiny_gguf("tiny.gguf").path
    from_checkpoint = _reply(modelverse.load(gguf, threads=1))
    local = resolve(gguf, pull=False)
    assert local.precision == "int4" and local.folder.parent == tmp_cache / "exports"
    assert _reply(modelverse.load(local.folder, threads=1)) == from_checkpoint


def test_a_recorded_name_resolves_lists_loads_and_is_removed(tiny_gguf, tmp_cache):
    gguf = tiny_gguf("tiny.gguf").path
    int8 = resolve(gguf, "int8", progress=False).folder
    int4 = resolve(gguf, progress=False).folder
    write_record(NameRecord("tiny-chat", source_sha256(gguf)))

    assert resolve("tiny-chat", "int8", pull=False).folder == int8
    assert [(e.name, e.precision) for e in cached_exports()] == [("tiny-chat", "int4"), ("tiny-chat", "int8")]
    assert _reply(modelverse.load("tiny-chat", threads=1)) == _reply(modelverse.load(int4, threads=1))

    assert remove("tiny-chat", "int4") == [int4]
    with pytest.raises(ModelError, match=r"tiny-chat is not pulled at int4 \(it is pulled at int8\)$"):
        modelverse.load("tiny-chat")
    assert remove("tiny-chat") == [int8]
    assert not int8.exists() and not record_path("tiny-chat").exists() and cached_exports() == []


def test_an_unknown_name_lists_the_catalog(tmp_cache):
    with pytest.raises(ModelError, match="unknown model 'no-such-model'.*smollm2-135m-instruct"):
        modelverse.load("no-such-model")


def test_a_damaged_name_record_reads_as_absent(tmp_cache):
    names_dir().mkdir(parents=True)
    record_path("broken").write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelError, match="unknown model 'broken'"):
        resolve("broken")
    with pytest.raises(ModelError, match="broken is not in the cache"):
        remove("broken")


def test_a_recorded_download_outside_the_cache_is_left_alone(tiny_gguf, tmp_cache, tmp_path):
    gguf = tiny_gguf("tiny.gguf").path
    folder = resolve(gguf, "fp32", progress=False).folder
    outside = tmp_path / "precious.bin"
    outside.write_bytes(b"keep me")
    write_record(NameRecord("tiny-chat", source_sha256(gguf), downloads=("../precious.bin", str(outside))))
    assert remove("tiny-chat") == [folder]
    assert outside.read_bytes() == b"keep me"


def test_a_missing_path_and_an_exported_folder_at_another_precision_are_refused(tiny_gguf, tmp_cache):
    with pytest.raises(ModelError, match="does not exist"):
        modelverse.load("./nowhere/model")
    folder = resolve(tiny_gguf("tiny.gguf").path, "fp32", progress=False).folder
    with pytest.raises(ModelError, match="is an exported fp32 model; --precision int8 does not apply"):
        resolve(folder, "int8")


def test_the_runtime_store_and_the_catalog_name_the_same_default():
    from clika_export.pull import catalog
    from clika_runtime import store

    assert store.DEFAULT_MODEL == catalog.DEFAULT_MODEL == catalog.default_model()


def test_the_newest_export_of_a_name_is_listed_first(tiny_gguf, tmp_cache):
    """An upgrade's re-export sits beside the old one: what ``clika show`` and ``list`` give
    first is the newer, the one the name loads."""
    import os
    import shutil

    gguf = tiny_gguf("tiny.gguf").path
    current = resolve(gguf, progress=False).folder
    older = current.parent / ("0" * 32)
    shutil.copytree(current, older)
    write_record(NameRecord("tiny-chat", source_sha256(gguf)))
    for folder, when in ((older, 1_000_000_000), (current, 2_000_000_000)):
        os.utime(folder / "manifest.json", (when, when))
    assert [e.folder for e in cached_exports()] == [current, older]
    assert resolve("tiny-chat", pull=False).folder == current
