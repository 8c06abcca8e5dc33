"""One engine replica: the ``clika serve`` app over its own engine, inside a Ray Serve replica.

The replica builds the backend and the ASGI app with the server's own factories, so its
routes, limits and error shapes are the single server's. Requests arrive as
:class:`~clika_runtime.cluster.forwarded.ForwardedRequest` from the front deployment and
their response messages stream back; every response names the replica that wrote it
(``x-clika-replica``), which is how clients and tests see where a request ran.

With a ``kv_store`` folder shared by the replicas, the KV of every conversation a replica
answers is saved there under the conversation's routing key, and a replica that gets a
conversation it has not seen restores it from there before answering
(``clika_runtime.cluster.kv_store``): a conversation whose replica died continues on
another without reading its history again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ray import serve

from clika_runtime.cluster.forwarded import ForwardedRequest, run_asgi

REPLICA_HEADER = b"x-clika-replica"
log = logging.getLogger("clika_runtime.cluster")


@dataclass(frozen=True)
class ReplicaSpec:
    """What every replica loads: the model folder, its id, threads and the server's limits."""

    model: str
    model_id: str
    threads: int | None = None
    max_active: int = 8
    max_queued: int = 64
    default_max_tokens: int = 1024
    api_key: str | None = None
    kv_store: str | None = None
    kv_cache_mode: str | None = None


class EngineReplica:
    def __init__(self, spec: ReplicaSpec) -> None:
        from clika_runtime import modelverse
        from clika_runtime.server import build_backend
        from clika_runtime.server.app import create_app

        model = modelverse.load(spec.model, threads=spec.threads, kv_cache_mode=spec.kv_cache_mode)
        self.backend = build_backend(
            model,
            model_id=spec.model_id,
            max_active=spec.max_active,
            max_queued=spec.max_queued,
            default_max_tokens=spec.default_max_tokens,
        )
        self.app = create_app(self.backend, api_key=spec.api_key)
        self.name = serve.get_replica_context().replica_id.unique_id
        self.store = None
        if spec.kv_store:
            from clika_runtime.cluster.kv_store import SharedKVStore

            self.store = SharedKVStore(spec.kv_store, model)

    async def forward(self, request: ForwardedRequest) -> AsyncIterator[dict[str, Any]]:
        """The app's response messages to ``request``, the first naming this replica."""
        conversation = None
        if self.store is not None:
            conversation = await self.store.before(request)
        ok = False
        async for message in run_asgi(self.app, request):
            if message["type"] == "http.response.start":
                ok = message.get("status", 500) < 400
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (REPLICA_HEADER, self.name.encode())],
                }
            yield message
        if ok and conversation is not None:
            await self.store.after(conversation)

    def identity(self, pinned: ForwardedRequest | None = None) -> str:
        return self.name

    def load(self, pinned: ForwardedRequest | None = None) -> dict[str, Any]:
        """The engine's requests decoding and waiting now, and this replica's id (``pinned``: the
        router's address of the replica asked)."""
        return {"replica": self.name, "pid": os.getpid(), **self.backend.load()}

    def __del__(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.model.close()
