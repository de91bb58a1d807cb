"""Prometheus metrics of what the service did, exposed with ``prometheus_client``.

Counters: requests by endpoint and status, generator errors by endpoint and kind, searches by
batch size, and the seconds the search worker spent answering batches (its busy share of a period
tells whether the encoder or the web layer limits the search rate). Histograms: request latency by endpoint. Endpoints are route templates
(``/v1/images/{did}``), never raw paths, so a scan of random URLs cannot grow the label set.
"""

from __future__ import annotations

import os
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
disable_created_metrics()  # the ``_created`` series would double /metrics and nothing reads them


class Metrics:
    """The service's counters and histograms, in a registry of its own (tests build many apps in one process)."""

    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        self.requests = Counter("unirag_requests", "HTTP requests answered, by endpoint, method and status.",
                                ("endpoint", "method", "status"), registry=reg)
        self.latency = Histogram("unirag_request_latency_seconds", "Time to answer a request, by endpoint.",
                                 ("endpoint",), buckets=LATENCY_BUCKETS, registry=reg)
        self.generator_errors = Counter("unirag_generator_errors",
                                        "Generator calls that failed after retries, by kind.",
                                        ("endpoint", "kind"), registry=reg)
        self.batches = Histogram("unirag_search_batch_size", "Searches answered by one encoder/FAISS call.",
                                 buckets=BATCH_BUCKETS, registry=reg)
        self.search_seconds = Counter("unirag_search_busy_seconds",
                                      "Time the search worker spent answering batches.", registry=reg)

    def observe_batch(self, size: int, seconds: float = 0.0) -> None:
        self.batches.observe(size)
        self.search_seconds.inc(seconds)

    def text(self) -> bytes:
        """The /metrics text: this process's metrics, or, under ``unirag serve --workers N``
        (``PROMETHEUS_MULTIPROC_DIR`` set), the sums over every worker process."""
        from prometheus_client import generate_latest

        if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)
        return generate_latest(merged)


class ObserveRequests:
    """ASGI middleware: every request's status and latency for /metrics. Plain ASGI rather than
    ``@app.middleware("http")``, whose per-request task and stream pair cost more than the rest of a
    search's HTTP handling."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500  # unless a response starts: an exception the error middleware turns into 500

        async def observed_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            route = scope.get("route")  # the router records the matched route in the scope
            endpoint = getattr(route, "path", None) or ("static" if scope["path"].startswith("/static/")
                                                        else "unmatched")
            self.metrics.requests.labels(endpoint, scope["method"], status).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)
