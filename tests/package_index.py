"""A PEP 503 / PEP 691 simple index on 127.0.0.1 serving the wheels in one folder.

``/simple/<project>/`` answers JSON (PEP 691) when asked for it, HTML (PEP 503,
``#sha256=`` fragments) otherwise; ``/files/<wheel>`` serves the wheel with
byte ranges. The index reads the folder on every request, so a wheel deleted
by a test is gone from it.
"""

from __future__ import annotations

import hashlib
import json
import re
from email.message import Message
from pathlib import Path

from http_files import FileServer, Served

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def _project(filename: str) -> str:
    return re.sub(r"[-_.]+", "-", filename.split("-")[0]).lower()


class PackageIndex(FileServer):
    def __init__(self, folder: Path, *, html_only: bool = False) -> None:
        self.folder = folder
        self.html_only = html_only
        super().__init__(self._serve)

    @property
    def index_url(self) -> str:
        return f"{self.url}/simple"

    def _serve(self, path: str, headers: Message) -> Served:
        parts = [p for p in path.split("/") if p]
        if len(parts) == 2 and parts[0] == "files" and (self.folder / parts[1]).is_file():
            return Served(body=(self.folder / parts[1]).read_bytes(), ranged=True, cut_key=parts[1])
        if len(parts) == 2 and parts[0] == "simple":
            wheels = [w for w in sorted(self.folder.glob("*.whl")) if _project(w.name) == parts[1]]
            if wheels:
                return self._page(wheels, headers.get("Accept", ""))
        return Served(status=404, body=b"not found", headers={"Content-Type": "text/plain"})

    def _page(self, wheels: list[Path], accept: str) -> Served:
        files = [
            {
                "filename": wheel.name,
                "url": f"../../files/{wheel.name}",
                "hashes": {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()},
                "size": wheel.stat().st_size,
            }
            for wheel in wheels
        ]
        if JSON_TYPE in accept and not self.html_only:
            body = json.dumps(
                {"meta": {"api-version": "1.1"}, "name": _project(wheels[0].name), "files": files}
            )
            return Served(body=body.encode(), headers={"Content-Type": JSON_TYPE})
        anchors = "".join(
            f'<a href="{f["url"]}#sha256={f["hashes"]["sha256"]}">{f["filename"]}</a>\n' for f in files
        )
        html = f"<!DOCTYPE html><html><body>\n{anchors}</body></html>"
        return Served(body=html.encode(), headers={"Content-Type": "text/html"})
