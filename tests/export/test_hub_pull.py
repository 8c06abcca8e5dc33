"""hf:// models through the real huggingface_hub, against the Hub's file API served on 127.0.0.1.

``HubServer`` (tests/hub_server.py) answers the endpoints huggingface_hub calls, with the
Hub's headers; the tests pull tiny checkpoints they write (a GGUF, a safetensors folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hub_server import HubServer
from tqdm import tqdm

from clika_cli.main import clika
from clika_runtime import modelverse
from clika_runtime.store import resolve
from clika_runtime.store.names import read_record


@pytest.fixture
def hub(tmp_path, tmp_cache, monkeypatch):
    """A local Hub as ``HF_ENDPOINT``, no token, online, and a Hugging Face home of the test's own."""
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        yield server


def _run(*args: str):
    return CliRunner().invoke(clika, list(args))


def _reply(folder: Path) -> str:
    return modelverse.load(folder, threads=1).generate("hello", max_new_tokens=6, temperature=0.0)


def _cache_files(cache: Path) -> list[Path]:
    return sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock")


def test_a_gguf_is_pulled_interrupted_resumed_verified_and_runs_offline(hub, tiny_gguf, tmp_cache, tmp_path):
    gguf = tiny_gguf("tiny.gguf").path
    data = gguf.read_bytes()
    hub.add("tiny-org/tiny-gguf", {"tiny.gguf": data, "README.md": b"# tiny\n", "other.gguf": b"GGUF"})
    hub.interrupt(data, after=len(data) // 3)
    spec = "hf://tiny-org/tiny-gguf/tiny.gguf"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_ENDPOINT": hub.url,  # read by huggingface_hub at import, as a user sets it
        "CLIKA_CACHE": str(tmp_cache),
    }

    def clika_command(*args: str, **extra: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "clika_cli.main", *args]
        return subprocess.run(command, env={**env, **extra}, capture_output=True, text=True, cwd=tmp_path)

    failed = clika_command("pull", spec)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    third = len(data) // 3
    assert failed.stderr.splitlines()[-1] == (
        f"Error: {spec}: the download of tiny.gguf stopped after {third} of {len(data)} bytes; "
        "run again to resume it"
    )
    assert read_record(spec) is None and not (tmp_cache / "exports").exists()
    (partial,) = (tmp_cache / "partial").rglob("tiny.gguf.part")
    assert partial.stat().st_size == third

    pulled = clika_command("pull", spec)
    assert pulled.returncode == 0, pulled.stderr
    assert hub.downloads_of(data) == [None, f"bytes={third}-"]
    total = tqdm.format_sizeof(len(data), divisor=1024)
    assert f"tiny.gguf: 100%|██████████| {total}/{total} [" in pulled.stderr  # a total, so an ETA too
    assert pulled.stdout.startswith(f"pulled {spec} (int4, ")
    record = read_record(spec)
    assert record.source_sha256 == hashlib.sha256(data).hexdigest()
    assert record.origin["files"] == {"tiny.gguf": record.source_sha256}
    assert record.origin["commit"] == hub.repos["tiny-org/tiny-gguf"].commit
    assert not partial.exists()
    folder = resolve(spec, pull=False).folder
    assert _reply(folder) == _reply(resolve(gguf, progress=False).folder)  # the same model as the local file
    listed = clika_command("list").stdout.splitlines()
    assert any(line.split()[:2] == [spec, "int4"] for line in listed), listed

    asked = len(hub.requests)
    again = clika_command("pull", spec)
    assert again.returncode == 0 and "already pulled; nothing to do" in again.stdout
    offline = clika_command(
        "generate", spec, "hello", "--max-tokens", "6", "--temperature", "0", HF_HUB_OFFLINE="1"
    )
    assert offline.returncode == 0 and offline.stdout == _reply(folder) + "\n", offline.stderr
    assert len(hub.requests) == asked  # neither asked the Hub

    removed = clika_command("rm", spec)
    assert removed.returncode == 0 and "removed the download of" in removed.stdout
    assert read_record(spec) is None and not folder.exists()
    assert [p for p in _cache_files(tmp_cache) if p.parts[0] in ("hub", "exports", "names")] == []
    assert list((tmp_cache / "hub").iterdir()) == []  # no empty folders left behind either


