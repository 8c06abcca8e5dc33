"""Autoscaling settings for CPU engine replicas (Ray Serve's ``autoscaling_config``).

Ray Serve counts a replica's ongoing requests, and every request of an engine replica
goes through Serve, so that count is the engine's own queue: requests decoding plus
requests waiting (``/health``'s ``active`` + ``waiting``). A CPU engine decodes its
``max_active`` requests together in one batched step; past that, requests wait and only
add latency. So the target is the batch the replica decodes well (default: half of
``max_active``, where a CPU step is still near its single-request latency), the upscale
is quick (a queue is building) and the downscale slow (a replica costs a model load,
seconds to minutes, to bring back).
"""

from __future__ import annotations

from typing import Any


def cpu_autoscaling(
    min_replicas: int,
    max_replicas: int,
    *,
    max_active: int = 8,
    target_ongoing_requests: float | None = None,
) -> dict[str, Any]:
    """An ``autoscaling_config`` for engine replicas of ``max_active`` requests decoding together."""
    if not 0 <= min_replicas <= max_replicas or max_replicas < 1:
        raise ValueError(
            f"autoscaling needs 0 <= min_replicas <= max_replicas and max_replicas >= 1, "
            f"got {min_replicas}..{max_replicas}"
        )
    target = target_ongoing_requests or max(1.0, max_active / 2)
    return {
        "min_replicas": min_replicas,
        "initial_replicas": max(min_replicas, 1),
        "max_replicas": max_replicas,
        "target_ongoing_requests": target,
        "upscale_delay_s": 5.0,
        "downscale_delay_s": 300.0,
        "metrics_interval_s": 2.0,
        "look_back_period_s": 10.0,
    }
