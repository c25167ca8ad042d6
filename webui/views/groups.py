"""``/groups/``: subscription groups, their lag per topic and queue, offset reset with a
dry-run preview, and the dead-letter queue with resend.

Input is checked by the REST API's serializers; every change goes to the audit log with the
API's action names (``group.create``, ``group.offsets.reset``, ``message.dlq_resend`` ...).
What the user may see and do is the authorizer's (:mod:`webui.access`); creating and
editing a group's settings stay the operator role's, as over REST.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse

from accounts import audit
from accounts.roles import OPERATOR, has_role
from mqcore.access.model import Operation, Resource
from mqcore.broker import Broker, GroupInfo
from mqcore.broker.copies import find as find_copy
from mqcore.errors import MQError
from mqcore.format.properties import PROPERTY_DLQ_ORIGIN_TOPIC, PROPERTY_RETRY_TOPIC
from mqcore.metadata.topics import MAX_QUEUE_NUMS, dlq_topic_name, retry_topic_name
from shared import impact, resends
from shared.serializers.groups import (
    GroupCreateSerializer,
    GroupUpdateSerializer,
    ResetSerializer,
    group_dict,
    lag_dict,
    plan_dict,
)
from shared.serializers.messages import send_result
from webui.access import (
    console_page,
    describable_groups,
    describable_topics,
    get_broker,
    may,
    require,
)
from webui.format import format_pairs, parse_pairs
from webui.names import store_name
from webui.search import parse_time, row
from webui.views.common import checkbox, mq_errors, submit_form, validate

PAGE_SIZE = 100
DLQ_PAGE = 50
BOOL_FIELDS = (
    ("consume_enable", "Consuming enabled", "off: pulls of this group are refused"),
    ("consume_from_min_enable", "Start from the earliest", "a new group starts at the min offset"),
    ("consume_broadcast_enable", "Broadcast allowed", "each consumer gets every message"),
    ("consume_message_orderly", "Orderly", "consume one queue at a time, in order"),
    (
        "notify_consumer_ids_changed_enable",
        "Notify on rebalance",
        "tell clients when members change",
    ),
)
INT_FIELDS = (
    ("retry_max_times", "Max retries", "then the message goes to the DLQ"),
    ("retry_queue_nums", "Retry queues", "0: failed messages are dropped"),
    ("consume_timeout_minute", "Consume timeout (min)", ""),
    ("broker_id", "Broker id", "0 = master"),
    ("which_broker_when_consume_slowly", "Broker when slow", ""),
)
GROUP_ALIASES = {"group_name": "name", "group": "name"}


def _settings(g: GroupInfo) -> dict[str, Any]:
    data = group_dict(g)
    for derived in ("broker_name", "system", "topics"):
        data.pop(derived)
    return data


def _dlq_count(broker: Broker, group: str) -> int | None:
    name = dlq_topic_name(group)
    if broker.metadata.topics.get(name) is None:
        return None
    return broker.admin.topic_status(name).message_count


@console_page(read_role=None)
def group_list(request: HttpRequest) -> HttpResponse:
    broker = get_broker()
    q = request.GET.get("q", "").strip()
    show_system = request.GET.get("system") == "1"
    groups = [g for g in broker.admin.list_groups() if show_system or not g.system]
    shown = set(describable_groups(request, [g.name for g in groups]))
    groups = [g for g in groups if g.name in shown]
    if q:
        needle = store_name(q).lower()  # Kafka's spelling finds the store's
        groups = [g for g in groups if needle in g.name.lower()]
    page = Paginator(groups, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = []
    for info in page.object_list:
        try:
            lag = broker.admin.group_lag(info.name)
        except MQError:
            continue
        rows.append(
            {
                "info": info,
                "lag": lag.total_lag,
                "lag_ms": lag.max_lag_ms,
                "topics": describable_topics(request, sorted({q.topic for q in lag.queues})),
                # Shown (and linked) only to who may read the dead letters.
                "dlq": _dlq_count(broker, info.name)
                if may(request, Operation.READ, Resource.topic(dlq_topic_name(info.name)))
                else None,
            }
        )
    return render(
        request,
        "webui/groups.html",
        {
            "section": "groups",
            "rows": rows,
            "page": page,
            "q": q,
            "show_system": show_system,
            "total": len(groups),
        },
    )


def _group_form_data(post: QueryDict, *, create: bool) -> tuple[dict[str, Any], dict[str, str]]:
    errors: dict[str, str] = {}
    data: dict[str, Any] = {}
    for name, *_ in BOOL_FIELDS:
        data[name] = "true" if checkbox(post, name) else "false"
    for name, *_ in INT_FIELDS:
        raw = post.get(name, "").strip()
        if raw:
            data[name] = raw
    try:
        data["attributes"] = parse_pairs(post.get("attributes", ""))
    except ValueError as exc:
        errors["attributes"] = str(exc)
    policy = post.get("group_retry_policy", "").strip()
    if policy:
        try:
            data["group_retry_policy"] = json.loads(policy)
        except ValueError as exc:
            errors["group_retry_policy"] = f"not valid JSON: {exc}"
    if create:
        data["name"] = store_name(post.get("name", "").strip())
    return data, errors


def _group_values(info: GroupInfo | None, post: QueryDict | None) -> dict[str, Any]:
    if post is not None:
        values: dict[str, Any] = {name: checkbox(post, name) for name, *_ in BOOL_FIELDS}
        values.update({name: post.get(name, "") for name, *_ in INT_FIELDS})
        values.update(
            name=post.get("name", ""),
            attributes=post.get("attributes", ""),
            group_retry_policy=post.get("group_retry_policy", ""),
        )
        return values
    if info is not None:
        values = _settings(info)
        values["name"] = info.name
        values["attributes"] = format_pairs(info.attributes)
        values["group_retry_policy"] = json.dumps(info.group_retry_policy)
        return values
    return {
        "name": "",
        "consume_enable": True,
        "consume_from_min_enable": True,
        "consume_broadcast_enable": True,
        "consume_message_orderly": False,
        "notify_consumer_ids_changed_enable": True,
        "retry_max_times": 16,
        "retry_queue_nums": 1,
        "consume_timeout_minute": 15,
        "broker_id": 0,
        "which_broker_when_consume_slowly": 1,
        "attributes": "",
        "group_retry_policy": '{"type": "CUSTOMIZED"}',
    }


def _form_page(
    request: HttpRequest, info: GroupInfo | None, errors: dict[str, str]
) -> HttpResponse:
    values = _group_values(info, request.POST if request.method == "POST" else None)
    context = {
        "section": "groups",
        "creating": info is None,
        "info": info,
        "errors": errors,
        "bool_fields": [(n, label, help_, values.get(n)) for n, label, help_ in BOOL_FIELDS],
        "int_fields": [(n, label, help_, values.get(n)) for n, label, help_ in INT_FIELDS],
        "values": values,
        "max_queue_nums": MAX_QUEUE_NUMS,
    }
    return render(request, "webui/group_form.html", context, status=400 if errors else 200)


@console_page(read_role=OPERATOR)
def group_create(request: HttpRequest) -> HttpResponse:
    broker = get_broker()
    errors: dict[str, str] = {}
    if request.method == "POST":

        def create(valid: dict[str, Any]) -> HttpResponse:
            name = valid.pop("name")
            info = broker.admin.create_group(name, **valid)
            audit.record(request, "group.create", "group", name, new=_settings(info))
            messages.success(request, f"Group {name} created.")
            return redirect("webui:group", name=name)

        parsed = _group_form_data(request.POST, create=True)
        done, errors = submit_form(parsed, GroupCreateSerializer, GROUP_ALIASES, create)
        if done is not None:
            return done
    return _form_page(request, None, errors)


@console_page(read_role=OPERATOR)
def group_edit(request: HttpRequest, name: str) -> HttpResponse:
    broker = get_broker()
    require(request, Operation.DESCRIBE, Resource.group(name))
    info = broker.admin.get_group(name)
    errors: dict[str, str] = {}
    if request.method == "POST":

        def update(valid: dict[str, Any]) -> HttpResponse:
            new = broker.admin.update_group(name, **valid)
            old, changed = _settings(info), _settings(new)
            audit.record(request, "group.update", "group", name, old=old, new=changed)
            messages.success(request, f"Group {name} saved.")
            return redirect("webui:group", name=name)

        parsed = _group_form_data(request.POST, create=False)
        done, errors = submit_form(parsed, GroupUpdateSerializer, GROUP_ALIASES, update)
        if done is not None:
            return done
    return _form_page(request, info, errors)


@console_page(read_role=None, write_role=None)
def group_delete(request: HttpRequest, name: str) -> HttpResponse:
    """The page shows the group's lag per topic and queue (what its removed offsets would
    have resumed from); typing the group's name confirms the delete."""
    broker = get_broker()
    require(request, Operation.DELETE, Resource.group(name))
    info = broker.admin.get_group(name)
    found = impact.group_delete(broker, name)
    error = ""
    if request.method == "POST":
        if store_name(request.POST.get("confirm_name", "").strip()) != name:
            error = "Type the group's name exactly to confirm."
        else:
            remove_offsets = checkbox(request.POST, "remove_offsets")
            try:
                broker.admin.delete_group(name, remove_offsets=remove_offsets)
            except MQError as exc:
                error = str(exc)
            else:
                old = _settings(info) | {"offsets_removed": remove_offsets}
                if found["lag"]:
                    old["impact"] = found | {"offsets_removed": remove_offsets}
                audit.record(request, "group.delete", "group", name, old=old)
                messages.success(request, f"Group {name} deleted.")
                return redirect("webui:groups")
    return render(
        request,
        "webui/group_delete.html",
        {"section": "groups", "info": info, "impact": found, "error": error},
        status=400 if error else 200,
    )


