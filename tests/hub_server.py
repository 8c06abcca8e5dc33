"""The Hugging Face Hub's file API on 127.0.0.1, as ``huggingface_hub`` calls it (through ``HF_ENDPOINT``).

- ``GET /api/models/{repo}/revision/{rev}``: the commit (``sha``) and ``siblings``;
- ``HEAD|GET /{repo}/resolve/{rev}/{file}``: a small file answers itself (``ETag`` its git
  blob sha1); an LFS file (``.gguf``, ``.safetensors``) answers 302 to ``/cdn/<sha256>`` on
  another host name (``localhost``), with ``X-Linked-Etag`` (its sha256) and ``X-Linked-Size``,
  as the Hub redirects to its CDN; both carry ``X-Repo-Commit``;
- ``GET /cdn/<sha256>``: the bytes, with byte ranges;
- errors as the Hub sends them: 404/401 with ``X-Error-Code`` (RepoNotFound, RevisionNotFound,
  EntryNotFound); a private repository wants ``Authorization: Bearer <token>``.

``lie_about(path)`` makes the listed sha256 of one LFS file wrong; ``interrupt(data, after=n)``
cuts the next download of those bytes after ``n`` bytes and drops the connection
(deterministic: no timing involved).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from email.message import Message

from http_files import FileServer, Served

LFS_SUFFIXES = (".gguf", ".safetensors")


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = field(default_factory=lambda: os.urandom(20).hex())
    token: str | None = None  # private: this bearer token is required


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def _error(status: int, code: str, message: str, commit: str | None = None) -> Served:
    headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
    if commit:
        headers["X-Repo-Commit"] = commit
    return Served(status=status, body=json.dumps({"error": message}).encode(), headers=headers)


class HubServer(FileServer):
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self._lies: set[str] = set()
        super().__init__(self._serve)

    @property
    def cdn(self) -> str:
        return self.url.replace("127.0.0.1", "localhost")

    def add(self, repo_id: str, files: dict[str, bytes], *, token: str | None = None) -> Repo:
        self.repos[repo_id] = Repo(dict(files), token=token)
        return self.repos[repo_id]

    def lie_about(self, path: str) -> None:
        self._lies.add(path)

    def interrupt(self, data: bytes, *, after: int) -> None:
        self.cut_after(hashlib.sha256(data).hexdigest(), after)

    def downloads_of(self, data: bytes) -> list[str | None]:
        """The ``Range`` header of every request for these LFS bytes (None: from the start)."""
        cdn = f"/cdn/{hashlib.sha256(data).hexdigest()}"
        return [r.headers.get("Range") for r in self.requests if r.path == cdn and r.method == "GET"]

    def _serve(self, path: str, headers: Message) -> Served:
        parts = path.split("?")[0].strip("/").split("/")
        if parts[0] == "cdn" and len(parts) == 2:
            return self._cdn(parts[1])
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            return self._info("/".join(parts[2:4]), "/".join(parts[5:]), headers)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), headers)
        return Served(status=404, body=b"not found")

    def _repo(self, repo_id: str, revision: str, headers: Message) -> Repo | Served:
        repo = self.repos.get(repo_id)
        authorized = repo is not None and (
            repo.token is None or headers.get("Authorization") == f"Bearer {repo.token}"
        )
        if repo is None or not authorized:
            return _error(401 if repo is not None else 404, "RepoNotFound", "Repository not found")
        if revision not in ("main", repo.commit):
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return repo

    def _info(self, repo_id: str, revision: str, headers: Message) -> Served:
        repo = self._repo(repo_id, revision, headers)
        if isinstance(repo, Served):
            return repo
        body = {
            "_id": repo.commit[:24],
            "id": repo_id,
            "modelId": repo_id,
            "sha": repo.commit,
            "private": repo.token is not None,
            "siblings": [{"rfilename": name} for name in sorted(repo.files)],
        }
        return Served(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})

    def _resolve(self, repo_id: str, revision: str, file: str, headers: Message) -> Served:
        repo = self._repo(repo_id, revision, headers)
        if isinstance(repo, Served):
            return repo
        if file not in repo.files:
            return _error(404, "EntryNotFound", f"{file} does not exist on {revision}", repo.commit)
        data = repo.files[file]
        common = {"X-Repo-Commit": repo.commit}
        if not file.endswith(LFS_SUFFIXES):
            return Served(body=data, headers={**common, "ETag": f'"{_git_sha1(data)}"'}, ranged=True)
        sha256 = hashlib.sha256(data).hexdigest()
        listed = ("0" * 64) if file in self._lies else sha256
        return Served(
            status=302,
            headers={
                **common,
                "Location": f"{self.cdn}/cdn/{sha256}",
                "ETag": f'"{_git_sha1(data)}"',
                "X-Linked-Etag": f'"{listed}"',
                "X-Linked-Size": str(len(data)),
            },
        )

    def _cdn(self, sha256: str) -> Served:
        for repo in self.repos.values():
            for data in repo.files.values():
                if hashlib.sha256(data).hexdigest() == sha256:
                    return Served(body=data, ranged=True, cut_key=sha256)
        return Served(status=404, body=b"no such blob")
