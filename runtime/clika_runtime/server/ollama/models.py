"""Ollama's model routes over the model router and the store: ``/api/tags``, ``/api/ps``, ``/api/show``,
``/api/pull`` (progress streamed as NDJSON), ``/api/delete`` and ``/api/copy``.

``/api/tags`` lists every model the server can serve, ``/api/ps`` the ones in
memory with their size (weights plus KV budget) and when they unload. Pull,
delete and copy go through :mod:`clika_runtime.store` (pulling needs the
export extra); a deleted model is unloaded first.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from clika_runtime.server.endpoints import endpoint, routes_of
from clika_runtime.server.errors import ApiError, bad_request
from clika_runtime.server.model_entries import ModelEntry, tagged
from clika_runtime.server.ollama.protocol import model_name
from clika_runtime.server.ollama.shapes import MEDIA_TYPE, created_at, ndjson
from clika_runtime.server.served import Served
from clika_runtime.store import ModelError

NEVER = "2318-01-01T00:00:00Z"  # Ollama's expires_at for a model kept until the server stops


def ollama_model_routes(served: Served) -> list[Route]:
    return routes_of(_Models(served))


class _Models:
    def __init__(self, served: Served) -> None:
        self.served = served
        self.router = served.router

    @endpoint("/api/tags", "GET")
    async def tags(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        entries = await run_in_threadpool(self.router.entries)
        return JSONResponse({"models": [await run_in_threadpool(_listed, entry) for entry in entries]})

    @endpoint("/api/ps", "GET")
    async def ps(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        models = []
        for model in await run_in_threadpool(self.router.loaded):
            expires = model.expires_at()
            models.append(
                {
                    **await run_in_threadpool(_listed, model.entry),
                    "size": model.footprint or model.entry.size,
                    "size_vram": 0,
                    "expires_at": NEVER if expires is None else _moment(expires),
                    "context_length": model.backend.model.max_seq,
                }
            )
        return JSONResponse({"models": models})

    @endpoint("/api/show", "POST")
    async def show(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        body = await self._object(request)
        requested = body.get("model") or body.get("name") or model_name(body)
        async with self.served.model(requested, None) as backend:
            card = await self.served.card(backend)
            entry = await run_in_threadpool(self.router.entry, requested)
        template = backend.model.chat_template
        capabilities = ["completion"] + (["tools"] if card["supports_tools"] else [])
        if card["reasoning_mode"] != "never":
            capabilities.append("thinking")
        manifest = _manifest(entry)
        architecture = manifest.get("architecture", {})
        family = architecture.get("family", "model")
        return JSONResponse(
            {
                "modelfile": f"FROM {tagged(entry.name)}\n",
                "parameters": "",
                "template": template.source if template is not None else "",
                "details": _details(manifest),
                "model_info": {
                    "general.architecture": architecture.get("family", ""),
                    f"{family}.context_length": backend.model.max_seq,
                    f"{family}.block_count": architecture.get("num_layers"),
                    f"{family}.embedding_length": architecture.get("hidden_size"),
                },
                "capabilities": capabilities,
                "modified_at": created_at(entry.modified),
            }
        )

    @endpoint("/api/delete", "DELETE", "POST")
    async def delete(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        body = await self._object(request)
        requested = body.get("model") or body.get("name") or model_name(body)
        entry = await run_in_threadpool(self.router.entry, requested)
        if entry.pinned:
            raise ApiError(
                400, f"{entry.name} is the model this server was started with; it cannot be deleted"
            )
        await run_in_threadpool(self.router.forget, entry.name)
        name, _, precision = entry.name.partition(":")
        try:
            await run_in_threadpool(_remove, name, precision or None, entry)
        except ModelError as exc:
            raise ApiError(404, str(exc), code="model_not_found") from None
        return JSONResponse({})

    @endpoint("/api/copy", "POST")
    async def copy(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        body = await self._object(request)
        source, destination = body.get("source"), body.get("destination")
        if not isinstance(source, str) or not source or not isinstance(destination, str) or not destination:
            raise bad_request("'source' and 'destination' must both name a model", "source")
        entry = await run_in_threadpool(self.router.entry, source)
        from clika_runtime.store.copy import copy_name

        try:
            await run_in_threadpool(
                copy_name, entry.name.partition(":")[0], destination.removesuffix(":latest")
            )
        except ModelError as exc:
            raise bad_request(str(exc), "destination") from None
        return JSONResponse({})

    @endpoint("/api/pull", "POST")
    async def pull(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        body = await self._object(request)
        requested = body.get("model") or body.get("name") or model_name(body)
        spec = requested.removesuffix(":latest")
        name, _, tag = spec.partition(":")
        precision = tag if tag in ("int4", "int8", "fp32") else None
        if tag and precision is None:
            name = spec  # a tag that is no precision is part of the name (hf://owner/repo:file)
        progress = _PullProgress(name, precision)
        if body.get("stream", True) is False:
            await run_in_threadpool(progress.run)
            if progress.error is not None:
                raise ApiError(400, progress.error, code="pull_failed")
            return JSONResponse({"status": "success"})
        threading.Thread(target=progress.run, name="clika-pull", daemon=True).start()
        return StreamingResponse(progress.lines(), media_type=MEDIA_TYPE)

    async def _object(self, request: Request) -> dict[str, Any]:
        body = await self.served.intake.json(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        return body


class _PullProgress:
    """A pull through the store on its own thread, its status lines handed to the event loop as they come."""

    def __init__(self, name: str, precision: str | None) -> None:
        self.name = name
        self.precision = precision
        self.error: str | None = None
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def _put(self, line: dict[str, Any] | None) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, line)

    def run(self) -> None:
        from clika_runtime.store import resolve
        from clika_runtime.store.export_extra import require_puller

        try:
            self._put({"status": f"pulling {self.name}"})
            require_puller(f"pulling {self.name}")
            local = resolve(
                self.name,
                self.precision,
                pull=True,
                say=lambda text: self._put({"status": text}),
                progress=False,
            )
            digest = "sha256:" + hashlib.sha256((local.folder / "manifest.json").read_bytes()).hexdigest()
            size = local.size
            self._put(
                {
                    "status": f"pulled {local.name} ({local.precision})",
                    "digest": digest,
                    "total": size,
                    "completed": size,
                }
            )
            self._put({"status": "success"})
        except ModelError as exc:
            self.error = str(exc)
            self._put({"error": self.error})
        except Exception as exc:  # noqa: BLE001 - a pull's fault ends its stream with the reason
            self.error = f"the pull failed: {exc}"
            self._put({"error": self.error})
        finally:
            self._put(None)

    async def lines(self) -> AsyncIterator[bytes]:
        while (line := await self._queue.get()) is not None:
            yield ndjson(line)


def _remove(name: str, precision: str | None, entry: ModelEntry) -> None:
    from clika_runtime.store import remove

    remove(name, precision)


def _listed(entry: ModelEntry) -> dict[str, Any]:
    """A model as ``/api/tags`` lists it."""
    name = tagged(entry.name)
    return {
        "name": name,
        "model": name,
        "modified_at": created_at(entry.modified),
        "size": entry.size,
        "digest": _digest(entry),
        "details": _details(_manifest(entry)),
    }


def _manifest(entry: ModelEntry) -> dict[str, Any]:
    try:
        manifest = json.loads((entry.folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def _digest(entry: ModelEntry) -> str:
    try:
        return hashlib.sha256((entry.folder / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        return hashlib.sha256(entry.name.encode()).hexdigest()


def _details(manifest: dict[str, Any]) -> dict[str, Any]:
    family = str(manifest.get("architecture", {}).get("family", ""))
    precision = manifest.get("precision", {})
    weights = precision.get("weights", "") if isinstance(precision, dict) else ""
    return {
        "parent_model": "",
        "format": "onnx",
        "family": family,
        "families": [family] if family else None,
        "parameter_size": "",
        "quantization_level": str(weights).upper(),
    }


def _moment(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
