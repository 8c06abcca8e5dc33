"""Embeddings on the server: OpenAI's ``/v1/embeddings``, Ollama's ``/api/embed`` and ``/api/embeddings``.

The vectors come from the served model's own session beside its engine
(``GenerativeModel.embedder``), computed on a worker thread, at most
``MAX_EMBEDDING_CALLS`` requests at once (each holds its batch's scratch KV)
and counted among the server's admissions (503 beyond). A model folder
exported before embeddings answers 501 naming the fix.
"""

from __future__ import annotations

import base64
import threading
import time
from typing import Any

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clika_runtime.embedding.embedder import (
    EmbeddingCancelled,
    EmbeddingError,
    Embeddings,
    EmbeddingUnavailable,
)
from clika_runtime.server.backend import ModelBackend
from clika_runtime.server.embeddings.protocol import (
    EmbeddingRequest,
    parse_ollama_embed,
    parse_ollama_embeddings,
    parse_openai_embeddings,
)
from clika_runtime.server.endpoints import endpoint, routes_of
from clika_runtime.server.errors import ApiError, bad_request
from clika_runtime.server.served import Served
from clika_runtime.server.streaming import SHUTDOWN_MESSAGE

MAX_EMBEDDING_CALLS = 2


def embeddings_routes(served: Served) -> list[Route]:
    return routes_of(_Embeddings(served))


class _Embeddings:
    def __init__(self, served: Served) -> None:
        self.served = served
        self._calls = threading.BoundedSemaphore(MAX_EMBEDDING_CALLS)

    @endpoint("/v1/embeddings", "POST")
    async def openai(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        parsed = await self.served.prepare(parse_openai_embeddings, await self.served.intake.json(request))
        async with self.served.model(parsed.model) as backend:
            done = await run_in_threadpool(self._embed, backend, parsed)
            model_id = backend.model_id
        data = [
            {"object": "embedding", "index": index, "embedding": _encoded(vector, parsed.encoding_format)}
            for index, vector in enumerate(done.vectors)
        ]
        usage = {"prompt_tokens": done.prompt_tokens, "total_tokens": done.prompt_tokens}
        return JSONResponse({"object": "list", "data": data, "model": model_id, "usage": usage})

    @endpoint("/api/embed", "POST")
    async def ollama_embed(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        began = time.perf_counter_ns()
        parsed = await self.served.prepare(parse_ollama_embed, await self.served.intake.json(request))
        async with self.served.model(parsed.model) as backend:
            done = await run_in_threadpool(self._embed, backend, parsed) if parsed.inputs else None
        return JSONResponse(
            {
                "model": parsed.model,
                "embeddings": done.vectors.tolist() if done is not None else [],
                "total_duration": time.perf_counter_ns() - began,
                "load_duration": 0,
                "prompt_eval_count": done.prompt_tokens if done is not None else 0,
            }
        )

    @endpoint("/api/embeddings", "POST")
    async def ollama_embeddings(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        parsed = await self.served.prepare(parse_ollama_embeddings, await self.served.intake.json(request))
        async with self.served.model(parsed.model) as backend:
            done = await run_in_threadpool(self._embed, backend, parsed) if parsed.inputs else None
        return JSONResponse({"embedding": done.vectors[0].tolist() if done is not None else []})

    def _embed(self, backend: ModelBackend, parsed: EmbeddingRequest) -> Embeddings:
        """The vectors of ``parsed`` (on a worker thread): 400 naming the input, 501 unavailable."""
        try:
            embedder = backend.model.embedder
        except EmbeddingUnavailable as exc:
            raise ApiError(501, str(exc), code="embeddings_unavailable") from None
        if not parsed.truncate:
            for item in parsed.inputs:
                if isinstance(item, str):  # too long by its bytes alone: refused before tokenizing
                    backend.prompt_bound.check(item, "input")
        with backend.admitted(), self._calls:
            try:
                done = embedder.embed(
                    parsed.inputs,
                    dimensions=parsed.dimensions,
                    truncate=parsed.truncate,
                    should_stop=lambda: self.served.closing.closing,  # a long input stops between calls
                )
            except EmbeddingCancelled:
                raise ApiError(503, SHUTDOWN_MESSAGE, code="server_shutting_down") from None
            except EmbeddingError as exc:
                raise bad_request(str(exc), exc.field, exc.code) from None
        self.served.metrics.record_embeddings(done.prompt_tokens)
        return done


def _encoded(vector: np.ndarray, encoding_format: str) -> Any:
    """A vector as OpenAI sends it: a list of floats, or base64 of its little-endian float32 bytes."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()
