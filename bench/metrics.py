"""What ``GET /metrics`` costs: per request on the hot paths, and per scrape.

Usage::

    .venv/bin/python bench/metrics.py                 # 100 topics x 4 queues, 50 groups
    .venv/bin/python bench/metrics.py --topics 1000 --groups 200

Per request (in-process, timed over many calls, best of 5 rounds):

* **Kafka**: ``KafkaListener._observe`` as the listener calls it after every answered
  request, with the listener instrumented (``server.metrics.requests.watch_kafka``) and
  without (``observe_request`` None: the clock read and the attribute test only).
* **HTTP**: ``HttpMetricsMiddleware`` around a view that does nothing, against that view
  called directly (what the middleware adds to every REST and console request).
* **library**: what the same HTTP observation costs with ``prometheus_client``'s own
  ``Counter.inc`` and ``Histogram.observe`` (labelled children looked up beforehand): why
  ``server.metrics.requests`` keeps its own per-thread rows instead.

Per scrape: a real broker runtime in a temporary directory with ``--topics`` topics of 4
queues, 10 messages per queue, and ``--groups`` groups with committed offsets on one topic
each (so each has lag), then ``generate_latest`` of the registry ``/metrics`` serves,
p50 and max over ``--scrapes`` scrapes. The scrape reads everything at the time it is
made (``server.metrics.broker``); nothing is paid between scrapes.

Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def per_call_ns(fn: Callable[[], object], calls: int = 200_000, rounds: int = 5) -> float:
    """Best of ``rounds`` of the mean time of ``calls`` calls, in nanoseconds."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - started) / calls)
    return best


def kafka_figures() -> None:
    from kafka_listener.handlers import ListenerConfig
    from kafka_listener.schemas import ApiKey
    from kafka_listener.server import KafkaListener
    from mqcore.broker.broker import Broker
    from server.metrics.requests import watch_kafka

    broker = Broker.open(Path(tempfile.mkdtemp(prefix="cairn-bench-metrics-")) / "store")
    try:
        listener = KafkaListener(broker, ListenerConfig(port=0))  # not started: no socket
        started = time.perf_counter()
        off = per_call_ns(lambda: listener._observe(ApiKey.PRODUCE, started))
        watch_kafka(listener)
        on = per_call_ns(lambda: listener._observe(ApiKey.PRODUCE, started))
    finally:
        broker.close()
        shutil.rmtree(broker.store.root.parent, ignore_errors=True)
    print(
        f"Kafka request hook:   untimed {off:7.0f} ns   timed {on:7.0f} ns   (+{on - off:.0f} ns)"
    )


def http_figures() -> None:
    from server.metrics.requests import HttpMetricsMiddleware

    class Match:
        view_name = "api:topic-messages"

    class Request:
        method = "POST"
        resolver_match = Match()

    class Response:
        status_code = 200

    request, response = Request(), Response()

    def view(_: Any) -> Response:
        return response

    middleware = HttpMetricsMiddleware(view)
    bare = per_call_ns(lambda: view(request))
    timed = per_call_ns(lambda: middleware(request))
    print(
        f"HTTP middleware:      bare view {bare:5.0f} ns   timed {timed:7.0f} ns   "
        f"(+{timed - bare:.0f} ns a request)"
    )


def library_figures() -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from server.metrics.registry import LATENCY_BUCKETS_S

    registry = CollectorRegistry()
    counter = Counter("c", "c", ("handler", "method", "code"), registry=registry)
    histogram = Histogram(
        "h", "h", ("handler", "method"), buckets=LATENCY_BUCKETS_S, registry=registry
    )
    count, observe = (
        counter.labels("api:topic-messages", "POST", "200"),
        histogram.labels("api:topic-messages", "POST"),
    )

    def both() -> None:
        count.inc()
        observe.observe(0.0012)

    print(f"prometheus_client:    Counter.inc + Histogram.observe {per_call_ns(both):7.0f} ns")


def scrape_figures(topics: int, groups: int, scrapes: int) -> None:
    data = Path(tempfile.mkdtemp(prefix="cairn-bench-metrics-"))
    os.environ["CAIRN_DATA_DIR"] = str(data)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cairn.settings")
    import django

    django.setup()
    from prometheus_client import generate_latest

    from cairn import runtime
    from cairn.runtime import BrokerRuntime
    from mqcore.broker import OutgoingMessage
    from server.metrics import view  # noqa: F401  (registers the broker's collector)
    from server.metrics.registry import REGISTRY

    rt = BrokerRuntime(store_dir=data / "store", services_mode="inline")
    rt.start()
    runtime.install(rt)
    try:
        broker = rt.broker
        assert broker is not None
        for t in range(topics):
            broker.admin.create_topic(f"bench-{t}", read_queue_nums=4, write_queue_nums=4)
            for q in range(4):
                broker.send(f"bench-{t}", [OutgoingMessage(body=b"x" * 100, queue_id=q)] * 10)
        for g in range(groups):
            broker.admin.create_group(f"group-{g}")
            broker.commit_offset(f"group-{g}", f"bench-{g % topics}", 0, 3)
        broker.store.dispatch_until_caught_up()
        times, size = [], 0
        for _ in range(scrapes):
            started = time.perf_counter()
            size = len(generate_latest(REGISTRY))
            times.append(time.perf_counter() - started)
        print(
            f"scrape ({topics} topics x 4 queues, {groups} groups): "
            f"p50 {statistics.median(times) * 1e3:.1f} ms   max {max(times) * 1e3:.1f} ms   "
            f"{size:,} bytes"
        )
    finally:
        rt.stop()
        runtime.reset()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load} (other work on the machine skews every figure)"
    )
    kafka_figures()
    http_figures()
    library_figures()
    scrape_figures(args.topics, args.groups, args.scrapes)


if __name__ == "__main__":
    main()
