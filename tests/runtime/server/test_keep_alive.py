"""Ollama's keep_alive durations as the server reads them."""

from __future__ import annotations

import math

import pytest

from clika_runtime.server.keep_alive import parse_keep_alive


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("5m", 300.0), ("1h30m", 5400.0), ("90s", 90.0), ("250ms", 0.25), ("10", 10.0), (0, 0.0), (2.5, 2.5)],
)
def test_durations_and_seconds(given, seconds):
    assert parse_keep_alive(given) == seconds


@pytest.mark.parametrize("given", [-1, "-1", "-5m", -0.5])
def test_negative_keeps_it_loaded(given):
    assert parse_keep_alive(given) == math.inf


@pytest.mark.parametrize("given", ["", "5 minutes", "m5", True, [5], "nan", float("nan")])
def test_what_is_no_duration_is_named(given):
    with pytest.raises(ValueError, match="keep_alive"):
        parse_keep_alive(given)
