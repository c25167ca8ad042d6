"""``/topics/``: list with search, create, edit, delete, per-queue offsets, send a message.

Input is checked by the REST API's serializers (same rules and messages as ``/api/v1``) and
every change is written to the audit log with the API's action names. What the user may see
and do is the authorizer's (:mod:`webui.access`): lists show the topics it may describe, the
topic page the buttons it may use.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html

from accounts import audit
from cairn import runtime
from mqcore.access.model import Operation, Resource, ResourceType
from mqcore.broker import Broker, TopicInfo
from mqcore.broker.view import subscribed_groups
from mqcore.errors import MQError, NotFoundError
from mqcore.metadata.topics import MAX_QUEUE_NUMS, TOPIC_FILTER_TYPES
from mqcore.validation import MAX_TOPIC_LENGTH
from shared import impact
from shared.addresses import born_host
from shared.serializers import tiered
from shared.serializers.messages import MessageInSerializer, message_from, send_result
from shared.serializers.topics import TopicCreateSerializer, TopicUpdateSerializer
from webui.access import (
    Refused,
    console_page,
    decide,
    describable_groups,
    describable_topics,
    describe,
    get_broker,
    may,
    may_create_some,
    require,
    role_needed,
)
from webui.format import format_pairs, human_duration_ms, parse_pairs
from webui.names import store_name
from webui.views.common import checkbox, mq_errors, submit_form, validate

PAGE_SIZE = 100
KINDS = ("normal", "retry", "dlq", "system")
PERMS = [
    (6, "6 · read + write"),
    (4, "4 · read only"),
    (2, "2 · write only"),
    (0, "0 · none (disabled)"),
    (7, "7 · read + write + inherit"),
    (5, "5 · read + inherit"),
    (3, "3 · write + inherit"),
    (1, "1 · inherit only"),
]
TOPIC_ALIASES = {"topic_name": "name", "topic": "name"}


def _topic_row(broker: Broker, info: TopicInfo) -> dict[str, Any] | None:
    try:
        status = broker.admin.topic_status(info.name)
    except NotFoundError:  # deleted meanwhile
        return None
    last = max((q.last_store_timestamp for q in status.queues), default=0)
    return {
        "info": info,
        "queues": len(status.queues),
        "messages": status.message_count,
        "last_store_timestamp": last,
    }


@console_page(read_role=None)
def topic_list(request: HttpRequest) -> HttpResponse:
    broker = get_broker()
    q = request.GET.get("q", "").strip()
    kind = request.GET.get("kind", "")
    topics = broker.admin.list_topics()
    shown = set(describable_topics(request, [t.name for t in topics]))
    topics = [t for t in topics if t.name in shown]
    counts = {k: sum(1 for t in topics if t.kind == k) for k in KINDS}
    if kind in KINDS:
        topics = [t for t in topics if t.kind == kind]
    else:
        kind = ""
        topics = [t for t in topics if t.kind != "system"]
    if q:
        needle = store_name(q).lower()  # Kafka's shop.orders finds the store's shop|orders
        topics = [t for t in topics if needle in t.name.lower()]
    page = Paginator(topics, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [r for r in (_topic_row(broker, info) for info in page.object_list) if r is not None]
    return render(
        request,
        "webui/topics.html",
        {
            "section": "topics",
            "rows": rows,
            "page": page,
            "q": q,
            "kind": kind,
            "counts": counts,
            "total": len(topics),
            "may_create": may_create_some(request, ResourceType.TOPIC),
        },
    )


def _topic_form_data(post: QueryDict, *, create: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """The form's fields as a serializer's input, and errors found while reading them."""
    errors: dict[str, str] = {}
    try:
        attributes = parse_pairs(post.get("attributes", ""))
    except ValueError as exc:
        attributes = {}
        errors["attributes"] = str(exc)
    data: dict[str, Any] = {
        "read_queue_nums": post.get("read_queue_nums", "").strip(),
        "write_queue_nums": post.get("write_queue_nums", "").strip(),
        "perm": post.get("perm", "6"),
        "order": "true" if checkbox(post, "order") else "false",
        "topic_filter_type": post.get("topic_filter_type", "SINGLE_TAG"),
        "attributes": attributes,
    }
    if create:
        data["name"] = store_name(post.get("name", "").strip())
    return data, errors


def _form_context(info: TopicInfo | None, post: QueryDict | None) -> dict[str, Any]:
    if post is not None:
        values = {
            "name": post.get("name", ""),
            "read_queue_nums": post.get("read_queue_nums", ""),
            "write_queue_nums": post.get("write_queue_nums", ""),
            "perm": int(post.get("perm", "6") or 6) if post.get("perm", "6").isdigit() else 6,
            "order": checkbox(post, "order"),
            "topic_filter_type": post.get("topic_filter_type", "SINGLE_TAG"),
            "attributes": post.get("attributes", ""),
        }
    elif info is not None:
        values = {
            "name": info.name,
            "read_queue_nums": info.read_queue_nums,
            "write_queue_nums": info.write_queue_nums,
            "perm": info.perm,
            "order": info.order,
            "topic_filter_type": info.topic_filter_type,
            "attributes": format_pairs(info.attributes),
        }
    else:
        values = {
            "name": "",
            "read_queue_nums": 8,
            "write_queue_nums": 8,
            "perm": 6,
            "order": False,
            "topic_filter_type": "SINGLE_TAG",
            "attributes": "",
        }
    return {
        "values": values,
        "perms": PERMS,
        "filter_types": sorted(TOPIC_FILTER_TYPES),
        "max_queue_nums": MAX_QUEUE_NUMS,
        "max_name_length": MAX_TOPIC_LENGTH,
    }


def _require_some_create(request: HttpRequest) -> None:
    if not may_create_some(request, ResourceType.TOPIC):
        cluster = Resource.cluster()
        reason = decide(request, Operation.CREATE, cluster).reason
        raise Refused(
            describe(Operation.CREATE, cluster), reason, role_needed(Operation.CREATE, cluster.type)
        )


@console_page(read_role=None, write_role=None)
def topic_create(request: HttpRequest) -> HttpResponse:
    """``CREATE`` on the cluster, or on the topic's name (an allow entry for ``orders.``*)."""
    broker = get_broker()
    _require_some_create(request)
    errors: dict[str, str] = {}
    if request.method == "POST":

        def create(valid: dict[str, Any]) -> HttpResponse:
            name = valid.pop("name")
            require(request, Operation.CREATE, Resource.cluster(), Resource.topic(name))
            info = broker.admin.create_topic(name, **valid)
            audit.record(request, "topic.create", "topic", name, new=info.settings())
            messages.success(request, f"Topic {name} created.")
            return redirect("webui:topic", name=name)

        parsed = _topic_form_data(request.POST, create=True)
        done, errors = submit_form(parsed, TopicCreateSerializer, TOPIC_ALIASES, create)
        if done is not None:
            return done
    context = _form_context(None, request.POST if request.method == "POST" else None)
    context.update({"section": "topics", "errors": errors, "creating": True})
    return render(request, "webui/topic_form.html", context, status=400 if errors else 200)


