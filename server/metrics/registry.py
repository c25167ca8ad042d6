"""The process's one Prometheus registry: what ``GET /metrics`` exposes.

A registry of its own rather than ``prometheus_client.REGISTRY``, so that nothing a library
registers there by import reaches the endpoint unasked. It holds the client library's
process figures (CPU seconds, resident memory, open files: the broker's RSS is one an
operator watches), the Python platform and garbage-collector figures, the request
instruments of :mod:`server.metrics.requests`, and (registered by :mod:`server.metrics.view`)
the collector that reads the broker's live state at scrape time.

Imports nothing from Django, so that ``bench/kafka.py --serve`` (no settings) instruments
its listener the way ``runbroker`` does.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

#: Latency buckets (seconds) of REST and Kafka requests: a single send takes ~1 ms, a
#: Kafka produce tens of microseconds to milliseconds, a long poll up to 30 s.
LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
