"""Running the application: on a Ray cluster given by address, or on one started here on loopback.

Without an address, Ray starts in this process's care on 127.0.0.1 with no dashboard and
only the CPUs asked for, and stops with it; with one, the application joins that cluster
and is deleted from it on exit (the cluster keeps running).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

APP_NAME = "clika"
READY_TIMEOUT_S = 600.0


@contextlib.contextmanager
def ray_cluster(address: str | None, *, num_cpus: float | None = None) -> Iterator[None]:
    """Ray connected for the block: ``address``'s cluster, else a local one on 127.0.0.1."""
    import ray

    if address is None:
        ray.init(
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            num_cpus=num_cpus,
            log_to_driver=False,
            configure_logging=False,
        )
    else:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def serving(app: Any, *, host: str = "127.0.0.1", port: int = 8000) -> Iterator[Any]:
    """``app`` running on Ray Serve's proxy at ``host:port`` for the block; its handle."""
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    handle = serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    try:
        yield handle
    finally:
        serve.delete(APP_NAME)
        serve.shutdown()


def wait_forever() -> None:
    while True:
        time.sleep(3600)
