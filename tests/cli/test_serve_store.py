"""``clika serve``'s store mode: its sizes and durations read as a person writes them, refused by name."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from clika_cli.main import clika
from clika_cli.serve_store import parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [("8GB", 8 * 10**9), ("512MiB", 512 * 2**20), ("1000000", 10**6), ("1.5g", 15 * 10**8), ("2 KiB", 2048)],
)
def test_sizes(text, size):
    assert parse_size(text) == size


def test_a_size_that_is_none_is_named():
    with pytest.raises(click.BadParameter, match="'lots' is no size"):
        parse_size("lots")


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("--memory-budget", "lots", "'lots' is no size"),
        ("--keep-alive", "soon", "keep_alive 'soon' is not a duration"),
    ],
)
def test_serve_refuses_a_bad_limit_before_it_listens(tmp_cache, option, value, named):
    result = CliRunner().invoke(clika, ["serve", option, value, "--port", "0"])
    assert result.exit_code == 2 and named in result.output