@console_page(read_role=None, write_role=None)
def topic_edit(request: HttpRequest, name: str) -> HttpResponse:
    """Fewer read queues strand the messages of the queues cut off: the form then shows them
    (messages per queue, groups with lag) and saves only once the user ticks the box."""
    broker = get_broker()
    require(request, Operation.ALTER, Resource.topic(name))
    info = broker.admin.get_topic(name)
    errors: dict[str, str] = {}

    def page(found: dict[str, Any] | None, status: int) -> HttpResponse:
        context = _form_context(info, request.POST if request.method == "POST" else None)
        context.update(
            {"section": "topics", "errors": errors, "creating": False, "info": info}
            | {"impact": found}
        )
        return render(request, "webui/topic_form.html", context, status=status)

    if request.method == "POST":

        def update(valid: dict[str, Any]) -> HttpResponse:
            found = impact.queue_shrink(
                broker, name, valid.get("read_queue_nums"), valid.get("write_queue_nums")
            )
            if found["at_risk"] and not checkbox(request.POST, "confirm_impact"):
                return page(found, 200)  # a question, not an error
            new = broker.admin.update_topic(name, **valid)
            old, changed = info.settings(), new.settings()
            if found["at_risk"]:
                changed["stranded"] = found
            audit.record(request, "topic.update", "topic", name, old=old, new=changed)
            stranded = f" {found['messages']} messages stranded." if found["at_risk"] else ""
            messages.success(request, f"Topic {name} saved.{stranded}")
            return redirect("webui:topic", name=name)

        parsed = _topic_form_data(request.POST, create=False)
        done, errors = submit_form(parsed, TopicUpdateSerializer, TOPIC_ALIASES, update)
        if done is not None:
            return done
    return page(None, 400 if errors else 200)


@console_page(read_role=None, write_role=None)
def topic_delete(request: HttpRequest, name: str) -> HttpResponse:
    """The page shows what the delete loses (messages per queue, groups with lag); typing
    the topic's name confirms it."""
    broker = get_broker()
    require(request, Operation.DELETE, Resource.topic(name))
    info = broker.admin.get_topic(name)
    status = broker.admin.topic_status(name)
    groups = subscribed_groups(broker.metadata, name)
    found = impact.topic_delete(broker, name)
    error = ""
    if request.method == "POST":
        if store_name(request.POST.get("confirm_name", "").strip()) != name:
            error = "Type the topic's name exactly to confirm."
        else:
            try:
                broker.admin.delete_topic(name)
            except MQError as exc:
                error = str(exc)
            else:
                old = info.settings() | {"impact": found}
                audit.record(request, "topic.delete", "topic", name, old=old)
                lost = f" {found['messages']} messages lost." if found["messages"] else ""
                messages.success(request, f"Topic {name} deleted.{lost}")
                return redirect("webui:topics")
    return render(
        request,
        "webui/topic_delete.html",
        {
            "section": "topics",
            "info": info,
            "status": status,
            "groups": groups,
            "impact": found,
            "error": error,
        },
        status=400 if error else 200,
    )


