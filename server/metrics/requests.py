"""Request instruments: REST/console HTTP requests, Kafka requests, open connections.

=============================================  =========  =================================
metric                                         type       labels
=============================================  =========  =================================
``cairn_http_requests_total``                  counter    ``handler``, ``method``, ``code``
``cairn_http_request_duration_seconds``        histogram  ``handler``, ``method``
``cairn_kafka_request_duration_seconds``       histogram  ``api``
``cairn_kafka_connections``                    gauge      (none)
``cairn_websocket_connections``                gauge      (none)
=============================================  =========  =================================

Label values come from closed sets, so the number of series stays bounded whatever clients
send: ``handler`` is the URL pattern's name (``api:topic-messages``, ``webui:overview``;
``unmatched`` when no pattern matched, so a scan of random paths adds one series, not one
per path), ``method`` one of the HTTP methods Django serves (else ``other``), ``code`` the
status code, ``api`` the Kafka API's name (``Produce``, ``Fetch`` ...; ``ApiKey<n>`` for
none the listener knows). A Kafka request's count is its histogram's ``_count``.

Why not ``prometheus_client``'s own ``Counter`` and ``Histogram`` here: an observation of
theirs takes a lock per value it touches (the sum, the bucket, a counter), behind a few
layers of calls: ~4 us a histogram observation and ~1.6 us a counter increment on this
project's 2-core machine, ~6 us on every REST request and every Kafka request. :class:`Timings`
keeps the same figures in a list per label set per thread, updated without a lock, and
turns them into the client library's metric families when scraped (``bench/metrics.py``
measures both). The exposition, parsing and process collectors stay the library's.

Imports nothing from Django (see :mod:`server.metrics.registry`).
"""

from __future__ import annotations

import bisect
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kafka_listener.schemas import SCHEMAS
from server.metrics.registry import LATENCY_BUCKETS_S, REGISTRY

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class _Shard:
    """One thread's rows (written by that thread only)."""

    __slots__ = ("rows", "counts")

    def __init__(self) -> None:
        self.rows: dict[tuple[str, ...], list[float]] = {}
        self.counts: dict[tuple[Any, ...], int] = {}

    def add(self, other: _Shard) -> None:
        for labels, row in list(other.rows.items()):
            mine = self.rows.setdefault(labels, [0] * len(row))
            for i, value in enumerate(list(row)):
                mine[i] += value
        for labels, count in list(other.counts.items()):
            self.counts[labels] = self.counts.get(labels, 0) + count


class Timings:
    """Request counts and latency buckets per label set. Thread-safe.

    A row per histogram label set holds one count per bucket of :data:`LATENCY_BUCKETS_S`
    (not cumulative), one for ``+Inf``, then the sum of the seconds; ``counts`` counts
    requests per label set of the counter (the histogram's labels and the status code).

    Each thread writes rows of its own (a shard, found through a ``threading.local``), so
    an observation takes no lock: on this project's machine (a Firecracker VM) an
    uncontended ``threading.Lock`` costs ~1.3 us, more than everything else an observation
    does. A scrape sums the shards: copying a row is one C call under the GIL, so it sees
    whole increments (at worst a bucket counted and its seconds not yet added to the sum).
    The shard of a thread that ended is folded into ``_retired`` at the next scrape, so
    counts never go down and the shards stay as many as the live threads.
    """

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds = bounds
        self._local = threading.local()
        self._lock = threading.Lock()  # the shard list; never taken by an observation
        self._shards: list[tuple[threading.Thread, _Shard]] = []
        self._retired = _Shard()

    def _new_shard(self) -> _Shard:
        shard = self._local.shard = _Shard()
        with self._lock:
            self._shards.append((threading.current_thread(), shard))
        return shard

    def observe(
        self, labels: tuple[str, ...], seconds: float, counted: tuple[Any, ...] | None = None
    ) -> None:
        """One request of ``labels`` that took ``seconds``; also counted under ``counted``
        (label values, made strings when scraped)."""
        shard: _Shard = getattr(self._local, "shard", None) or self._new_shard()
        row = shard.rows.get(labels)
        if row is None:
            row = shard.rows[labels] = [0] * (len(self.bounds) + 2)
        row[bisect.bisect_left(self.bounds, seconds)] += 1  # le: the first bound >= seconds
        row[-1] += seconds
        if counted is not None:
            shard.counts[counted] = shard.counts.get(counted, 0) + 1

    def totals(self) -> _Shard:
        """Every thread's figures summed (a new shard)."""
        total = _Shard()
        with self._lock:
            live = []
            for thread, shard in self._shards:
                if thread.is_alive():
                    live.append((thread, shard))
                else:  # it writes no more: fold it in for good
                    self._retired.add(shard)
            self._shards = live
            total.add(self._retired)
            for _, shard in live:
                total.add(shard)
        return total

    def histogram(self, name: str, doc: str, label_names: tuple[str, ...]) -> Metric:
        family = HistogramMetricFamily(name, doc, labels=label_names)
        for labels, row in sorted(self.totals().rows.items()):
            buckets, total = [], 0.0
            for bound, count in zip((*self.bounds, float("inf")), row, strict=False):
                total += count
                buckets.append((floatToGoString(bound), total))
            family.add_metric(labels, buckets, row[-1])
        return family

    def counter(self, name: str, doc: str, label_names: tuple[str, ...]) -> Metric:
        family = CounterMetricFamily(name, doc, labels=label_names)
        counts = self.totals().counts
        for labels, count in sorted(counts.items(), key=lambda item: str(item[0])):
            family.add_metric([str(value) for value in labels], count)
        return family