@console_page(read_role=None)
def group_detail(request: HttpRequest, name: str) -> HttpResponse:
    """The group's lag on the topics the user may describe (Kafka's OffsetFetch leaves the
    others out the same way)."""
    broker = get_broker()
    group = Resource.group(name)
    require(request, Operation.DESCRIBE, group)
    info = broker.admin.get_group(name)
    lag = lag_dict(broker.admin.group_lag(name))
    shown = set(describable_topics(request, [t["topic"] for t in lag["topics"]]))
    lag["topics"] = [t for t in lag["topics"] if t["topic"] in shown]
    retry = retry_topic_name(name)
    retry_count = (
        broker.admin.topic_status(retry).message_count
        if broker.metadata.topics.get(retry) is not None
        else None
    )
    return render(
        request,
        "webui/group.html",
        {
            "section": "groups",
            "info": info,
            "lag": lag,
            "dlq_count": _dlq_count(broker, name),
            "retry_topic": retry,
            "retry_count": retry_count,
            "allowed": {
                "reset": may(request, Operation.READ, group),
                "edit": has_role(request.user, OPERATOR),
                "delete": may(request, Operation.DELETE, group),
                "dlq": may(request, Operation.READ, Resource.topic(dlq_topic_name(name))),
            },
        },
    )


