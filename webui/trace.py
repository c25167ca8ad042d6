"""The live trace's protocol, without the transport: parse a subscribe frame, match events,
and build the ``message`` frames (a message with its trace) from broker reads.

The WebSocket consumer (:mod:`webui.consumers`) and the no-JavaScript trace page both use it.
Frames are documented in README.md ("Live trace protocol"); in short, the client's first frame
is ``{"topic": str | null, "key": str, "begin": ms, "end": ms | null, "limit"?: n}`` and the
server answers with frames whose ``type`` is ``message``, ``progress``, ``done`` or ``error``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mqcore.broker import Broker
from mqcore.errors import ValidationError as MQValidationError
from mqcore.message import MessageExt
from mqcore.validation import validate_topic
from webui.format import body_preview
from webui.names import store_name

#: Most stored matches a subscription backfills (the frame's ``limit``; default below).
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
MAX_KEY_LENGTH = 1024
#: Longest subscribe frame (characters); a real one is a few hundred. Longer frames get
#: ``bad_request`` (rule ``max_size``) before they are parsed. The WebSocket server itself
#: drops the connection on a message above ``webui.routing.MAX_MESSAGE_BYTES``.
MAX_FRAME_CHARS = 16 * 1024
#: Deepest nesting of arrays and objects a frame may have (a real one has 1): deeper frames
#: get ``bad_request`` (rule ``depth``) without being parsed, so a frame of thousands of
#: ``[`` never reaches the JSON parser's recursion.
MAX_FRAME_DEPTH = 8
_FIELDS = {"topic", "key", "begin", "end", "limit"}
_TIME_MAX = 2**62


class TraceRequestError(ValueError):
    """A subscribe frame the server refuses: becomes an ``error`` frame."""

    def __init__(self, field: str, rule: str, detail: str) -> None:
        super().__init__(detail)
        self.field = field
        self.rule = rule
        self.detail = detail

    def frame(self) -> dict[str, Any]:
        return error_frame("bad_request", self.detail, field=self.field, rule=self.rule)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One subscription: messages whose KEYS hold ``key`` (or whose msgId is ``key``), of
    ``topic`` (None: every topic but the broker's internal ones), stored in [begin, end]
    (``end`` None: open, follow forever)."""

    topic: str | None
    key: str
    begin: int
    end: int | None
    limit: int = DEFAULT_LIMIT

    def matches(self, event: dict[str, Any]) -> bool:
        """Does a ``store.appended`` event (see :mod:`webui.bridge`) belong to this trace?"""
        if self.topic is not None and event.get("topic") != self.topic:
            return False
        stored = event.get("store_timestamp", 0)
        if stored < self.begin or (self.end is not None and stored > self.end):
            return False
        keys = event.get("keys") or ""
        return self.key in keys.split(" ") or event.get("uniq_key") == self.key

    @property
    def query_end(self) -> int:
        return self.end if self.end is not None else _TIME_MAX

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "key": self.key,
            "begin": self.begin,
            "end": self.end,
            "limit": self.limit,
        }


def _int(data: dict[str, Any], name: str, *, lo: int, hi: int) -> int:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceRequestError(name, "type", f"{name}: must be an integer (epoch ms)")
    if not lo <= value <= hi:
        raise TraceRequestError(name, "range", f"{name}: must be {lo}..{hi} (got {value})")
    return value


