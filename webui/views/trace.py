"""``/trace/``: follow a key live. The page's script speaks the ``/ws/trace/`` protocol
(:mod:`webui.consumers`); without JavaScript the page shows the stored matches only. Both
show only topics the user may read (:func:`webui.access.readable_topics`)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from mqcore.errors import MQError
from webui.access import console_page, get_broker, readable_topics
from webui.names import store_name
from webui.search import parse_time
from webui.trace import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    TraceRequest,
    TraceRequestError,
    backfill,
    message_payload,
    traceable_topics,
)

DEFAULT_LOOKBACK_MS = 3600 * 1000


@console_page(read_role=None)
def trace_page(request: HttpRequest) -> HttpResponse:
    broker = get_broker()
    now = broker.clock.now_ms()
    g = request.GET
    errors: dict[str, str] = {}
    try:
        begin = parse_time(g, "begin", now - DEFAULT_LOOKBACK_MS)
        end = parse_time(g, "end", None)
    except ValueError:
        errors["begin"] = "not a valid time"
        begin, end = now - DEFAULT_LOOKBACK_MS, None
    assert begin is not None
    try:
        limit = int(g.get("limit") or DEFAULT_LIMIT)
    except ValueError:
        limit = DEFAULT_LIMIT
    limit = max(1, min(MAX_LIMIT, limit))
    key = g.get("key", "").strip()
    topic = store_name(g.get("topic", "").strip())
    stored: list[dict[str, Any]] = []
    if topic and not readable_topics(request, [topic]):
        errors["topic"] = f"you may not read topic {topic}"
    if key and not errors:
        try:
            req = TraceRequest(topic or None, key, begin, end, limit)
            topics = [topic] if topic else readable_topics(request, traceable_topics(broker))
            for name in topics:
                if len(stored) >= limit:
                    break
                for message in backfill(broker, req, name, limit - len(stored)):
                    stored.append(message_payload(message, broker))
            stored.sort(key=lambda p: p["store_timestamp"], reverse=True)
        except (MQError, TraceRequestError) as exc:
            errors["key"] = str(exc)
    return render(
        request,
        "webui/trace.html",
        {
            "section": "trace",
            "topics": readable_topics(
                request, [t.name for t in broker.admin.list_topics(include_system=False)]
            ),
            "values": {
                "key": key,
                "topic": topic,
                "begin_ms": begin,
                "end_ms": end,
                "limit": limit,
            },
            "errors": errors,
            "stored": stored,
            "max_limit": MAX_LIMIT,
            "autostart": bool(key) and not errors,
        },
    )
