"""The broker's live state as Prometheus metrics, read when ``/metrics`` is scraped.

Nothing here counts anything: each scrape asks the running broker what the status endpoint
and the console's overview ask it (``Broker.status``, ``BrokerAdmin.group_lag``, the runtime's
service states, the store's health, the tier's totals), so the figures are the ones those
pages show, and nothing is paid between scrapes.

==========================================  =======  ============================================
metric                                      type     meaning
==========================================  =======  ============================================
``cairn_up``                                gauge    1 while this process runs a broker
``cairn_uptime_seconds``                    gauge    since the broker started
``cairn_messages_in_total``                 counter  messages stored since start (every front end
                                                     and the broker's own: retries, delays)
``cairn_messages_out_total``                counter  messages returned by pulls and fetches
``cairn_topic_messages_in_total``           counter  ``topic``: messages the topic's queues hold
                                                     and ever held (sum of ConsumeQueue max
                                                     offsets: what was stored and dispatched,
                                                     across restarts)
``cairn_topic_messages_out_total``          counter  ``topic``: messages returned by pulls and
                                                     Kafka fetches since start
``cairn_group_lag_messages``                gauge    ``group``, ``topic``: unconsumed messages
``cairn_group_lag_seconds``                 gauge    ``group``, ``topic``: age of the oldest
                                                     unconsumed message (0 without lag)
``cairn_store_size_bytes``                  gauge    disk space the store's files take
``cairn_disk_{total,used,free}_bytes``      gauge    the partition holding the store
``cairn_disk_used_ratio``                   gauge    used / (used + available), 0..1: what
                                                     ``df`` and the disk guard compute, the
                                                     figure ``CAIRN_DISK_*_RATIO`` compare to
``cairn_commitlog_{min,max}_offset_bytes``  gauge    CommitLog phys offsets (max: bytes ever
                                                     written, so its rate is the write rate)
``cairn_store_writable``                    gauge    0 while puts are refused (disk full ...)
``cairn_store_health_ok``                   gauge    0 while the store is degraded
``cairn_store_{problems,conditions}``       gauge    open problems / conditions (``/healthz``)
``cairn_topics``, ``cairn_groups``          gauge    topics and groups configured
``cairn_service_up``                        gauge    ``service``: 0 when its last run failed
``cairn_service_runs_total``                counter  ``service``: runs of the service step
``cairn_service_errors_total``              counter  ``service``: failed runs
``cairn_service_last_run_timestamp_seconds``  gauge  ``service``: end of its last run
``cairn_service_lag_bytes``                 gauge    ``service``: CommitLog bytes it is behind
                                                     (reput, flush; follow in Celery mode)
``cairn_tier_{messages,lag_messages,size_bytes}``  gauge  tiered storage totals (only when on)
==========================================  =======  ============================================

Replication lag and broker roles join these when replication exists; until then they are
absent, not zero. The hook for them: a collector of its own, registered with
:data:`server.metrics.registry.REGISTRY` by whatever runs replication (as
:mod:`server.metrics.requests` registers its own), reading the replicas' state at scrape
time like this one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cairn import runtime
from mqcore.broker import Broker
from mqcore.broker.lag import queue_ids
from mqcore.store.files.space import usage_ratio
from shared.serializers import tiered
from shared.serializers.health import health_counts
from webui.views.overview import service_rows


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class BrokerCollector(Collector):
    """See the module docstring. Reads :func:`cairn.runtime.current` on every scrape."""

    def describe(self) -> Iterable[Metric]:
        return []  # names depend on the live state; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        rt = runtime.current()
        broker = rt.broker
        running = broker is not None and broker.started
        yield _gauge("cairn_up", "1 while this process runs a broker.", 1 if running else 0)
        if broker is None or not running:
            return
        states = rt.service_states()
        status = broker.status(states)
        yield from self._status(status)
        yield from self._topics(broker)
        yield from self._lag(broker)
        yield from self._services(states, rt.services_mode)
        yield from self._health(broker)
        yield from self._tier(rt)

    def _status(self, s: Any) -> Iterator[Metric]:
        yield _gauge(
            "cairn_uptime_seconds", "Seconds since the broker started.", s.uptime_ms / 1000
        )
        yield CounterMetricFamily(
            "cairn_messages_in",
            "Messages stored since start (all front ends and the broker's own services).",
            value=s.put_total,
        )
        yield CounterMetricFamily(
            "cairn_messages_out",
            "Messages returned by pulls and Kafka fetches since start.",
            value=s.get_total,
        )
        yield _gauge(
            "cairn_store_size_bytes", "Disk space the store's files take.", s.store_size_bytes
        )
        yield _gauge(
            "cairn_disk_total_bytes", "Size of the partition holding the store.", s.disk_total_bytes
        )
        yield _gauge("cairn_disk_used_bytes", "Used bytes of that partition.", s.disk_used_bytes)
        yield _gauge("cairn_disk_free_bytes", "Free bytes of that partition.", s.disk_free_bytes)
        yield _gauge(
            "cairn_disk_used_ratio",
            "Used / (used + available) of that partition, as df and the disk guard compute it "
            "(the figure CAIRN_DISK_WARNING_RATIO and the cleanup ratios compare against).",
            usage_ratio(s.store_root),
        )
        yield _gauge(
            "cairn_commitlog_min_offset_bytes",
            "CommitLog phys offset of the oldest byte kept.",
            s.commitlog_min_offset,
        )
        yield _gauge(
            "cairn_commitlog_max_offset_bytes",
            "CommitLog phys offset where the next message goes (bytes ever written).",
            s.commitlog_max_offset,
        )
        yield _gauge("cairn_topics", "Topics configured (system topics included).", s.topic_count)
        yield _gauge("cairn_groups", "Subscription groups configured.", s.group_count)

    def _topics(self, broker: Broker) -> Iterator[Metric]:
        stored = CounterMetricFamily(
            "cairn_topic_messages_in",
            "Messages stored in the topic and dispatched to its queues, ever (sum of its "
            "ConsumeQueue max offsets).",
            labels=("topic",),
        )
        reader, topics = broker.reader, broker.metadata.topics
        for info in broker.admin.list_topics():
            config = topics.get(info.name)
            total = sum(
                reader.max_offset(info.name, q) for q in queue_ids(reader, config, info.name)
            )
            stored.add_metric((info.name,), total)
        yield stored
        delivered = CounterMetricFamily(
            "cairn_topic_messages_out",
            "Messages of the topic returned by pulls and Kafka fetches since start.",
            labels=("topic",),
        )
        for topic, count in sorted(broker.delivered_by_topic().items()):
            delivered.add_metric((topic,), count)
        yield delivered

    def _lag(self, broker: Broker) -> Iterator[Metric]:
        messages = GaugeMetricFamily(
            "cairn_group_lag_messages",
            "Messages of the topic the group has not consumed.",
            labels=("group", "topic"),
        )
        seconds = GaugeMetricFamily(
            "cairn_group_lag_seconds",
            "How long the group's oldest unconsumed message of the topic has waited.",
            labels=("group", "topic"),
        )
        for info in broker.admin.list_groups():
            if info.system:
                continue
            per_topic: dict[str, tuple[int, int]] = {}
            for q in broker.admin.group_lag(info.name).queues:
                count, age_ms = per_topic.get(q.topic, (0, 0))
                per_topic[q.topic] = (count + q.lag, max(age_ms, q.lag_ms))
            for topic, (count, age_ms) in sorted(per_topic.items()):
                messages.add_metric((info.name, topic), count)
                seconds.add_metric((info.name, topic), age_ms / 1000)
        yield messages
        yield seconds

    def _services(self, states: dict[str, dict[str, Any]], mode: str) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "cairn_service_up",
            "1 when the service's last run succeeded, 0 when it failed.",
            labels=("service",),
        )
        runs = CounterMetricFamily(
            "cairn_service_runs", "Runs of the service's step.", labels=("service",)
        )
        errors = CounterMetricFamily(
            "cairn_service_errors", "Runs of the service's step that failed.", labels=("service",)
        )
        last = GaugeMetricFamily(
            "cairn_service_last_run_timestamp_seconds",
            "When the service's step last ran (Unix time).",
            labels=("service",),
        )
        lag = GaugeMetricFamily(
            "cairn_service_lag_bytes",
            "CommitLog bytes the service is behind (reput: not dispatched; flush: not on "
            "disk; follow: not yet picked up from the workers).",
            labels=("service",),
        )
        for row in service_rows(states, mode):
            state = row["state"]
            if state is None:  # not run by this process (the overview says "off")
                continue
            name = (row["name"],)
            up.add_metric(name, 0 if row["health"] == "danger" else 1)
            runs.add_metric(name, int(state.get("runs", 0)))
            errors.add_metric(name, int(state.get("errors", 0)))
            last.add_metric(name, int(state.get("last_run_ms", 0)) / 1000)
            if "lag_bytes" in state:
                lag.add_metric(name, int(state["lag_bytes"]))
        yield from (up, runs, errors, last, lag)

    def _health(self, broker: Broker) -> Iterator[Metric]:
        store = broker.store
        counts = health_counts(store.health)
        yield _gauge(
            "cairn_store_health_ok",
            "1 while the store's health is ok, 0 while degraded (see /api/v1/status).",
            1 if counts["status"] == "ok" else 0,
        )
        yield _gauge(
            "cairn_store_problems", "Open (unacknowledged) store problems.", counts["problems"]
        )
        yield _gauge(
            "cairn_store_conditions",
            "Conditions holding (disk full, a rebuild ...).",
            counts["conditions"],
        )
        yield _gauge(
            "cairn_store_writable", "1 while the store accepts puts.", 1 if store.writable else 0
        )

    def _tier(self, rt: runtime.BrokerRuntime) -> Iterator[Metric]:
        if rt.tiered is None:
            return
        totals = tiered.summary(rt)
        yield _gauge("cairn_tier_messages", "Messages held by tiered storage.", totals["messages"])
        yield _gauge(
            "cairn_tier_lag_messages",
            "Messages stored locally and not yet uploaded to tiered storage.",
            totals["lag"],
        )
        yield _gauge("cairn_tier_size_bytes", "Bytes tiered storage holds.", totals["size_bytes"])
