"""A Ray Serve request router that sends a conversation back to the replica holding its prefix.

Each request carries a routing key (``clika_runtime.cluster.prefix_key``). The key's
owner among the running replicas is chosen by rendezvous hashing (the replica whose
hash with the key is highest), so it stays put while the replica set stays the same, and
when a replica leaves or joins only the keys it owned move. The owner is asked first;
when its queue is at ``overload_queue`` or more, or it refuses, the request goes to the
fewer-queued of two random replicas, Ray Serve's default (power of two choices). A request
without a key goes there straight away. A request pinned to one replica (its own /health
or /metrics) goes to that replica only.

Hits and misses are counted per router (``stats()``): a hit is a keyed request sent to
its owner.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    RequestRouter,
    RunningReplica,
)

from clika_runtime.cluster.forwarded import ForwardedRequest

DEFAULT_OVERLOAD_QUEUE = 4


def replica_name(replica: RunningReplica) -> str:
    return replica.replica_id.unique_id


def owner_of(key: str, replicas: list[RunningReplica]) -> RunningReplica:
    """The replica that owns ``key`` (rendezvous hashing over the replicas' ids)."""
    by_name = {replica_name(r): r for r in replicas}
    return by_name[owner_name(key, list(by_name))]


def owner_name(key: str, names: list[str]) -> str:
    """Of the replicas named ``names``, the one owning ``key``: the highest hash of (key, name)."""
    return max(names, key=lambda name: hashlib.blake2b(f"{key}\0{name}".encode(), digest_size=8).digest())


def forwarded_of(pending: PendingRequest | None) -> ForwardedRequest | None:
    if pending is None:
        return None
    for value in (*pending.args, *pending.kwargs.values()):
        if isinstance(value, ForwardedRequest):
            return value
    return None


class PrefixAwareRouter(FIFOMixin, RequestRouter):
    """Owner first (by the request's prefix key or session id), else power of two choices."""

    def initialize_state(self, overload_queue: int = DEFAULT_OVERLOAD_QUEUE, **_: Any) -> None:
        self.overload_queue = overload_queue
        self.hits = 0
        self.misses = 0
        # Imported here, not at the top: Ray unpickles this class by value, and its copy of this
        # module's globals is not the module the front reads.
        from clika_runtime.cluster.router_registry import ROUTERS

        ROUTERS.append(self)

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True  # one pass per attempt: no busy loop
        if not candidate_replicas:
            return []
        forwarded = forwarded_of(pending_request)
        if forwarded is not None and forwarded.pinned is not None:
            return [[r for r in candidate_replicas if replica_name(r) == forwarded.pinned]]
        fallback = [self._two_choices(candidate_replicas)]
        if forwarded is None or forwarded.route_key is None:
            return fallback
        owner = owner_of(forwarded.route_key, candidate_replicas)
        queued = self.replica_queue_len_cache.get(owner.replica_id)
        if queued is not None and queued >= self.overload_queue:
            self.misses += 1
            return fallback
        self.hits += 1
        return [[owner], *fallback]

    def stats(self) -> dict[str, int]:
        return {"owner_hits": self.hits, "owner_misses": self.misses}

    def replica_names(self) -> list[str]:
        return sorted(replica_name(r) for r in self.curr_replicas.values())

    @staticmethod
    def _two_choices(replicas: list[RunningReplica]) -> list[RunningReplica]:
        return random.sample(replicas, min(2, len(replicas)))
