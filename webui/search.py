"""Message search: by message id, by key (+ time range), by topic + time range, by queue +
offset. Bounded by a declared limit, reported as a stream of events.

:func:`parse_query` checks the form's parameters; :func:`run` yields dict events, the same
for the streamed endpoint (one JSON object per line) and the server-rendered page:

* ``{"type": "progress", "fraction": 0..1, "scanned": n, "found": n, "detail": "..."}``
* ``{"type": "message", "message": {...row...}}``
* ``{"type": "done", "found": n, "limit": n, "complete": bool, "reason": ..., "next": {...}}``:
  ``reason`` is ``exhausted`` (everything in range was searched), ``limit`` (the declared
  limit was reached: ``next`` holds the parameters that continue, when the mode can), or
  ``budget`` (a tag filter scanned :data:`SCAN_BUDGET` messages without filling the limit);
* ``{"type": "error", "detail": "...", "field": "..."}``.

A key search also reads the data pipeline's archive for the part of the range older than the
CommitLog (:func:`cairn.archive.query_by_key`); such rows say ``archived``.

Reads go through the broker (``query_by_key``, ``browse``, ``get_message``) and the store's
``get_messages`` for queue reads (so the console's reads do not count as consumption).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cairn import archive
from mqcore.broker import Broker
from mqcore.broker.browse import decode_cursor, encode_cursor
from mqcore.errors import MQError
from mqcore.message import MessageExt
from mqcore.store.results import GetStatus
from mqcore.validation import validate_topic
from webui.format import body_preview
from webui.names import store_name
from webui.trace import traceable_topics

MODES = ("id", "key", "time", "queue")
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
SCAN_BUDGET = 50_000
CHUNK = 64
DEFAULT_RANGE_MS = 3600 * 1000
_MAX_MS = 2**62


@dataclass(frozen=True, slots=True)
class SearchQuery:
    mode: str
    msg_id: str = ""
    topic: str = ""
    key: str = ""
    tag: str = ""
    begin: int = 0
    end: int = 0
    queue_id: int = 0
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    cursor: str = ""

    def params(self, **changes: Any) -> dict[str, str]:
        """The query as form parameters (to link a continuation)."""
        q = replace(self, **changes)
        base = {"mode": q.mode, "limit": str(q.limit)}
        by_mode = {
            "id": {"msg_id": q.msg_id},
            "key": {"key": q.key, "topic": q.topic, "begin_ms": str(q.begin), "end_ms": str(q.end)},
            "time": {
                "topic": q.topic,
                "begin_ms": str(q.begin),
                "end_ms": str(q.end),
                "cursor": q.cursor,
            },
            "queue": {"topic": q.topic, "queue_id": str(q.queue_id), "offset": str(q.offset)},
        }[q.mode]
        if q.tag and q.mode != "id":
            by_mode["tag"] = q.tag
        return {k: v for k, v in (base | by_mode).items() if v != ""}


@dataclass
class QueryErrors:
    errors: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, message: str) -> None:
        self.errors.setdefault(name, message)


def parse_time(params: Mapping[str, str], name: str, default: int | None) -> int | None:
    """``<name>_ms`` (epoch ms, set by the page's script in the browser's zone), else
    ``<name>`` as a ``datetime-local`` value read as UTC, else ``default``.

    Raises:
        ValueError: neither parses.
    """
    raw_ms = (params.get(f"{name}_ms") or "").strip()
    if raw_ms:
        value = int(raw_ms)
        if not 0 <= value < _MAX_MS:
            raise ValueError("out of range")
        return value
    raw = (params.get(name) or "").strip()
    if not raw:
        return default
    moment = dt.datetime.fromisoformat(raw)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def _int(
    params: Mapping[str, str], name: str, errors: QueryErrors, lo: int, hi: int, default: int
) -> int:
    raw = (params.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        errors.add(name, "must be a whole number")
        return default
    if not lo <= value <= hi:
        errors.add(name, f"must be {lo}..{hi}")
        return default
    return value


def parse_query(
    params: Mapping[str, str], now_ms: int
) -> tuple[SearchQuery | None, dict[str, str]]:
    """The search the parameters ask for, or None and the errors by field. No ``mode`` (or
    nothing filled in) is no search: ``(None, {})``."""
    mode = (params.get("mode") or "").strip()
    if mode not in MODES:
        return None, {}
    errors = QueryErrors()
    limit = _int(params, "limit", errors, 1, MAX_LIMIT, DEFAULT_LIMIT)
    topic = store_name((params.get("topic") or "").strip())
    tag = (params.get("tag") or "").strip()
    if topic:
        try:
            validate_topic(topic)
        except MQError as exc:
            errors.add("topic", str(exc))
    try:
        end = parse_time(params, "end", now_ms)
        begin = parse_time(params, "begin", (end or now_ms) - DEFAULT_RANGE_MS)
    except ValueError:
        errors.add("begin", "not a valid time")
        begin, end = now_ms - DEFAULT_RANGE_MS, now_ms
    assert begin is not None and end is not None
    if mode in ("key", "time") and begin > end:
        errors.add("end", "must not be before the start")
    query = SearchQuery(mode, topic=topic, tag=tag, begin=begin, end=end, limit=limit)
    if mode == "id":
        msg_id = (params.get("msg_id") or "").strip()
        if not msg_id:
            errors.add("msg_id", "enter a message id (msgId or offsetMsgId)")
        elif len(msg_id) > 64 or any(c not in "0123456789abcdefABCDEF" for c in msg_id):
            errors.add("msg_id", "a message id is up to 64 hexadecimal digits")
        query = replace(query, msg_id=msg_id)
    elif mode == "key":
        key = (params.get("key") or "").strip()
        if not key:
            errors.add("key", "enter a key")
        elif any(ch.isspace() for ch in key):
            errors.add("key", "one key, without spaces")
        query = replace(query, key=key)
    elif mode == "time":
        if not topic:
            errors.add("topic", "choose a topic")
        query = replace(query, cursor=(params.get("cursor") or "").strip()[:8192])
    else:
        if not topic:
            errors.add("topic", "choose a topic")
        queue_id = _int(params, "queue_id", errors, 0, 2**31 - 1, 0)
        offset = _int(params, "offset", errors, 0, 2**63 - 1, 0)
        query = replace(query, queue_id=queue_id, offset=offset)
    if errors.errors:
        return None, errors.errors
    return query, {}


def row(message: MessageExt, archived: bool = False) -> dict[str, Any]:
    """One result row (what the results table and the stream carry). ``archived``: found in
    the data pipeline's archive (cleanup deleted it from the CommitLog)."""
    preview, encoding = body_preview(message.body)
    return {
        "msg_id": message.msg_id,
        "offset_msg_id": message.offset_msg_id,
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "keys": list(message.keys),
        "tag": message.tags,
        "store_timestamp": message.store_timestamp,
        "born_timestamp": message.born_timestamp,
        "born_host": str(message.born_host),
        "body": preview,
        "body_encoding": encoding,
        "body_size": len(message.body),
        "reconsume_times": message.reconsume_times,
        "archived": archived,
    }


