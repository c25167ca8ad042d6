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

Each request pays two clock reads and one observation. The labelled children are looked up
once per label set and kept in a dict (``labels()`` takes the metric's lock and checks its
arguments on every call): a dict hit per request instead.

Imports nothing from Django (see :mod:`cairn.metrics.registry`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cairn.metrics.registry import LATENCY_BUCKETS_S, REGISTRY
from kafka_listener.schemas import SCHEMAS

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

HTTP_REQUESTS = Counter(
    "cairn_http_requests",
    "HTTP requests answered (REST API, console, /healthz, /metrics), by URL pattern name, "
    "method and status code.",
    ("handler", "method", "code"),
    registry=REGISTRY,
)
HTTP_DURATION = Histogram(
    "cairn_http_request_duration_seconds",
    "Time from the request entering Django's middleware to its response leaving it.",
    ("handler", "method"),
    buckets=LATENCY_BUCKETS_S,
    registry=REGISTRY,
)
KAFKA_DURATION = Histogram(
    "cairn_kafka_request_duration_seconds",
    "Kafka requests answered by the listener's handlers, by API: time from dispatch to the "
    "answer being queued (a Produce: until its records are readable).",
    ("api",),
    buckets=LATENCY_BUCKETS_S,
    registry=REGISTRY,
)
WEBSOCKETS = Gauge(
    "cairn_websocket_connections",
    "Open console WebSocket connections (live trace).",
    registry=REGISTRY,
)

_http_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
_kafka_children: dict[int, Any] = {}


def observe_http(handler: str, method: str, code: int, seconds: float) -> None:
    """Count one answered HTTP request and its duration."""
    key = (handler, method if method in HTTP_METHODS else "other", str(code))
    children = _http_children.get(key)
    if children is None:
        children = _http_children.setdefault(
            key, (HTTP_REQUESTS.labels(*key), HTTP_DURATION.labels(key[0], key[1]))
        )
    children[0].inc()
    children[1].observe(seconds)


def observe_kafka(api_key: int, seconds: float) -> None:
    """A Kafka listener's ``observe_request`` (``kafka_listener.server``)."""
    child = _kafka_children.get(api_key)
    if child is None:
        schema = SCHEMAS.get(api_key)
        name = schema.name if schema is not None else f"ApiKey{api_key}"
        child = _kafka_children.setdefault(api_key, KAFKA_DURATION.labels(name))
    child.observe(seconds)


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


class _KafkaConnections(Collector):
    """``cairn_kafka_connections`` of the watched listener, read at scrape time; absent
    when no listener runs (``CAIRN_KAFKA_PORT=0``)."""

    def __init__(self) -> None:
        self.listener: weakref.ref[Any] | None = None

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        listener = self.listener() if self.listener is not None else None
        if listener is None:
            return
        yield GaugeMetricFamily(
            "cairn_kafka_connections",
            "Open Kafka client connections.",
            value=listener.connection_count,
        )


_kafka_connections = _KafkaConnections()
REGISTRY.register(_kafka_connections)


def watch_kafka(listener: Any) -> None:
    """Instrument a started or starting :class:`kafka_listener.server.KafkaListener`: its
    requests are timed and its connections counted (the last one watched, held weakly)."""
    listener.observe_request = observe_kafka
    _kafka_connections.listener = weakref.ref(listener)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class CountWebsockets:
    """ASGI wrapper counting WebSocket connections from their accept until the application
    returns (the client or the consumer closed it), in :data:`WEBSOCKETS`."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        accepted = False

        async def counting_send(message: MutableMapping[str, Any]) -> None:
            nonlocal accepted
            if message["type"] == "websocket.accept" and not accepted:
                accepted = True
                WEBSOCKETS.inc()
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            if accepted:
                WEBSOCKETS.dec()
