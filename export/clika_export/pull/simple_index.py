"""Finding one pinned wheel on a package index's simple API (PEP 503 HTML, PEP 691 JSON).

The JSON form is asked for first (``Accept`` negotiation); an index that
answers HTML (or a ``file://`` index folder) is read from its anchors, with the
sha256 from each link's ``#sha256=`` fragment. Index pages are untrusted input:
whatever cannot be read as one is an ``IndexError_`` naming the index.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from clika_export.pull.pip_config import IndexConfig
from clika_export.pull.resumable_download import Connection

_JSON = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{_JSON}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_MAX_PAGE = 64 << 20


class PackageIndexError(RuntimeError):
    """An index that could not be asked, or that does not have the wheel (the message says which)."""


@dataclass(frozen=True)
class WheelLink:
    filename: str
    url: str
    sha256: str | None
    size: int | None


def canonical_name(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def find_wheel(config: IndexConfig, package: str, version: str, wheel_sha256: str | None) -> WheelLink:
    """The wheel of ``package==version`` on the first index that has one (the pinned one if pinned)."""
    asked = []
    for index in config.index_urls:
        links = _project_links(index, package, config)
        if links is None:
            asked.append(f"{_shown(index)} (no such project)")
            continue
        wheels = [link for link in links if _is_wheel_of(link.filename, package, version)]
        if wheels:  # the pinned wheel first, then a pure-Python one
            return sorted(wheels, key=lambda w: (_other_pin(w, wheel_sha256), _platform(w), w.filename))[0]
        asked.append(f"{_shown(index)} (no wheel of {version})")
    raise PackageIndexError(f"no wheel of {package}=={version} on the configured indexes: {'; '.join(asked)}")


def connection(config: IndexConfig) -> Connection:
    """How to ask the index pip is configured for: its CA bundle and timeout."""
    return Connection(timeout=config.timeout, cafile=config.cert)


def _project_links(index: str, package: str, config: IndexConfig) -> list[WheelLink] | None:
    page_url = f"{index}/{canonical_name(package)}/"
    if page_url.startswith("file:"):
        folder = Path(urllib.request.url2pathname(urllib.parse.urlparse(page_url).path))
        if not (folder / "index.html").is_file():
            return None
        page_url += "index.html"
    try:
        with connection(config).open(page_url, {"Accept": _ACCEPT}) as response:
            body = response.read(_MAX_PAGE + 1)
            kind = response.headers.get("Content-Type", "") if hasattr(response, "headers") else ""
            base = response.geturl()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise PackageIndexError(
            f"the index {_shown(index)} answered {exc.code} {exc.reason} for {package}"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PackageIndexError(f"cannot reach the index {_shown(index)}: {reason}") from None
    if len(body) > _MAX_PAGE:
        raise PackageIndexError(f"the index page {page_url} is larger than {_MAX_PAGE >> 20} MiB")
    try:
        if kind.split(";")[0].strip() == _JSON:
            return _json_links(json.loads(body), base)
        return _html_links(body.decode("utf-8"), base)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PackageIndexError(f"the index page {page_url} is not a simple index page: {exc}") from None


def _json_links(page: dict, base: str) -> list[WheelLink]:
    links = []
    for entry in page["files"]:
        hashes = entry.get("hashes") or {}
        size = entry.get("size")
        url = urllib.parse.urljoin(base, entry["url"])
        links.append(
            WheelLink(
                str(entry["filename"]), url, hashes.get("sha256"), size if isinstance(size, int) else None
            )
        )
    return links


def _html_links(text: str, base: str) -> list[WheelLink]:
    parser = _Anchors()
    parser.feed(text)
    links = []
    for href, label in parser.anchors:
        url, _, fragment = urllib.parse.urljoin(base, href).partition("#")
        algorithm, _, digest = fragment.partition("=")
        filename = label.strip() or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        links.append(WheelLink(filename, url, digest if algorithm == "sha256" else None, None))
    return links


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.anchors.append((self._href, "".join(self._text)))
            self._href = None


def _other_pin(wheel: WheelLink, pinned: str | None) -> bool:
    return pinned is not None and wheel.sha256 not in (None, pinned)


def _platform(wheel: WheelLink) -> bool:
    return not wheel.filename.endswith("-none-any.whl")


def _is_wheel_of(filename: str, package: str, version: str) -> bool:
    if not filename.endswith(".whl"):
        return False
    parts = filename[: -len(".whl")].split("-")
    return (
        len(parts) in (5, 6) and canonical_name(parts[0]) == canonical_name(package) and parts[1] == version
    )


def _shown(index: str) -> str:
    """An index URL without any credentials in it."""
    parsed = urllib.parse.urlparse(index)
    if parsed.username or parsed.password:
        parsed = parsed._replace(netloc=parsed.hostname + (f":{parsed.port}" if parsed.port else ""))
    return urllib.parse.urlunparse(parsed)