def _progress(fraction: float, scanned: int, found: int, detail: str) -> dict[str, Any]:
    return {
        "type": "progress",
        "fraction": round(max(0.0, min(1.0, fraction)), 4),
        "scanned": scanned,
        "found": found,
        "detail": detail,
    }


def _done(
    query: SearchQuery, found: int, reason: str, nxt: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "type": "done",
        "found": found,
        "limit": query.limit,
        "complete": reason == "exhausted",
        "reason": reason,
        "next": nxt,
    }


#: Whether the searching user may read a topic (``READ``).
TopicCheck = Callable[[str], bool]


def _every_topic(topic: str) -> bool:
    return True


def run(
    broker: Broker, query: SearchQuery, may_read: TopicCheck = _every_topic
) -> Iterator[dict[str, Any]]:
    """The search's events (see the module docstring). Blocking reads: iterate it in a
    worker thread when serving from an event loop.

    Only messages of topics ``may_read`` allows are found: a search without a topic skips
    the others as if they were not there. The caller refuses a search naming a topic the
    user may not read before it runs; here it finds nothing."""
    try:
        if query.topic and query.mode != "id":
            if not may_read(query.topic):
                yield {"type": "error", "detail": f"you may not read topic {query.topic}",
                       "field": "topic"}  # fmt: skip
                return
            broker.admin.get_topic(query.topic)
        searches = {"id": _by_id, "key": _by_key, "time": _by_time, "queue": _by_queue}
        yield from searches[query.mode](broker, query, may_read)
    except MQError as exc:
        yield {"type": "error", "detail": str(exc), "field": getattr(exc, "field", "")}


def _wanted(query: SearchQuery, message: MessageExt) -> bool:
    return not query.tag or message.tags == query.tag


def _by_id(broker: Broker, query: SearchQuery, may_read: TopicCheck) -> Iterator[dict[str, Any]]:
    yield _progress(0, 0, 0, "looking up the id")
    message = broker.get_message(query.msg_id)
    if message is not None and not may_read(message.topic):
        message = None
    if message is None:  # an id names one message: not finding it is the answer, not a range
        yield {"type": "error", "detail": f"no message with id {query.msg_id}", "field": "msg_id"}
        return
    yield {"type": "message", "message": row(message)}
    yield _progress(1, 1, 1, "")
    yield _done(query, 1, "exhausted")


