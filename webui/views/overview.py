"""``/``: the store's health (a banner while degraded, with acknowledgement), broker status,
throughput chart, services, and where lag piles up.

The banner lists each open store problem (summary, first seen, its facts behind a
disclosure) and each condition (with a progress bar when it has one). Operators and admins
acknowledge one problem, or every problem the banner shows, through
``POST /health/acknowledge/`` (:func:`acknowledge`), which takes the REST API's path
(:mod:`shared.health`: same checks, same audit action ``problem.acknowledge``). "Every problem
shown" sends the ids on the page, so a problem reported while the operator read the banner
is not acknowledged unseen. The banner is its own partial (``?partial=health``), refreshed
with the rest of the page every 5 s.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from cairn import runtime
from mqcore.broker import Broker
from shared import health as store_health
from shared.serializers import tiered
from shared.serializers.health import AcknowledgeSerializer, health_dict
from webui.access import console_page, describable_groups, describable_topics, get_broker
from webui.metrics import sampler
from webui.views.common import validate

TOP = 5
#: Summaries the message after an acknowledgement repeats (then "and N more").
FLASHED = 3

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


def lag_leaders(
    broker: Broker, shown_groups: set[str], shown_topics: set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The groups and the topics with the most unconsumed messages (top 5 each), of those
    the user may describe."""
    groups = []
    topics: dict[str, dict[str, Any]] = {}
    for info in broker.admin.list_groups():
        if info.system or info.name not in shown_groups:
            continue
        lag = broker.admin.group_lag(info.name)
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
            if q.topic not in shown_topics:
                continue
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


def _dom_id(item_id: str) -> str:
    """An HTML id stable for the same problem or condition, so that a refresh keeps its
    details open (``console.js``) whatever characters the store's id has."""
    return "health-" + hashlib.blake2s(item_id.encode(), digest_size=6).hexdigest()


def _detail_rows(detail: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (
            str(key),
            value if isinstance(value, str) else json.dumps(value, sort_keys=True),
        )
        for key, value in detail.items()
    ]


def _kind_label(kind: str) -> str:
    return kind.replace("_", " ").capitalize()


def health_context(broker: Broker) -> dict[str, Any]:
    """The banner's rows: :func:`shared.serializers.health.health_dict` plus what the template
    shows (a label for the kind, the detail as rows, the progress in percent)."""
    data = health_dict(broker.store.health)
    problems = [
        p
        | {
            "dom_id": _dom_id(p["id"]),
            "label": _kind_label(p["kind"]),
            "rows": _detail_rows(p["detail"]),
        }
        for p in data["problems"]
    ]
    conditions = [
        c
        | {
            "dom_id": _dom_id(c["id"]),
            "label": _kind_label(c["kind"]),
            "rows": _detail_rows(c["detail"]),
            "percent": None if c["progress"] is None else round(c["progress"] * 100, 1),
        }
        for c in data["conditions"]
    ]
    return {
        "store_health": {
            "status": data["status"],
            "problems": problems,
            "conditions": conditions,
        }
    }


def overview_context(request: HttpRequest) -> dict[str, Any]:
    rt = runtime.current()
    broker = get_broker()
    sampler.start()
    states = rt.service_states()
    status = broker.status(states)
    topics = describable_topics(request, [t.name for t in broker.admin.list_topics()])
    groups = describable_groups(request, [g.name for g in broker.admin.list_groups()])
    top_groups, top_topics = lag_leaders(broker, set(groups), set(topics))
    health = rt.health()
    return {
        "topic_count": sum(
            1 for t in broker.admin.list_topics(include_system=False) if t.name in set(topics)
        ),
        "group_count": sum(
            1 for g in broker.admin.list_groups() if not g.system and g.name in groups
        ),
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
        **health_context(broker),
    }


@console_page(read_role=None)
def overview(request: HttpRequest) -> HttpResponse:
    partial = request.GET.get("partial")
    if partial == "health":
        return render(request, "webui/overview.html#health", health_context(get_broker()))
    template = "webui/overview.html#live" if partial == "live" else "webui/overview.html"
    return render(request, template, overview_context(request))


@require_POST
@console_page()
def acknowledge(request: HttpRequest) -> HttpResponse:
    """Acknowledge the problems named by the posted ``id`` fields, then back to the overview
    with what was done (operators and admins; :func:`console_page` refuses viewers)."""
    broker = get_broker()
    ids = request.POST.getlist("id")
    if not ids:
        messages.warning(request, "Choose a problem to acknowledge.")
        return redirect("webui:overview")
    valid, errors = validate(AcknowledgeSerializer, {"ids": ids})
    if valid is None:
        messages.error(request, "Nothing acknowledged: " + "; ".join(errors.values()))
        return redirect("webui:overview")
    outcome = store_health.acknowledge(
        broker.store.health, request, valid["ids"], request.user.get_username()
    )
    if outcome.unknown:
        named = ", ".join(pid for _, pid in outcome.unknown)
        messages.error(
            request, f"No store problem {named} is reported any more; nothing was acknowledged."
        )
        return redirect("webui:overview")
    if outcome.acknowledged:
        count = len(outcome.acknowledged)
        shown = [p.summary for p in outcome.acknowledged[:FLASHED]]
        if count > FLASHED:
            shown.append(f"and {count - FLASHED} more")
        messages.success(
            request,
            f"Acknowledged {count} problem{'s' if count != 1 else ''}: {'; '.join(shown)}",
        )
    for p in outcome.already_acknowledged:
        messages.info(request, f"Already acknowledged by {p.acknowledged_by}: {p.summary}")
    return redirect("webui:overview")
