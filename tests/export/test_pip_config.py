"""The index pip is configured for, read from real configuration files and variables the test writes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from clika_export.pull.pip_config import DEFAULT_INDEX, PipConfigError, config_files, read_index_config


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment whose user and global configuration folders are the test's own (empty)."""
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "etc-xdg")}


def test_without_an_index_configured_pypi_is_asked(home):
    # /etc/pip.conf is read as pip reads it; this machine's sets a CA bundle only.
    config = read_index_config({**home, "PIP_CONFIG_FILE": os.devnull})
    assert config.index_urls == (DEFAULT_INDEX,) and config.timeout == 60.0


def test_files_override_in_pips_order_and_download_overrides_global(home, tmp_path):
    _write(
        tmp_path / "etc-xdg" / "pip" / "pip.conf", "[global]\nindex-url = http://global/simple\ntimeout = 5\n"
    )
    user = _write(
        tmp_path / "home" / ".config" / "pip" / "pip.conf",
        "[global]\nindex-url = http://user/simple/\nextra-index-url = http://a/simple\n  http://b/simple\n"
        "[download]\nextra-index-url = file:///srv/simple\ncert = /ca.pem\n",
    )
    config = read_index_config(home)
    assert user in config_files(home)
    assert config.index_urls == ("http://user/simple", "file:///srv/simple")
    assert config.cert == "/ca.pem" and config.timeout == 5.0


def test_a_named_config_file_replaces_the_users_and_variables_override_every_file(home, tmp_path):
    _write(tmp_path / "home" / ".config" / "pip" / "pip.conf", "[global]\nindex-url = http://user/simple\n")
    named = _write(tmp_path / "named.conf", "[global]\nextra-index-url = http://named/simple\n")
    environ = {**home, "PIP_CONFIG_FILE": str(named)}
    assert read_index_config(environ).index_urls == (DEFAULT_INDEX, "http://named/simple")
    environ |= {
        "PIP_INDEX_URL": "http://env/simple",
        "PIP_EXTRA_INDEX_URL": "http://x/simple http://y/simple",
    }
    assert read_index_config(environ).index_urls == (
        "http://env/simple",
        "http://x/simple",
        "http://y/simple",
    )


def test_the_environments_own_pip_conf_is_read():
    assert Path(sys.prefix) / "pip.conf" in config_files({"PIP_CONFIG_FILE": os.devnull})


def test_no_index_and_a_bad_timeout_are_refused_by_name(home, tmp_path):
    with pytest.raises(PipConfigError, match="no-index"):
        read_index_config({**home, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"})
    with pytest.raises(PipConfigError, match="timeout setting 'soon'"):
        read_index_config({**home, "PIP_CONFIG_FILE": os.devnull, "PIP_DEFAULT_TIMEOUT": "soon"})
    broken = _write(tmp_path / "broken.conf", "index-url = no section\n")
    with pytest.raises(PipConfigError, match="cannot read pip's configuration file"):
        read_index_config({**home, "PIP_CONFIG_FILE": str(broken)})


def test_this_machines_pip_configuration_reads(monkeypatch):
    """Whatever pip is configured with here reads without error and yields at least one index."""
    config = read_index_config()
    assert config.index_urls and all("://" in url for url in config.index_urls)
