"""``/messages/``: search (by id, key, topic + time, queue + offset), the streamed results, and
one message's detail with each group's consume status.

Each needs ``READ`` on the message's topic (:mod:`webui.access`): a search naming a topic
the user may not read is refused, one without a topic finds only readable topics' messages,
and the topic select lists the topics the user may describe.

Without JavaScript the search page runs the search and renders the results. With it, the
form streams them from ``/messages/stream/`` (one JSON event per line, see
:mod:`webui.search`) and the table fills in with a progress bar.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import (
    HttpRequest,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render

from cairn import runtime
from mqcore.access.model import Operation, Resource
from mqcore.broker import Broker
from mqcore.errors import NotFoundError
from mqcore.format.properties import is_system_property
from mqcore.kafka_properties import is_reserved_property, produced_headers
from mqcore.message import MessageExt
from shared.serializers.messages import header_dict
from webui import access, search
from webui.access import Refused, console_page, describable_topics, get_broker, may, require
from webui.format import body_views
from webui.names import store_name

BATCH_MAX_EVENTS = 100
BATCH_MAX_S = 0.1
TABS = (
    ("key", "By key"),
    ("id", "By message id"),
    ("time", "By topic + time"),
    ("queue", "By queue + offset"),
)


def _topic_names(request: HttpRequest, broker: Broker) -> list[str]:
    return describable_topics(
        request, [t.name for t in broker.admin.list_topics(include_system=False)]
    )


def _reader(request: HttpRequest) -> search.TopicCheck:
    return lambda topic: may(request, Operation.READ, Resource.topic(topic))


def _require_read(request: HttpRequest, query: search.SearchQuery) -> None:
    if query.topic and query.mode != "id":
        require(request, Operation.READ, Resource.topic(query.topic))


def _form_values(
    request: HttpRequest, query: search.SearchQuery | None, now: int
) -> dict[str, Any]:
    g = request.GET
    begin = query.begin if query else now - search.DEFAULT_RANGE_MS
    # An end left empty means "now, when the search runs"; only an explicit one is kept.
    explicit_end = bool((g.get("end_ms") or g.get("end") or "").strip())
    end = (query.end if query else None) if explicit_end else None
    return {
        "msg_id": g.get("msg_id", ""),
        "key": g.get("key", ""),
        "topic": store_name(g.get("topic", "").strip()),
        "tag": g.get("tag", ""),
        "queue_id": g.get("queue_id", "0"),
        "offset": g.get("offset", "0"),
        "limit": g.get("limit", str(search.DEFAULT_LIMIT)),
        "begin_ms": begin,
        "end_ms": end,
    }


@console_page(read_role=None)
def message_search(request: HttpRequest) -> HttpResponse:
    broker = get_broker()
    now = broker.clock.now_ms()
    query, errors = search.parse_query(request.GET, now)
    if query is not None:
        _require_read(request, query)
    mode = request.GET.get("mode") or request.GET.get("tab") or "key"
    if mode not in search.MODES:
        mode = "key"
    results: list[dict[str, Any]] = []
    done: dict[str, Any] | None = None
    error = ""
    if query is not None:
        for event in search.run(broker, query, _reader(request)):
            if event["type"] == "message":
                results.append(event["message"])
            elif event["type"] == "done":
                done = event
            elif event["type"] == "error":
                error = event["detail"]
        if query.mode == "id" and len(results) == 1 and request.GET.get("go") == "1":
            return redirect("webui:message", msg_id=results[0]["offset_msg_id"])
    return render(
        request,
        "webui/messages.html",
        {
            "section": "messages",
            "tabs": TABS,
            "mode": mode,
            "query": query,
            "errors": errors,
            "values": _form_values(request, query, now),
            "topics": _topic_names(request, broker),
            "results": results,
            "done": done,
            "error": error,
            "next_query": done.get("next") if done else None,
            "max_limit": search.MAX_LIMIT,
        },
        status=400 if errors else 200,
    )


def _next_batch(events: Iterator[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Up to 100 events or 100 ms of them; True when the search is over."""
    batch: list[dict[str, Any]] = []
    started = time.monotonic()
    for event in events:
        batch.append(event)
        if event["type"] in ("done", "error"):
            return batch, True
        if len(batch) >= BATCH_MAX_EVENTS or time.monotonic() - started >= BATCH_MAX_S:
            return batch, False
    return batch, True