def parse_request(text: str | None) -> TraceRequest:
    """A subscribe frame's text as a request.

    Raises:
        TraceRequestError: not JSON, not an object, unknown or missing fields, wrong types, a
            bad topic name, a blank key or one with whitespace, ``end`` before ``begin``.
    """
    if not text:
        raise TraceRequestError("", "malformed", "send a JSON object as a text frame")
    if len(text) > MAX_FRAME_CHARS:
        raise TraceRequestError(
            "", "max_size", f"the frame has {len(text)} characters; at most {MAX_FRAME_CHARS}"
        )
    if _nested_deeper_than(text, MAX_FRAME_DEPTH):
        raise TraceRequestError(
            "", "depth", f"the frame nests arrays or objects deeper than {MAX_FRAME_DEPTH}"
        )
    try:
        data = json.loads(text)
    except ValueError:
        raise TraceRequestError("", "malformed", "the frame is not valid JSON") from None
    if not isinstance(data, dict):
        raise TraceRequestError("", "type", "the frame must be a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise TraceRequestError(
            unknown[0], "unknown_field", f"{unknown[0]}: not a field (expected {sorted(_FIELDS)})"
        )
    for name in ("key", "begin"):
        if name not in data:
            raise TraceRequestError(name, "required", f"{name}: required")
    key = data["key"]
    if not isinstance(key, str) or not key.strip():
        raise TraceRequestError("key", "blank", "key: must be a non-empty string")
    if any(ch.isspace() for ch in key):
        raise TraceRequestError(
            "key", "characters", "key: may not contain whitespace (KEYS are space-separated)"
        )
    if len(key) > MAX_KEY_LENGTH:
        raise TraceRequestError("key", "max_length", f"key: at most {MAX_KEY_LENGTH} characters")
    topic = data.get("topic")
    if topic == "":
        topic = None
    if topic is not None:
        if not isinstance(topic, str):
            raise TraceRequestError("topic", "type", "topic: must be a string or null")
        topic = store_name(topic)  # Kafka's spelling, as everywhere in the console
        try:
            validate_topic(topic)
        except MQValidationError as exc:
            raise TraceRequestError("topic", exc.rule, str(exc)) from None
    begin = _int(data, "begin", lo=0, hi=_TIME_MAX)
    end = None if data.get("end") is None else _int(data, "end", lo=0, hi=_TIME_MAX)
    if end is not None and end < begin:
        raise TraceRequestError("end", "before_begin", "end: must not be before begin")
    limit = DEFAULT_LIMIT if data.get("limit") is None else _int(data, "limit", lo=1, hi=MAX_LIMIT)
    return TraceRequest(topic, key, begin, end, limit)


def _nested_deeper_than(text: str, limit: int) -> bool:
    """Do JSON arrays or objects in ``text`` nest deeper than ``limit``? One pass, brackets
    inside strings ignored; not a validation (the parser does that)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def error_frame(code: str, detail: str, *, field: str = "", rule: str = "") -> dict[str, Any]:
    """``code``: ``bad_request`` (the subscribe frame), ``forbidden`` (a topic the user may
    not read), ``not_found`` (unknown topic), ``unavailable`` (the broker is not running),
    ``broker_error`` (a read failed; the subscription goes on)."""
    return {"type": "error", "code": code, "detail": detail, "field": field, "rule": rule}


def traceable_topics(broker: Broker) -> list[str]:
    """Topics a topic-less trace watches: every topic but the broker's internal ones (retry
    and DLQ topics are kept: their copies carry the same keys)."""
    return [t.name for t in broker.admin.list_topics(include_system=False)]


def message_payload(message: MessageExt, broker: Broker) -> dict[str, Any]:
    """The ``message`` object of a frame: the record, and its trace (born, stored, and each
    subscribing group's consume state). Blocking: run it in a worker thread."""
    view = broker.view_message(message.offset_msg_id)
    groups = [
        {
            "group": s.group,
            "state": str(s.state),
            "committed_offset": s.committed_offset,
            "reconsume_times": s.reconsume_times,
        }
        for s in (view.statuses if view is not None else ())
    ]
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
        "body": preview,
        "body_encoding": encoding,
        "body_size": len(message.body),
        "trace": {
            "born": {"host": str(message.born_host), "timestamp": message.born_timestamp},
            "stored": {
                "broker": broker.broker_name,
                "host": str(message.store_host),
                "topic": message.topic,
                "queue_id": message.queue_id,
                "queue_offset": message.queue_offset,
                "commitlog_offset": message.phys_offset,
                "store_timestamp": message.store_timestamp,
                "reconsume_times": message.reconsume_times,
            },
            "groups": groups,
        },
    }


def backfill(broker: Broker, request: TraceRequest, topic: str, limit: int) -> list[MessageExt]:
    """Stored matches of one topic (from the IndexFile), oldest first. Blocking."""
    found = broker.query_by_key(topic, request.key, request.begin, request.query_end, limit)
    return [m for m in found if request.key in m.keys or m.msg_id == request.key]
