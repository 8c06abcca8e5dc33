"""serve() and start_server() share one options value; keywords override its fields."""

from __future__ import annotations

import pytest

from clika_runtime.server import ServeOptions, serve, start_server
from clika_runtime.server.serve_options import BACKGROUND, resolve_options


def test_keywords_override_the_given_options_or_the_defaults():
    given = ServeOptions(api_key="k", max_active=2)
    assert resolve_options(given, {"port": 9}, ServeOptions()) == ServeOptions(
        api_key="k", max_active=2, port=9
    )
    background = resolve_options(None, {"web": False}, BACKGROUND)
    assert (background.port, background.access_log, background.log_level, background.web) == (
        0,
        False,
        "warning",
        False,
    )
    assert resolve_options(None, {}, ServeOptions()).port == 8000


@pytest.mark.parametrize("entry", [serve, start_server])
def test_an_unknown_option_is_refused_by_name_before_any_model_loads(entry, tmp_path):
    with pytest.raises(
        TypeError, match=r"unknown server option\(s\) max_actve; the options are .*max_active"
    ):
        entry(tmp_path / "no-such-folder", max_actve=4)
