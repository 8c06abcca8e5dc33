"""llama.cpp's tokenizer test vectors: ``ggml-vocab-*.gguf`` with ``.inp`` / ``.out`` files.

They ship inside the llama-cpp-python sdist (``vendor/llama.cpp/models/``). The
sdist is fetched once from the package index by pinned name and sha256 (the
index's simple page, ``$PIP_INDEX_URL`` when set), kept in the project's cache
under its sha256, and the vocabulary files are unpacked next to it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from clika_export.pull.fetch import cache_root

SDIST_PROJECT = "llama-cpp-python"
SDIST_NAME = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MODELS_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
# The vocabularies that come with test cases (the folder also holds a few without).
VOCABULARIES = (
    "bert-bge",
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gemma-4",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
)
_SEPARATOR = "\n__ggml_vocab_test__\n"
_CHUNK = 1 << 20
_DONE = ".complete"


@dataclass(frozen=True)
class VocabCase:
    text: str
    ids: list[int]


def vocab_file(name: str) -> Path:
    """The ``ggml-vocab-<name>.gguf`` file, fetching and unpacking the sdist on first use."""
    return _vectors_dir() / f"ggml-vocab-{name}.gguf"


def vocab_cases(name: str) -> list[VocabCase]:
    """The cases as llama.cpp's test reads them: inputs split on the separator, one id line per input."""
    path = vocab_file(name)
    raw = Path(f"{path}.inp").read_text(encoding="utf-8")
    texts = raw.split(_SEPARATOR)
    if texts and texts[-1] == "":  # the file ends with a separator
        texts.pop()
    lines = Path(f"{path}.out").read_text(encoding="utf-8").splitlines()
    assert len(texts) == len(lines), f"{path.name}: {len(texts)} inputs but {len(lines)} outputs"
    return [VocabCase(text, [int(t) for t in line.split()]) for text, line in zip(texts, lines, strict=True)]


def _vectors_dir() -> Path:
    cache = cache_root()
    target = cache / "trees" / "sha256" / f"{SDIST_SHA256}-vocab"
    if (target / _DONE).is_file():
        return target
    sdist = cache / "blobs" / "sha256" / SDIST_SHA256
    scratch = cache / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vocab-", dir=scratch))
    try:
        if not sdist.is_file():
            _download_sdist(sdist, work)
        staged = work / "vocab"
        _unpack_vocabularies(sdist, staged)
        (staged / _DONE).write_text(SDIST_NAME, encoding="utf-8")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # left incomplete by an earlier run
            shutil.rmtree(target)
        os.replace(staged, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _download_sdist(sdist: Path, work: Path) -> None:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/") + f"/{SDIST_PROJECT}/"
    with urllib.request.urlopen(index, timeout=60) as response:
        page = response.read().decode("utf-8")
    links = [
        href for href in re.findall(r'href="([^"]+)"', page) if href.split("#")[0].endswith("/" + SDIST_NAME)
    ]
    assert links, f"{index} lists no {SDIST_NAME}"
    partial = work / "sdist"
    digest = hashlib.sha256()
    with urllib.request.urlopen(urljoin(index, links[0].split("#")[0]), timeout=60) as response:
        with open(partial, "wb") as out:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    assert digest.hexdigest() == SDIST_SHA256, (
        f"{SDIST_NAME}: sha256 {digest.hexdigest()}, expected {SDIST_SHA256}"
    )
    sdist.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, sdist)


def _unpack_vocabularies(sdist: Path, staged: Path) -> None:
    staged.mkdir(parents=True)
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive:
            name = member.name
            if not (member.isfile() and name.startswith(MODELS_DIR + "ggml-vocab-")):
                continue
            base = name[len(MODELS_DIR) :]
            if "/" in base:
                continue
            with archive.extractfile(member) as source, open(staged / base, "wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)