def _by_key(broker: Broker, query: SearchQuery, may_read: TopicCheck) -> Iterator[dict[str, Any]]:
    topics = [query.topic] if query.topic else list(filter(may_read, traceable_topics(broker)))
    found = 0
    for index, topic in enumerate(topics):
        remaining = query.limit - found
        yield _progress(index / max(1, len(topics)), index, found, f"topic {topic}")
        matches = archive.query_by_key(broker, topic, query.key, query.begin, query.end, remaining)
        for message, archived in matches:
            if _wanted(query, message):
                found += 1
                yield {"type": "message", "message": row(message, archived)}
        if found >= query.limit:
            yield _progress(1, index + 1, found, "")
            yield _done(query, found, "limit")
            return
    yield _progress(1, len(topics), found, "")
    yield _done(query, found, "exhausted")


def _by_time(broker: Broker, query: SearchQuery, may_read: TopicCheck) -> Iterator[dict[str, Any]]:
    found = scanned = 0
    cursor = query.cursor or None
    span = max(1, query.end - query.begin)
    yield _progress(0, 0, 0, f"reading every queue of {query.topic}")
    while True:
        page = broker.browse(
            query.topic, query.begin, query.end, min(CHUNK, query.limit - found), cursor
        )
        for index, message in enumerate(page.messages):
            scanned += 1
            if not _wanted(query, message):
                continue
            found += 1
            yield {"type": "message", "message": row(message)}
            if found >= query.limit:
                rest = page.messages[index + 1 :]
                if page.exhausted and not any(_wanted(query, m) for m in rest):
                    yield _done(query, found, "exhausted")
                else:
                    resume = _resume_cursor(broker, query, page.next_cursor, rest)
                    yield _done(query, found, "limit", query.params(cursor=resume))
                return
        last = page.messages[-1].store_timestamp if page.messages else query.end
        yield _progress((last - query.begin) / span, scanned, found, "")
        if page.exhausted or not page.messages:
            yield _done(query, found, "exhausted")
            return
        if scanned >= SCAN_BUDGET:
            yield _done(query, found, "budget", query.params(cursor=page.next_cursor or ""))
            return
        cursor = page.next_cursor


def _resume_cursor(
    broker: Broker, query: SearchQuery, page_cursor: str | None, rest: tuple[MessageExt, ...]
) -> str:
    """Where the next page starts: the page's own cursor, unless the limit cut the page short
    (a tag filter skipped some): then each queue resumes at its first message not shown."""
    if not rest and page_cursor:
        return page_cursor
    if page_cursor:
        offsets = decode_cursor(page_cursor, query.topic, query.begin, query.end)
    else:  # the page was the last one: queues without a message left are at their end
        offsets = {q.queue_id: q.max_offset for q in broker.admin.topic_status(query.topic).queues}
    for message in rest:
        queue = message.queue_id
        offsets[queue] = min(offsets.get(queue, message.queue_offset), message.queue_offset)
    return encode_cursor(query.topic, query.begin, query.end, offsets)


def _by_queue(broker: Broker, query: SearchQuery, may_read: TopicCheck) -> Iterator[dict[str, Any]]:
    queue_ids = [q.queue_id for q in broker.admin.topic_status(query.topic).queues]
    if query.queue_id not in queue_ids:  # else "complete", as if the queue were only empty
        count = len(queue_ids)
        yield {
            "type": "error",
            "detail": f"queue {query.queue_id} does not exist; topic {query.topic} has "
            f"{count} queue{'' if count == 1 else 's'}",
            "field": "queue_id",
        }
        return
    store = broker.store
    low = store.min_offset(query.topic, query.queue_id)
    high = store.max_offset(query.topic, query.queue_id)
    offset = max(query.offset, low)
    found = scanned = 0
    total = max(1, min(high - offset, query.limit if not query.tag else SCAN_BUDGET))
    yield _progress(0, 0, 0, f"queue {query.queue_id}: offsets {low}..{high}")
    while offset < high:
        got = store.get_messages("", query.topic, query.queue_id, offset, CHUNK)
        if got.status is not GetStatus.FOUND and got.next_offset <= offset:
            break
        for message in got.messages:
            scanned += 1
            if _wanted(query, message):
                found += 1
                yield {"type": "message", "message": row(message)}
                if found >= query.limit:
                    nxt_offset = message.queue_offset + 1
                    reason = "limit" if nxt_offset < high else "exhausted"
                    yield _done(query, found, reason, query.params(offset=nxt_offset))
                    return
        offset = max(got.next_offset, offset + 1)
        yield _progress(scanned / total, scanned, found, "")
        if scanned >= SCAN_BUDGET:
            yield _done(query, found, "budget", query.params(offset=offset))
            return
    yield _done(query, found, "exhausted")
