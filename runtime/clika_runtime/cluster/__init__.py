"""``clika serve`` as a Ray Serve application: engine replicas behind a prefix-aware router.

::

    from clika_runtime.cluster import deployment
    from ray import serve

    serve.run(deployment("path/to/model-folder", replicas=2, threads=2), route_prefix="/")

    # or from a shell, with Ray's own tools (arguments as key=value):
    #   serve run clika_runtime.cluster:app_builder model=path/to/model-folder replicas=2

Two deployments: ``Front`` (Ray Serve's HTTP ingress; reads each request, keys it by its
session or conversation prefix, and forwards it) and ``EngineReplica`` (one engine each,
the single server's ASGI app over it; ``num_cpus`` declared to Ray). The engine
deployment's requests are routed by :class:`~clika_runtime.cluster.router.PrefixAwareRouter`
(or Ray's default power-of-two-choices router, ``router="default"``). Ray is imported only
here, in the ``cluster`` extra: the runtime and ``clika serve`` without ``--replicas`` never
import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["app_builder", "deployment", "require_cluster_stack"]

FRONT_MAX_ONGOING = 1024  # the front only forwards; the engines' own limits answer 503 when full


def require_cluster_stack() -> None:
    """Fail before loading anything when the ``cluster`` extra is missing."""
    try:
        import ray.serve.request_router  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"replicas need Ray Serve with its request router API: pip install 'clika-runtime[cluster]' ({exc})"
        ) from None


def deployment(
    model: str | Path,
    *,
    replicas: int = 2,
    threads: int | None = None,
    num_cpus: float | None = None,
    model_id: str | None = None,
    max_active: int = 8,
    max_queued: int = 64,
    default_max_tokens: int = 1024,
    api_key: str | None = None,
    router: str = "prefix",
    overload_queue: int | None = None,
    autoscaling: dict[str, Any] | None = None,
    kv_store: str | Path | None = None,
    kv_cache_mode: str | None = None,
) -> Any:
    """The Ray Serve application serving the model folder ``model`` from ``replicas`` engines.

    ``threads``: ONNX Runtime threads per replica; ``num_cpus``: the CPUs each replica
    declares to Ray (default: ``threads``, else 1). ``router``: "prefix" (the same
    conversation or session goes to the same replica; ``overload_queue``: the owner's queue
    length from which requests go to the fewer-queued of two instead) or "default" (Ray
    Serve's power of two choices). ``autoscaling``: an ``autoscaling_config`` (see
    :func:`~clika_runtime.cluster.autoscaling.cpu_autoscaling`) instead of a fixed count.
    ``kv_store``: a folder every replica can reach where conversations' KV is kept, so a
    conversation continues on another replica without reading its history again.
    """
    require_cluster_stack()
    from ray import serve

    from clika_runtime.cluster.front import Front
    from clika_runtime.cluster.replica import EngineReplica, ReplicaSpec
    from clika_runtime.cluster.router import DEFAULT_OVERLOAD_QUEUE, PrefixAwareRouter

    folder = Path(model).resolve()
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    if router not in ("prefix", "default"):
        raise ValueError(f"router must be 'prefix' or 'default', got {router!r}")
    name = model_id or folder.name
    spec = ReplicaSpec(
        model=str(folder),
        model_id=name,
        threads=threads,
        max_active=max_active,
        max_queued=max_queued,
        default_max_tokens=default_max_tokens,
        api_key=api_key,
        kv_store=str(Path(kv_store).resolve()) if kv_store else None,
        kv_cache_mode=kv_cache_mode,
    )
    options: dict[str, Any] = {
        "name": "EngineReplica",
        "ray_actor_options": {"num_cpus": num_cpus if num_cpus is not None else (threads or 1)},
        "max_ongoing_requests": max_active + max_queued,
        "health_check_period_s": 2.0,
    }
    if autoscaling is not None:
        options["autoscaling_config"] = autoscaling
    else:
        options["num_replicas"] = replicas
    if router == "prefix":
        options["request_router_config"] = {
            # By name, so the router is imported (not unpickled) where the handle routes, and the
            # front finds it in clika_runtime.cluster.router's registry.
            "request_router_class": f"{PrefixAwareRouter.__module__}.{PrefixAwareRouter.__name__}",
            "request_router_kwargs": {"overload_queue": overload_queue or DEFAULT_OVERLOAD_QUEUE},
        }
    engines = serve.deployment(EngineReplica, **options).bind(spec)
    front = serve.deployment(
        Front, name="Front", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=FRONT_MAX_ONGOING
    )
    return front.bind(engines, str(folder), name)


def app_builder(args: dict[str, str]) -> Any:
    """``serve run clika_runtime.cluster:app_builder model=FOLDER [replicas=N threads=T ...]``."""
    known = {
        "model",
        "replicas",
        "threads",
        "num_cpus",
        "model_id",
        "max_active",
        "max_queued",
        "router",
        "kv_store",
    }
    unknown = sorted(set(args) - known)
    if unknown or "model" not in args:
        raise ValueError(
            f"app_builder takes model=FOLDER and {sorted(known - {'model'})}; got {sorted(args)}"
        )
    numbers = {"replicas": int, "threads": int, "num_cpus": float, "max_active": int, "max_queued": int}
    options = {key: numbers[key](value) if key in numbers else value for key, value in args.items()}
    return deployment(options.pop("model"), **options)
