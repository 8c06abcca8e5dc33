"""The package index pip is configured for, read without pip: its config files and environment.

Read as pip reads them: the global files (``$XDG_CONFIG_DIRS/pip/pip.conf``,
``/etc/pip.conf``), the user's (``~/.pip/pip.conf``, ``~/.config/pip/pip.conf``;
skipped when ``PIP_CONFIG_FILE`` names an existing file), the environment's
(``<sys.prefix>/pip.conf``), then ``PIP_CONFIG_FILE``; a later file overrides an
earlier one, a ``[download]`` section its file's ``[global]``, and the
``PIP_*`` environment variables override every file.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_INDEX = "https://pypi.org/simple"
DEFAULT_TIMEOUT = 60.0
_SECTIONS = ("global", "download")
_KEYS = ("index-url", "extra-index-url", "no-index", "cert", "timeout", "default-timeout")


class PipConfigError(ValueError):
    """A pip configuration that cannot be used to fetch (the message names the setting)."""


@dataclass(frozen=True)
class IndexConfig:
    """Where and how to look packages up."""

    index_urls: tuple[str, ...]  # the index first, then the extra indexes, in order
    cert: str | None  # a CA bundle for HTTPS (pip's ``cert``)
    timeout: float  # seconds without data before a request fails


def read_index_config(environ: Mapping[str, str] | None = None) -> IndexConfig:
    """The index settings in force for ``pip download`` in this environment."""
    environ = os.environ if environ is None else environ
    settings: dict[str, str] = {}
    for path in config_files(environ):
        settings.update(_read_file(path))
    for key in _KEYS:
        value = environ.get("PIP_" + key.upper().replace("-", "_"))
        if value is not None:
            settings[key] = value
    if _truthy(settings.get("no-index", "")):
        raise PipConfigError("pip is configured with no-index; the catalog is fetched from a package index")
    urls = [settings.get("index-url") or DEFAULT_INDEX, *settings.get("extra-index-url", "").split()]
    timeout = settings.get("timeout") or settings.get("default-timeout") or str(DEFAULT_TIMEOUT)
    try:
        seconds = float(timeout)
    except ValueError:
        raise PipConfigError(f"pip's timeout setting {timeout!r} is not a number of seconds") from None
    return IndexConfig(tuple(u.rstrip("/") for u in urls if u), settings.get("cert") or None, seconds)


def config_files(environ: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, lowest precedence first (missing ones included; they read as empty)."""
    xdg_dirs = environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs.split(os.pathsep) if d]
    files.append(Path("/etc/pip.conf"))
    named = environ.get("PIP_CONFIG_FILE")
    if not (named and Path(named).exists()):
        home = Path(environ.get("HOME") or Path.home())
        config_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        files += [home / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    files.append(Path(sys.prefix) / "pip.conf")
    if named and named != os.devnull:
        files.append(Path(named))
    return files


def _read_file(path: Path) -> dict[str, str]:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError) as exc:
        raise PipConfigError(f"cannot read pip's configuration file {path}: {exc}") from None
    values: dict[str, str] = {}
    for section in _SECTIONS:
        if parser.has_section(section):
            values.update({key.replace("_", "-"): value for key, value in parser.items(section)})
    return {key: value.strip() for key, value in values.items() if key in _KEYS}


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")
