"""``clika serve MODEL --replicas N``: the server as a Ray Serve application of N engine replicas.

Ray is imported only on this path; ``clika serve`` without ``--replicas`` never reaches it.
"""

from __future__ import annotations

from typing import Any

import click

from clika_cli.common import EngineChoice, say


def serve_replicas(
    folder: str,
    *,
    replicas: int,
    ray_address: str | None,
    host: str,
    port: int,
    engine: EngineChoice,
    kv_store: str | None,
    **server: Any,
) -> None:
    """Deploy ``folder`` on ``replicas`` engines and serve until Ctrl-C, then take it all down."""
    try:
        from clika_runtime.cluster import deployment, require_cluster_stack

        require_cluster_stack()
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    from clika_runtime.cluster.local_ray import ray_cluster, serving, wait_forever

    threads = engine.threads or 1
    app = deployment(
        folder,
        replicas=replicas,
        threads=threads,
        kv_store=kv_store,
        kv_cache_mode=engine.kv_cache_mode,
        **server,
    )
    where = ray_address or "a local Ray on 127.0.0.1"
    say(f"starting {replicas} replicas ({threads} threads each) on {where}")
    # A local Ray gets the CPUs its replicas declare (and the front's none), no more.
    with ray_cluster(ray_address, num_cpus=None if ray_address else replicas * threads):
        with serving(app, host=host, port=port):
            say(
                f"serving {server['model_id']} at http://{host}:{port}/v1 on {replicas} replicas (Ctrl-C stops)"
            )
            try:
                wait_forever()
            except KeyboardInterrupt:
                say("stopping the replicas")
