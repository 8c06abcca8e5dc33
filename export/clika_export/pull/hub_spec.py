"""``hf://OWNER/REPO[@REVISION][/PATH.gguf]``: a model on the Hugging Face Hub, named as a user types it.

Without a path the spec names the repository's safetensors folder (its
top-level ``config.json``, weights and tokenizer files); with one, a single
GGUF file in it. Specs are untrusted input: each part is checked before it
reaches a URL or a file name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clika_runtime.store.local_model import ModelError
from clika_runtime.store.resolve import HUB_SCHEME

DEFAULT_REVISION = "main"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
_PATH_PART = re.compile(r"[^/\\\x00]{1,255}")


@dataclass(frozen=True)
class HubSpec:
    repo_id: str  # OWNER/REPO
    revision: str
    file: str | None  # a .gguf path inside the repository, or None: the safetensors folder

    @property
    def text(self) -> str:
        """The spec in one canonical spelling (the name it is recorded under)."""
        revision = "" if self.revision == DEFAULT_REVISION else f"@{self.revision}"
        file = f"/{self.file}" if self.file else ""
        return f"{HUB_SCHEME}{self.repo_id}{revision}{file}"


def parse_hub_spec(spec: str) -> HubSpec:
    """The parts of an ``hf://`` spec; ModelError naming what is wrong with a malformed one."""
    usage = f"expected {HUB_SCHEME}OWNER/REPO (a safetensors folder) or {HUB_SCHEME}OWNER/REPO/FILE.gguf"
    if not spec.startswith(HUB_SCHEME):
        raise ModelError(f"{spec!r} is not an {HUB_SCHEME} spec; {usage}")
    parts = spec[len(HUB_SCHEME) :].strip("/").split("/")
    if len(parts) < 2:
        raise ModelError(f"{spec!r} names no repository; {usage}")
    owner, repo_part, path = parts[0], parts[1], parts[2:]
    repo, _, revision = repo_part.partition("@")
    for label, value in (("owner", owner), ("repository", repo)):
        if not _NAME.fullmatch(value) or ".." in value:
            raise ModelError(f"{spec!r}: {value!r} is not a valid {label} name; {usage}")
    revision = revision or DEFAULT_REVISION
    if not _REVISION.fullmatch(revision) or ".." in revision:
        raise ModelError(f"{spec!r}: {revision!r} is not a valid revision")
    if not path:
        return HubSpec(f"{owner}/{repo}", revision, None)
    if any(part in (".", "..") or not _PATH_PART.fullmatch(part) for part in path):
        raise ModelError(f"{spec!r}: {'/'.join(path)!r} is not a valid file path in a repository")
    file = "/".join(path)
    if not file.lower().endswith(".gguf"):
        raise ModelError(
            f"{spec!r} names the file {file!r}, which is not a .gguf file; "
            f"name the repository alone ({HUB_SCHEME}{owner}/{repo}) for its safetensors folder"
        )
    return HubSpec(f"{owner}/{repo}", revision, file)
