"""``/``: broker status, throughput chart, services, and where lag piles up."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from api.serializers import tiered
from cairn import runtime
from mqcore.broker import Broker
from webui.access import console_page, get_broker
from webui.metrics import sampler

TOP = 5

#: Services the overview always lists, with what their state means.
SERVICES = (
    ("reput", "Dispatch (reput)", "builds consume queues and the key index from the CommitLog"),
    ("follow", "Follow workers", "picks up what the Celery workers dispatched"),
    ("flush", "Flush", "writes the CommitLog to disk"),
    ("cleanup", "Cleanup", "deletes expired CommitLog segments"),
    ("index", "Index rebuild", "rebuilds the key index when one is requested"),
    ("delay_delivery", "Delay delivery", "moves delayed messages to their topic when due"),
    ("offsets_persist", "Offsets persist", "writes consumerOffset.json"),
)


def lag_leaders(broker: Broker) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The groups and the topics with the most unconsumed messages (top 5 each)."""
    groups = []
    topics: dict[str, dict[str, Any]] = {}
    for info in broker.list_groups():
        if info.system:
            continue
        lag = broker.group_lag(info.name)
        groups.append(
            {
                "name": info.name,
                "lag": lag.total_lag,
                "lag_ms": lag.max_lag_ms,
                "topics": len({q.topic for q in lag.queues}),
            }
        )
        per_topic: dict[str, tuple[int, int]] = {}
        for q in lag.queues:
            count, age = per_topic.get(q.topic, (0, 0))
            per_topic[q.topic] = (count + q.lag, max(age, q.lag_ms))
        for topic, (count, age) in per_topic.items():
            entry = topics.setdefault(topic, {"name": topic, "lag": 0, "lag_ms": 0, "group": ""})
            if count > entry["lag"]:
                entry.update(lag=count, lag_ms=age, group=info.name)
    groups = [g for g in groups if g["lag"] > 0]
    groups.sort(key=lambda g: (-g["lag"], -g["lag_ms"], g["name"]))
    ranked = sorted(
        (t for t in topics.values() if t["lag"] > 0), key=lambda t: (-t["lag"], t["name"])
    )
    return groups[:TOP], ranked[:TOP]


def service_rows(states: dict[str, dict[str, Any]], services_mode: str) -> list[dict[str, Any]]:
    rows = []
    for name, label, meaning in SERVICES:
        state = states.get(name)
        if name == "follow" and state is None:
            continue  # only in Celery mode
        rows.append({"name": name, "label": label, "meaning": meaning, "state": state})
    known = {name for name, *_ in SERVICES}
    for name, state in sorted(states.items()):
        if name not in known:
            rows.append(
                {
                    "name": name,
                    "label": name.replace("_", " ").capitalize(),
                    "meaning": "",
                    "state": state,
                }
            )
    for row in rows:
        state = row["state"]
        if state is None:
            row["health"] = "off"
            row["note"] = (
                "run by Celery workers"
                if services_mode == "celery"
                else "not running in this broker"
            )
        elif state.get("last_error") and state.get("last_error_ms", 0) >= state.get(
            "last_run_ms", 0
        ):
            row["health"] = "danger"
        else:
            row["health"] = "ok"
    return rows


def tier_context(rt: runtime.BrokerRuntime) -> dict[str, Any]:
    """Tiered storage totals, and the queues furthest behind in uploading (top 5)."""
    rows = tiered.queue_rows(rt)
    behind = sorted((r for r in rows if r["lag"] > 0), key=lambda r: (-r["lag"], r["topic"]))
    return {**tiered.summary(rt, rows), "behind": behind[:TOP]}


def overview_context() -> dict[str, Any]:
    rt = runtime.current()
    broker = get_broker()
    sampler.start()
    states = rt.service_states()
    status = broker.status(states)
    top_groups, top_topics = lag_leaders(broker)
    health = rt.health()
    return {
        "topic_count": len(broker.list_topics(include_system=False)),
        "group_count": sum(1 for g in broker.list_groups() if not g.system),
        "section": "overview",
        "status": status,
        "health": health,
        "services_mode": rt.services_mode,
        "services": service_rows(states, rt.services_mode),
        "top_groups": top_groups,
        "top_topics": top_topics,
        "series": sampler.series(),
        "store": health.get("store") or {},
        "tier": tier_context(rt),
    }


@console_page()
def overview(request: HttpRequest) -> HttpResponse:
    template = (
        "webui/overview.html#live"
        if request.GET.get("partial") == "live"
        else "webui/overview.html"
    )
    return render(request, template, overview_context())