# -- offset reset ---------------------------------------------------------------------------


def _reset_input(post: QueryDict, now_ms: int) -> tuple[dict[str, Any], dict[str, str]]:
    errors: dict[str, str] = {}
    to = post.get("to", "latest")
    data: dict[str, Any] = {"topic": post.get("topic", "").strip(), "to": to}
    if to == "timestamp":
        try:
            timestamp = parse_time(post, "timestamp", None)
        except ValueError:
            timestamp = None
        if timestamp is None:
            errors["timestamp"] = "choose a time"
        else:
            data["timestamp"] = timestamp
    if to == "offsets":
        try:
            pairs = parse_pairs(post.get("offsets", ""))
            data["offsets"] = [{"queue_id": q, "offset": o} for q, o in pairs.items()]
        except ValueError as exc:
            errors["offsets"] = str(exc)
        if not errors and not data["offsets"]:
            errors["offsets"] = "give at least one queue=offset line"
    return data, errors


@console_page(read_role=None, write_role=None)
def group_reset(request: HttpRequest, name: str) -> HttpResponse:
    """GET the form; POST ``action=preview`` (dry run: a table of old → new offsets per
    queue) or ``action=apply`` (commit, then back to the group). ``READ`` on the group (a
    reset is a commit, Kafka's group read) and ``DESCRIBE`` on the topic."""
    broker = get_broker()
    require(request, Operation.READ, Resource.group(name))
    info = broker.admin.get_group(name)
    topics = sorted({q.topic for q in broker.admin.group_lag(name).queues} | set(info.topics))
    topics = describable_topics(request, topics)
    source = request.POST if request.method == "POST" else request.GET
    values = {
        "topic": source.get("topic", topics[0] if topics else ""),
        "to": source.get("to", "latest"),
        "timestamp_ms": source.get("timestamp_ms", ""),
        "offsets": source.get("offsets", ""),
    }
    errors: dict[str, str] = {}
    plans: list[dict[str, Any]] | None = None
    if request.method == "POST":
        data, errors = _reset_input(request.POST, broker.clock.now_ms())
        if "timestamp" in data:
            values["timestamp_ms"] = str(data["timestamp"])
        apply = request.POST.get("action") == "apply"
        if not errors:
            valid, errors = validate(ResetSerializer, data | {"dry_run": not apply})
            if valid is not None:
                require(request, Operation.DESCRIBE, Resource.topic(valid["topic"]))
                offsets = valid.get("offsets")
                try:
                    result = broker.admin.reset_offsets(
                        name,
                        valid["topic"],
                        to=valid["to"] if valid["to"] in ("earliest", "latest") else None,
                        timestamp_ms=valid.get("timestamp"),
                        offsets={o["queue_id"]: o["offset"] for o in offsets} if offsets else None,
                        dry_run=not apply,
                    )
                except MQError as exc:
                    errors = mq_errors(exc)
                else:
                    if apply:
                        audit.record(
                            request,
                            "group.offsets.reset",
                            "group",
                            name,
                            old=[
                                {"topic": p.topic, "queue_id": p.queue_id, "offset": p.old_offset}
                                for p in result
                            ],
                            new={
                                "request": {k: v for k, v in valid.items() if k != "dry_run"},
                                "offsets": [
                                    {
                                        "topic": p.topic,
                                        "queue_id": p.queue_id,
                                        "offset": p.new_offset,
                                    }
                                    for p in result
                                ],
                            },
                        )
                        changed = sum(1 for p in result if p.old_offset != p.new_offset)
                        messages.success(
                            request,
                            f"Offsets of {name} on {valid['topic']} reset: "
                            f"{changed} of {len(result)} queue{'s' if len(result) != 1 else ''} moved.",
                        )
                        return redirect("webui:group", name=name)
                    plans = [plan_dict(p) | {"delta": p.lag_after - p.lag_before} for p in result]
    all_topics = describable_topics(
        request, [t.name for t in broker.admin.list_topics(include_system=False)]
    )
    return render(
        request,
        "webui/group_reset.html",
        {
            "section": "groups",
            "info": info,
            "topics": topics,
            "all_topics": [t for t in all_topics if t not in topics],
            "values": values,
            "errors": errors,
            "plans": plans,
            "totals": {
                "before": sum(p["lag_before"] for p in plans or []),
                "after": sum(p["lag_after"] for p in plans or []),
                "moved": sum(1 for p in plans or [] if p["old_offset"] != p["new_offset"]),
            },
        },
        status=400 if errors else 200,
    )


