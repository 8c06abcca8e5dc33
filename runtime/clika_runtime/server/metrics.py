"""A Prometheus ``/metrics``: requests, tokens in and out, queue length, KV use and step time.

Counters are the server's own (requests by route and status, tokens of every
finished reply); gauges are read from the engine at scrape time, the way
``/health`` reads its load, so scraping never stops a step. One gauge,
``clika_kv_integrity``, asks the engine's thread to check its bookkeeping
(requests, slots, KV blocks and their refcounts) between two steps: the scrape
waits for that, which is why the app renders metrics off the event loop. Each app has its
own registry: two servers in one process keep separate counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from clika_runtime.engine.report import GenerationReport
from clika_runtime.server.backend import ModelBackend

Backends = Callable[[], list[ModelBackend]]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
log = logging.getLogger("clika_runtime.server")
INTEGRITY_TIMEOUT = 10.0  # seconds a scrape waits for the engine to finish its step


class Metrics:
    def __init__(self, backends: Backends) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "clika_http_requests",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "clika_http_request_seconds", "Time to answer a request (a stream: until it ends)", ["route"],
            registry=self.registry,
        )  # fmt: skip
        self.prompt_tokens = Counter(
            "clika_prompt_tokens", "Prompt tokens of finished replies", registry=self.registry
        )
        self.cached_tokens = Counter(
            "clika_cached_prompt_tokens", "Prompt tokens whose KV was reused", registry=self.registry
        )
        self.completion_tokens = Counter(
            "clika_completion_tokens", "Tokens generated in finished replies", registry=self.registry
        )
        self.replies = Counter(
            "clika_replies", "Replies finished, by finish reason", ["reason"], registry=self.registry
        )
        self.embedded_tokens = Counter(
            "clika_embedded_tokens", "Input tokens of embeddings computed", registry=self.registry
        )
        self.cancelled = Counter(
            "clika_requests_cancelled",
            "Requests stopped before they finished (the client left or pressed Stop)",
            registry=self.registry,
        )
        self.registry.register(_EngineCollector(backends))

    def record_reply(self, report: GenerationReport) -> None:
        self.prompt_tokens.inc(report.prompt_tokens)
        self.cached_tokens.inc(report.cached_tokens)
        self.completion_tokens.inc(report.completion_tokens)
        self.replies.labels(report.finish_reason).inc()

    def record_cancelled(self) -> None:
        self.cancelled.inc()

    def record_embeddings(self, tokens: int) -> None:
        self.embedded_tokens.inc(tokens)

    def record_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    """Gauges read from the engine when scraped: requests running and waiting, KV use, steps and their time."""

    def __init__(self, backends: Backends) -> None:
        self.backends = backends

    def describe(self) -> list[Any]:
        return []  # registering must not run collect(): it would wait on the engine's thread

    def collect(self) -> Iterator[Any]:
        """Summed over the loaded models (each has its own engine)."""
        backends = self.backends()
        # The integrity check runs on each engine's thread between steps: once it returns, every
        # step that finished before this scrape has published its load, so what follows is read
        # after them (a reply the client already has is counted), whatever the threads' timing.
        readings = [_integrity(backend.engine) for backend in backends]
        loads = [backend.load() for backend in backends]
        yield _gauge("clika_requests_running", "Requests decoding now", sum(load["active"] for load in loads))
        yield _gauge(
            "clika_requests_waiting", "Requests queued for a slot", sum(load["waiting"] for load in loads)
        )
        yield _gauge("clika_models_loaded", "Models in memory, each with its engine", len(backends))
        engines = [backend.engine for backend in backends]
        snapshots = [engine.load for engine in engines]

        def total(key: str) -> int:
            return sum(snapshot.kv.get(key, 0) for snapshot in snapshots)

        yield _gauge("clika_kv_cache_bytes", "Bytes of KV buffers allocated", total("kv_cache_bytes"))
        if any("blocks" in snapshot.kv for snapshot in snapshots):  # the paged cache
            yield _gauge("clika_kv_blocks", "KV blocks in the pools", total("blocks"))
            yield _gauge("clika_kv_blocks_used", "KV blocks held by running requests", total("blocks_owned"))
            yield _gauge("clika_kv_blocks_cached", "KV blocks kept for prefix reuse", total("blocks_cached"))
        yield _gauge("clika_kv_slots", "KV slots (rows a step may address)", total("slots"))
        used = sum(snapshot.kv_slots_used for snapshot in snapshots)
        yield _gauge("clika_kv_slots_used", "KV slots held by requests", used)
        yield _counter("clika_engine_steps", "Engine steps run", sum(s.steps for s in snapshots))
        yield _counter(
            "clika_engine_step_tokens",
            "Tokens computed by engine steps",
            sum(s.step_tokens for s in snapshots),
        )
        yield _counter(
            "clika_engine_step_seconds",
            "Seconds spent in engine steps",
            sum(s.step_seconds for s in snapshots),
        )
        yield _counter(
            "clika_engine_model_seconds",
            "Seconds spent in ONNX Runtime",
            sum(s.model_seconds for s in snapshots),
        )
        known = [reading for reading in readings if reading is not None]
        if known:
            yield _gauge(
                "clika_kv_integrity", "1 while requests, slots and KV blocks agree, else 0", min(known)
            )


def _integrity(engine: Any) -> float | None:
    """1.0 when the engine's bookkeeping holds, 0.0 when it drifted, None when the engine cannot answer."""
    if engine.closed:
        return None
    try:
        engine.check_integrity(timeout=INTEGRITY_TIMEOUT)
    except AssertionError as exc:
        log.error("KV bookkeeping drifted: %s", exc)
        return 0.0
    except FutureTimeout:  # a step longer than the timeout: no reading this scrape
        return None
    return 1.0


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)