def _send_form_defaults() -> dict[str, Any]:
    return {
        "keys": "",
        "tag": "",
        "properties": "",
        "body": "",
        "body_encoding": "text",
        "queue_id": "",
        "delay_level": "0",
    }


def _delay_choices(broker: Broker) -> list[tuple[int, str]]:
    return [(0, "none")] + [
        (level, f"{level} · {human_duration_ms(ms)}")
        for level, ms in enumerate(broker.store.delay_levels_ms, start=1)
    ]


def _topic_context(request: HttpRequest, broker: Broker, info: TopicInfo) -> dict[str, Any]:
    status = broker.admin.topic_status(info.name)
    rt = runtime.current()
    tier = {row["queue_id"]: row for row in tiered.queue_rows(rt, info.name)}
    groups = []
    topic = Resource.topic(info.name)
    for group in describable_groups(request, subscribed_groups(broker.metadata, info.name)):
        try:
            lag = broker.admin.group_lag(group, info.name)
        except NotFoundError:
            groups.append({"name": group, "lag": None, "lag_ms": None, "known": False})
            continue
        groups.append(
            {"name": group, "lag": lag.total_lag, "lag_ms": lag.max_lag_ms, "known": True}
        )
    return {
        "section": "topics",
        "info": info,
        "status": status,
        "queues": [
            {
                "queue_id": q.queue_id,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
                "count": q.max_offset - q.min_offset,
                "last_store_timestamp": q.last_store_timestamp,
                "tier": tier.get(q.queue_id),
            }
            for q in status.queues
        ],
        "tier_enabled": rt.tiered is not None,
        "last_store_timestamp": max((q.last_store_timestamp for q in status.queues), default=0),
        "groups": groups,
        "queue_choices": range(max(info.write_queue_nums, info.read_queue_nums, 1)),
        "delay_choices": _delay_choices(broker),
        "send": _send_form_defaults(),
        "max_body_bytes": broker.store.config.max_message_size,
        "send_errors": {},
        "allowed": {
            "read": may(request, Operation.READ, topic),
            "write": may(request, Operation.WRITE, topic),
            "alter": may(request, Operation.ALTER, topic),
            "delete": may(request, Operation.DELETE, topic),
        },
    }


@console_page(read_role=None)
def topic_detail(request: HttpRequest, name: str) -> HttpResponse:
    broker = get_broker()
    require(request, Operation.DESCRIBE, Resource.topic(name))
    info = broker.admin.get_topic(name)
    return render(request, "webui/topic.html", _topic_context(request, broker, info))


def _send_data(post: QueryDict) -> tuple[dict[str, Any], dict[str, str]]:
    errors: dict[str, str] = {}
    encoding = post.get("body_encoding", "text")
    body: Any = post.get("body", "")
    if encoding == "json":
        try:
            body = json.loads(body)
        except ValueError as exc:
            errors["body"] = f"not valid JSON: {exc}"
    try:
        properties = parse_pairs(post.get("properties", ""))
    except ValueError as exc:
        properties = {}
        errors["properties"] = str(exc)
    data: dict[str, Any] = {"body": body, "body_encoding": encoding, "properties": properties}
    keys = post.get("keys", "").strip()
    if keys:
        data["keys"] = keys
    if post.get("tag", "").strip():
        data["tag"] = post.get("tag", "").strip()
    if post.get("queue_id", "").strip():
        data["queue_id"] = post.get("queue_id", "").strip()
    data["delay_level"] = post.get("delay_level", "0").strip() or "0"
    return data, errors


@console_page(read_role=None, write_role=None)
def topic_send(request: HttpRequest, name: str) -> HttpResponse:
    """POST: send one message to the topic (``WRITE``); the page shows where it was stored."""
    broker = get_broker()
    require(request, Operation.WRITE, Resource.topic(name))
    info = broker.admin.get_topic(name)
    if request.method != "POST":
        return redirect("webui:topic", name=name)
    data, errors = _send_data(request.POST)
    if not errors:
        valid, errors = validate(MessageInSerializer, data)
        if valid is not None:
            try:
                (result,) = broker.send(name, [message_from(valid)], born_host=born_host(request))
            except MQError as exc:
                errors = mq_errors(exc)
            else:
                audit.record(
                    request,
                    "message.send",
                    "topic",
                    name,
                    new={"count": 1, "msg_ids": [result.msg_id]},
                )
                sent = send_result(result)
                link = reverse("webui:message", args=[result.offset_msg_id])
                where = (
                    f"delayed (level {valid['delay_level']}), then queue {result.queue_id}"
                    if result.delayed
                    else f"queue {result.queue_id} at offset {result.queue_offset}"
                )
                messages.success(
                    request,
                    format_html(
                        'Sent <a href="{}" class="mono">{}</a> to {}.', link, sent["msg_id"], where
                    ),
                    extra_tags="inline send-result",  # shown in the send card (topic.html)
                )
                return redirect(reverse("webui:topic", args=[name]) + "#send")
    context = _topic_context(request, broker, info)
    context["send"] = {k: request.POST.get(k, v) for k, v in _send_form_defaults().items()}
    context["send_errors"] = errors
    return render(request, "webui/topic.html", context, status=400)