def test_a_safetensors_folder_is_pulled_resumed_and_matches_the_local_folder(hub, tiny_llama_hf, tmp_cache):
    files = {p.name: p.read_bytes() for p in tiny_llama_hf.iterdir() if p.is_file()}
    weights = files["model.safetensors"]
    extra = {"README.md": b"# tiny\n", "onnx/model.onnx": b"not needed", "pytorch_model.bin": b"not needed"}
    hub.add("tiny-org/tiny-llama", {**files, **extra})
    hub.interrupt(weights, after=len(weights) // 2)
    spec = "hf://tiny-org/tiny-llama"

    failed = _run("pull", spec, "--precision", "int8", "-q")
    half = len(weights) // 2
    assert failed.exit_code == 1
    assert failed.output == (
        f"Error: {spec}: the download of model.safetensors stopped after {half} of {len(weights)} bytes; "
        "run again to resume it\n"
    )
    pulled = _run("pull", spec, "--precision", "int8", "-q")
    assert pulled.exit_code == 0, pulled.output
    assert hub.downloads_of(weights) == [None, f"bytes={half}-"]

    record = read_record(spec)
    (source,) = record.downloads
    snapshot = tmp_cache / source
    assert snapshot.name == "tiny-llama" and sorted(p.name for p in snapshot.iterdir()) == sorted(files)
    assert record.origin["files"] == {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    folder = resolve(spec, "int8", pull=False).folder
    assert _reply(folder) == _reply(resolve(tiny_llama_hf, "int8", progress=False).folder)
    assert json.loads((folder / "manifest.json").read_text())["provenance"]["source"] == "tiny-llama"


def test_a_404_is_a_clear_error_and_leaves_nothing(hub, tiny_gguf, tmp_cache):
    hub.add("tiny-org/tiny-gguf", {"tiny.gguf": tiny_gguf().path.read_bytes()})
    endpoint = hub.url
    for spec, message in (
        (
            "hf://nobody/nothing",
            f"no model repository nobody/nothing on {endpoint} (a private one needs HF_TOKEN)",
        ),
        (
            "hf://tiny-org/tiny-gguf/missing.gguf",
            "tiny-org/tiny-gguf at main has no file missing.gguf (its GGUF files: tiny.gguf)",
        ),
        ("hf://tiny-org/tiny-gguf@v9/tiny.gguf", "tiny-org/tiny-gguf has no revision 'v9'"),
        (
            "hf://tiny-org/tiny-gguf",
            "tiny-org/tiny-gguf has no safetensors folder (config.json and *.safetensors); "
            "name one of its GGUF files: hf://tiny-org/tiny-gguf/tiny.gguf",
        ),
        ("hf://tiny-org/tiny-gguf/README.md", "which is not a .gguf file"),
        ("hf://tiny-org/../x", "is not a valid repository name"),
    ):
        result = _run("pull", spec, "-q")
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        assert result.output.startswith("Error: ") and message in result.output
    assert _cache_files(tmp_cache) == []


def test_a_wrong_sha256_is_refused_and_nothing_is_kept(hub, tiny_gguf, tmp_cache):
    data = tiny_gguf().path.read_bytes()
    hub.add("tiny-org/tiny-gguf", {"tiny.gguf": data})
    hub.lie_about("tiny.gguf")
    result = _run("pull", "hf://tiny-org/tiny-gguf/tiny.gguf", "-q")
    assert result.exit_code == 1
    assert result.output == (
        f"Error: hf://tiny-org/tiny-gguf/tiny.gguf: tiny.gguf: sha256 mismatch: got "
        f"{hashlib.sha256(data).hexdigest()}, expected {'0' * 64}; nothing was cached\n"
    )
    assert _cache_files(tmp_cache) == []


def test_a_private_repository_needs_hf_token_which_stays_with_the_hub(hub, tiny_gguf, monkeypatch):
    hub.add("tiny-org/private", {"tiny.gguf": tiny_gguf().path.read_bytes()}, token="hf_secret")
    spec = "hf://tiny-org/private/tiny.gguf"
    refused = _run("pull", spec, "-q")
    assert refused.exit_code == 1 and "no model repository tiny-org/private" in refused.output
    assert "needs HF_TOKEN" in refused.output

    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert _run("pull", spec, "-q").exit_code == 0
    sent = {r.path.split("/")[1]: r.headers.get("Authorization") for r in hub.requests}
    assert sent["api"] == sent["tiny-org"] == "Bearer hf_secret"
    assert sent["cdn"] is None  # the download URL is another host's: no token sent there


def test_offline_mode_without_a_download_says_so(hub, monkeypatch, tmp_cache):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = _run("pull", "hf://tiny-org/tiny-gguf/tiny.gguf", "-q")
    assert result.output == (
        "Error: hf://tiny-org/tiny-gguf/tiny.gguf was never downloaded and the Hub is offline "
        "(HF_HUB_OFFLINE is set)\n"
    )
    assert hub.requests == []


def test_load_takes_an_hf_spec(hub, tiny_gguf):
    gguf = tiny_gguf().path
    hub.add("tiny-org/tiny-gguf", {"tiny.gguf": gguf.read_bytes()})
    model = modelverse.load("hf://tiny-org/tiny-gguf/tiny.gguf", threads=1)
    assert model.generate("hello", max_new_tokens=6, temperature=0.0) == _reply(resolve(gguf).folder)


def test_offline_another_precision_is_exported_from_the_download(hub, tiny_llama_hf, monkeypatch):
    hub.add("tiny-org/tiny-llama", {p.name: p.read_bytes() for p in tiny_llama_hf.iterdir() if p.is_file()})
    spec = "hf://tiny-org/tiny-llama"
    assert _run("pull", spec, "--precision", "fp32", "-q").exit_code == 0
    asked = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = _run("pull", spec, "--precision", "int8", "-q")
    assert result.exit_code == 0 and result.output.startswith(f"pulled {spec} (int8, "), result.output
    assert len(hub.requests) == asked
    assert _reply(resolve(spec, "int8", pull=False).folder) == _reply(resolve(tiny_llama_hf, "int8").folder)


def test_an_export_made_on_another_compute_path_runs_where_nothing_may_be_pulled(
    tiny_gguf, tmp_cache, monkeypatch
):
    """Pulled with the kernel library, run with CLIKA_KERNELS=off (or the other way): the held
    export runs rather than "not pulled yet"; a pull still makes this path's own export."""
    import clika_export.api as export_api
    from clika_export.api import cached_export, source_sha256
    from clika_export.pull.pulled_export import export_folder, held_export
    from clika_runtime.kernels.library import KernelStatus

    gguf = tiny_gguf("tiny.gguf").path
    other_path = KernelStatus(True, None, "scalar", "forced", "scalar fp32", "scalar int8")
    with monkeypatch.context() as patch:
        patch.setattr(export_api, "kernel_status", lambda: other_path)
        made = cached_export(gguf, "int4", progress=False)
    sha = source_sha256(gguf)
    assert export_folder(sha, "int4") != made  # this process's path keys another folder
    assert held_export(sha, "int4", pull=False) == made
    assert held_export(sha, "int4", pull=True) is None