HTTP = Timings()
KAFKA = Timings()
_kafka_names: dict[int, tuple[str]] = {}


def observe_http(handler: str, method: str, code: int, seconds: float) -> None:
    """Count one answered HTTP request and its duration."""
    if method not in HTTP_METHODS:
        method = "other"
    HTTP.observe((handler, method), seconds, (handler, method, code))


def observe_kafka(api_key: int, seconds: float) -> None:
    """A Kafka listener's ``observe_request`` (``kafka_listener.server``)."""
    name = _kafka_names.get(api_key)
    if name is None:
        schema = SCHEMAS.get(api_key)
        name = _kafka_names[api_key] = (schema.name if schema is not None else f"ApiKey{api_key}",)
    KAFKA.observe(name, seconds)


class HttpMetricsMiddleware:
    """Django middleware timing every request it sees (put first: it times the others)."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        handler = (match.view_name or "unnamed") if match is not None else "unmatched"
        observe_http(
            handler, request.method or "", response.status_code, time.perf_counter() - started
        )
        return response


_websockets = 0
_websockets_lock = threading.Lock()


def _count_websocket(change: int) -> None:
    global _websockets
    with _websockets_lock:
        _websockets += change


class _Requests(Collector):
    """The tables above, and the connections: Kafka's read from the watched listener at
    scrape time (absent when no listener runs, ``CAIRN_KAFKA_PORT=0``)."""

    def __init__(self) -> None:
        self.listener: weakref.ref[Any] | None = None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield HTTP.counter(
            "cairn_http_requests",
            "HTTP requests answered (REST API, console, /healthz, /metrics), by URL pattern "
            "name, method and status code.",
            ("handler", "method", "code"),
        )
        yield HTTP.histogram(
            "cairn_http_request_duration_seconds",
            "Time from the request entering Django's middleware to its response leaving it.",
            ("handler", "method"),
        )
        yield KAFKA.histogram(
            "cairn_kafka_request_duration_seconds",
            "Kafka requests answered by the listener's handlers, by API: time from dispatch "
            "to the answer being queued (a Produce: until its records are readable).",
            ("api",),
        )
        yield GaugeMetricFamily(
            "cairn_websocket_connections",
            "Open console WebSocket connections (live trace).",
            value=_websockets,
        )
        listener = self.listener() if self.listener is not None else None
        if listener is not None:
            yield GaugeMetricFamily(
                "cairn_kafka_connections",
                "Open Kafka client connections.",
                value=listener.connection_count,
            )


_requests = _Requests()
REGISTRY.register(_requests)


def watch_kafka(listener: Any) -> None:
    """Instrument a :class:`kafka_listener.server.KafkaListener`: its requests are timed
    and its connections counted (the last one watched, held weakly)."""
    listener.observe_request = observe_kafka
    _requests.listener = weakref.ref(listener)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class CountWebsockets:
    """ASGI wrapper counting WebSocket connections from their accept until the application
    returns (the client or the consumer closed it), for ``cairn_websocket_connections``."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        accepted = False

        async def counting_send(message: MutableMapping[str, Any]) -> None:
            nonlocal accepted
            if message["type"] == "websocket.accept" and not accepted:
                accepted = True
                _count_websocket(1)
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            if accepted:
                _count_websocket(-1)