async def message_stream(request: HttpRequest) -> HttpResponse:
    """``GET /messages/stream/?<the search form's parameters>``: NDJSON events."""
    user = await request.auser()
    if not user.is_authenticated:
        return JsonResponse({"detail": "log in first"}, status=401)
    if not await sync_to_async(access.may_enter)(request):
        return JsonResponse({"detail": "your account has no console role"}, status=403)
    broker = runtime.current().broker
    if broker is None or not broker.started:
        return JsonResponse({"detail": "the broker is not running"}, status=503)
    query, errors = search.parse_query(request.GET, broker.clock.now_ms())
    if query is None:
        return JsonResponse(
            {"detail": "invalid search", "errors": errors or {"mode": "required"}}, status=400
        )
    try:
        await sync_to_async(_require_read)(request, query)
    except Refused as exc:
        return JsonResponse({"detail": f"not allowed: {exc.what}: {exc.reason}"}, status=403)
    events = search.run(broker, query, _reader(request))

    async def lines() -> AsyncIterator[bytes]:
        while True:
            batch, over = await asyncio.to_thread(_next_batch, events)
            if batch:
                yield "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in batch).encode()
            if over:
                return

    response = StreamingHttpResponse(lines(), content_type="application/x-ndjson")
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    return response


def _find(broker: Broker, msg_id: str) -> MessageExt:
    if not msg_id or len(msg_id) > 64 or any(c not in "0123456789abcdefABCDEF" for c in msg_id):
        raise NotFoundError("msg_id", "format", f"{msg_id!r} is not a message id")
    message = broker.get_message(msg_id)
    if message is None:
        raise NotFoundError("msg_id", "not_found", f"no stored message has the id {msg_id}")
    return message


SYSTEM_FIELDS = (
    ("Topic", "topic"),
    ("Queue", "queue_id"),
    ("Queue offset", "queue_offset"),
    ("CommitLog offset", "phys_offset"),
    ("Record size", "store_size"),
    ("Body CRC", "body_crc"),
    ("Flag", "flag"),
    ("Sys flag", "sys_flag"),
    ("Reconsume times", "reconsume_times"),
    ("Prepared tx offset", "prepared_transaction_offset"),
)


def _readable(request: HttpRequest, broker: Broker, msg_id: str) -> MessageExt:
    message = _find(broker, msg_id)
    require(request, Operation.READ, Resource.topic(message.topic))
    return message


@console_page(read_role=None)
def message_detail(request: HttpRequest, msg_id: str) -> HttpResponse:
    broker = get_broker()
    message = _readable(request, broker, msg_id)
    view = broker.view_message(message.offset_msg_id)
    props = message.properties
    system_props = sorted((k, v) for k, v in props.items() if is_system_property(k))
    # The Kafka listener's own __kafka.* properties are neither: their headers are shown.
    user_props = sorted(
        (k, v)
        for k, v in props.items()
        if not is_system_property(k) and not is_reserved_property(k)
    )
    headers = produced_headers(props)
    return render(
        request,
        "webui/message.html",
        {
            "section": "messages",
            "m": message,
            "view": view,
            "home_topic": view.topic if view else message.topic,
            "statuses": [
                status
                for status in (view.statuses if view else ())
                if may(request, Operation.DESCRIBE, Resource.group(status.group))
            ],
            "fields": [(label, getattr(message, attr)) for label, attr in SYSTEM_FIELDS],
            "system_props": system_props,
            "user_props": user_props,
            "kafka_headers": None if headers is None else [header_dict(n, v) for n, v in headers],
            "body": body_views(message.body),
            "keys": message.keys,
            "broker_name": broker.broker_name,
            "trace_begin": max(0, message.store_timestamp - 60_000),
            "may_resend": may(request, Operation.WRITE, Resource.topic(view.topic))
            if view
            else False,
        },
    )


@console_page(read_role=None)
def message_body(request: HttpRequest, msg_id: str) -> HttpResponse:
    """The raw body as a download."""
    message = _readable(request, get_broker(), msg_id)
    response = HttpResponse(message.body, content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{message.msg_id}.bin"'
    return response