# -- dead letters ---------------------------------------------------------------------------


def _origin_topic(message: Any) -> str:
    props = message.properties
    return str(props.get(PROPERTY_DLQ_ORIGIN_TOPIC) or props.get(PROPERTY_RETRY_TOPIC) or "")


def _dlq_row(request: HttpRequest, message: Any) -> dict[str, Any]:
    data = row(message)
    data["origin_topic"] = origin = _origin_topic(message)
    data["may_resend"] = bool(origin) and may(request, Operation.WRITE, Resource.topic(origin))
    return data


def _require_resend(request: HttpRequest, broker: Broker, dlq: str, ids: list[str]) -> None:
    """``WRITE`` on the original topic of each message to resend (found in the DLQ; one not
    there is left to the broker's own error)."""
    for msg_id in ids:
        message = find_copy(broker.reader, msg_id, dlq)
        origin = _origin_topic(message) if message is not None else ""
        if origin:
            require(request, Operation.WRITE, Resource.topic(origin))


def _resend(
    request: HttpRequest,
    broker: Broker,
    group: str,
    records: dict[str, Any],
    before: dict[str, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Resend each posted id (a DLQ record's offsetMsgId, or a msgId); each success is
    audited under the message's msgId. The outcomes name the msgId the list shows."""
    outcomes: list[dict[str, Any]] = []
    for posted, message in records.items():
        shown = message.msg_id if message is not None else posted
        try:
            result = broker.resend_from_dlq(group, posted)
        except MQError as exc:
            outcomes.append({"msg_id": shown, "ok": False, "detail": str(exc)})
            continue
        sent = send_result(result)
        audit.record(
            request,
            "message.dlq_resend",
            "message",
            message.msg_id if message is not None else sent["msg_id"],
            new=resends.audit_value(group, message, sent),
        )
        again = message is not None and message.msg_id in before
        outcomes.append({"msg_id": sent["msg_id"], "ok": True, "result": sent, "again": again})
    return outcomes


@console_page(read_role=None, write_role=None)
def group_dlq(request: HttpRequest, name: str) -> HttpResponse:
    """The group's dead letters (``%DLQ%<group>``: ``READ`` on it), oldest first, 50 a page;
    selected ones can be resent to their original topic (``WRITE`` on it; POST ``msg_id``
    list: nothing is resent unless every one may be). When a selected message was resent
    from this DLQ before (:mod:`shared.resends`), nothing is resent: the page lists the earlier
    resends and asks again (POST ``again``)."""
    broker = get_broker()
    topic = dlq_topic_name(name)
    require(request, Operation.DESCRIBE, Resource.group(name))
    require(request, Operation.READ, Resource.topic(topic))
    info = broker.admin.get_group(name)
    exists = broker.metadata.topics.get(topic) is not None
    outcomes: list[dict[str, Any]] = []
    repeat: list[dict[str, Any]] = []
    ids: list[str] = []
    if request.method == "POST":
        ids = request.POST.getlist("msg_id")[:DLQ_PAGE]
        if not ids:
            messages.warning(request, "Select the messages to resend first.")
        if exists:
            _require_resend(request, broker, topic, ids)
        records = {i: find_copy(broker.reader, i, topic) if exists else None for i in ids}
        before = resends.previous_resends(name, [m for m in records.values() if m is not None])
        repeat = [
            {"msg_id": m.msg_id, "resent": before[m.msg_id]}
            for m in records.values()
            if m is not None and m.msg_id in before
        ]
        if not repeat or checkbox(request.POST, "again"):
            outcomes = _resend(request, broker, name, records, before)
            repeat = []
    now = broker.clock.now_ms()
    cursor = request.GET.get("cursor") or None
    rows: list[dict[str, Any]] = []
    next_cursor = None
    error = ""
    if exists:
        try:
            page = broker.browse(topic, 0, now, DLQ_PAGE, cursor)
        except MQError as exc:
            error = str(exc)
        else:
            history = resends.previous_resends(name, page.messages)
            rows = [_dlq_row(request, m) | {"resent": history.get(m.msg_id)} for m in page.messages]
            next_cursor = page.next_cursor
    return render(
        request,
        "webui/group_dlq.html",
        {
            "section": "groups",
            "info": info,
            "dlq_topic": topic,
            "exists": exists,
            "rows": rows,
            "may_resend": any(r["may_resend"] for r in rows),
            "next_cursor": next_cursor,
            "first_page": cursor is None,
            "outcomes": outcomes,
            "resent": sum(1 for o in outcomes if o["ok"]),
            "repeat": repeat,
            "repeat_ids": ids if repeat else [],
            "error": error,
            "count": broker.admin.topic_status(topic).message_count if exists else 0,
            "back": reverse("webui:group", args=[name]),
        },
    )
