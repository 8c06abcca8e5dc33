"""A Prometheus ``/metrics``: requests, tokens in and out, queue length, KV use and step time.

Counters are the server's own (requests by route and status, tokens of every
finished reply); gauges are read from the engine at scrape time, the way
``/health`` reads its load, so scraping never stops a step. Each app has its
own registry: two servers in one process keep separate counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from clika_runtime.engine.types import GenerationReport
from clika_runtime.server.backend import ModelBackend

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self, backend: ModelBackend) -> None:
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
        self.registry.register(_EngineCollector(backend))

    def record_reply(self, report: GenerationReport) -> None:
        self.prompt_tokens.inc(report.prompt_tokens)
        self.cached_tokens.inc(report.cached_tokens)
        self.completion_tokens.inc(report.completion_tokens)
        self.replies.labels(report.finish_reason).inc()

    def record_embeddings(self, tokens: int) -> None:
        self.embedded_tokens.inc(tokens)

    def record_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    """Gauges read from the engine when scraped: requests running and waiting, KV use, steps and their time."""

    def __init__(self, backend: ModelBackend) -> None:
        self.backend = backend

    def collect(self) -> Iterator[Any]:
        load = self.backend.load()
        yield _gauge("clika_requests_running", "Requests decoding now", load["active"])
        yield _gauge("clika_requests_waiting", "Requests queued for a slot", load["waiting"])
        engine = self.backend.engine
        usage = engine.cache.usage()
        yield _gauge("clika_kv_cache_bytes", "Bytes of KV buffers allocated", usage["kv_cache_bytes"])
        if "blocks" in usage:  # the paged cache
            yield _gauge("clika_kv_blocks", "KV blocks in the pools", usage["blocks"])
            yield _gauge("clika_kv_blocks_used", "KV blocks held by running requests", usage["blocks_owned"])
            yield _gauge("clika_kv_blocks_cached", "KV blocks kept for prefix reuse", usage["blocks_cached"])
        yield _gauge("clika_kv_slots", "KV slots (rows a step may address)", usage["slots"])
        yield _gauge(
            "clika_kv_slots_used", "KV slots held by requests", usage["slots"] - engine.cache.num_free
        )
        stats = engine.stats
        yield _counter("clika_engine_steps", "Engine steps run", stats.steps)
        yield _counter("clika_engine_step_tokens", "Tokens computed by engine steps", stats.tokens)
        yield _counter(
            "clika_engine_step_seconds", "Seconds spent in engine steps", stats.model_s + stats.host_s
        )
        yield _counter("clika_engine_model_seconds", "Seconds spent in ONNX Runtime", stats.model_s)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)
