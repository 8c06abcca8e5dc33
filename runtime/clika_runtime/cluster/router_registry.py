"""The prefix-aware routers living in this process (the front's handles' routers).

The front asks them for the replica set (to reach each replica's /health and /metrics)
and for their hit counts. A module of its own: the router class reaches Ray pickled by
value, so only a module imported by name is one both sides share.
"""

from __future__ import annotations

from typing import Any

ROUTERS: list[Any] = []


def routers() -> list[Any]:
    return list(ROUTERS)
