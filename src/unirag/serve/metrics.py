"""Prometheus text exposition of what the service did, written by hand (no client library needed).

Counters: requests by endpoint and status, generator errors by endpoint and kind, searches by
batch size, and the seconds the search worker spent answering batches (its busy share of a period
tells whether the encoder or the web layer limits the search rate). Histograms: request latency by endpoint. Endpoints are route templates
(``/v1/images/{did}``), never raw paths, so a scan of random URLs cannot grow the label set.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, edge in enumerate(self.buckets):
            if value <= edge:
                self.counts[i] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        sep, braces = ("," if labels else ""), (f"{{{labels}}}" if labels else "")
        out = [f'{name}_bucket{{{labels}{sep}le="{int(edge) if float(edge).is_integer() else edge!r}"}} {n}'
               for edge, n in zip(self.buckets, self.counts, strict=True)]
        return out + [f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.total}', f"{name}_sum{braces} {self.sum:.6f}",
                      f"{name}_count{braces} {self.total}"]


class Metrics:
    """Thread-safe counters and histograms; :meth:`render` gives the ``/metrics`` body."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.latency: dict[str, _Histogram] = {}
        self.generator_errors: dict[tuple[str, str], int] = defaultdict(int)
        self.batches = _Histogram(BATCH_BUCKETS)
        self.search_seconds = 0.0

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(endpoint, method, status)] += 1
            self.latency.setdefault(endpoint, _Histogram(LATENCY_BUCKETS)).observe(seconds)

    def generator_error(self, endpoint: str, kind: str) -> None:
        with self._lock:
            self.generator_errors[(endpoint, kind)] += 1

    def observe_batch(self, size: int, seconds: float = 0.0) -> None:
        with self._lock:
            self.batches.observe(size)
            self.search_seconds += seconds

    def render(self) -> str:
        with self._lock:
            out = ["# HELP unirag_requests_total HTTP requests answered, by endpoint, method and status.",
                   "# TYPE unirag_requests_total counter"]
            for (endpoint, method, status), n in sorted(self.requests.items()):
                out.append(f'unirag_requests_total{{endpoint="{_esc(endpoint)}",method="{method}",'
                           f'status="{status}"}} {n}')
            out += ["# HELP unirag_request_latency_seconds Time to answer a request, by endpoint.",
                    "# TYPE unirag_request_latency_seconds histogram"]
            for endpoint, hist in sorted(self.latency.items()):
                out += hist.lines("unirag_request_latency_seconds", f'endpoint="{_esc(endpoint)}"')
            out += ["# HELP unirag_generator_errors_total Generator calls that failed after retries, by kind.",
                    "# TYPE unirag_generator_errors_total counter"]
            for (endpoint, kind), n in sorted(self.generator_errors.items()):
                out.append(f'unirag_generator_errors_total{{endpoint="{_esc(endpoint)}",kind="{_esc(kind)}"}} {n}')
            out += ["# HELP unirag_search_batch_size Searches answered by one encoder/FAISS call.",
                    "# TYPE unirag_search_batch_size histogram"]
            out += self.batches.lines("unirag_search_batch_size", "")
            out += ["# HELP unirag_search_busy_seconds_total Time the search worker spent answering batches.",
                    "# TYPE unirag_search_busy_seconds_total counter",
                    f"unirag_search_busy_seconds_total {self.search_seconds:.6f}"]
            return "\n".join(out) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


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
            self.metrics.observe_request(endpoint, scope["method"], status, time.perf_counter() - start)
