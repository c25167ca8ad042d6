"""How Kafka's data model maps onto Cairn's RocketMQ store (kafka-protocol.md section 5).

=======================  ===================================================================
Kafka                    Cairn store
=======================  ===================================================================
topic ``a.b-c_1``        topic ``a|b-c_1`` (``.`` ↔ ``|``, see *Names* below)
partition p              queue id p; partition count = the topic's ``readQueueNums``
offset                   ConsumeQueue offset (both start at 0, +1 per record)
log start / high mark    queue min offset / queue max offset (next to write)
record (one per record)  one CommitLog message; a produced batch of N records is appended
                         as N messages in one contiguous append (consecutive offsets)
record value             BODY
record key               ``KEYS`` (indexed: the console and REST find it by key)
record headers           user properties (one property per header)
record timestamp         BORNTIMESTAMP (Kafka CreateTime)
group offsets            ``consumerOffset.json`` entries ``topic@group → {queue: next}``
group membership         in memory only (``coordinator.py``)
=======================  ===================================================================

**Names.** Kafka topic names are ``[a-zA-Z0-9._-]{1,249}``; RocketMQ's are
``[%|a-zA-Z0-9_-]{1,127}`` with no ``.``. Kafka names map onto store names by turning
every ``.`` into ``|``: both sides' other characters are the same, ``|`` never occurs in a
Kafka name, so the mapping is a bijection, keeps the length, and no Kafka name can land on
``%RETRY%…``/``%DLQ%…`` (``%`` is illegal in Kafka). ``|`` was chosen over a
percent-escape (``%2E``) because topic names travel in REST URLs, where ``%2E`` would be
decoded by the HTTP layer into ``.`` again. A Kafka name longer than 127 characters, or
with characters outside Kafka's set, is refused with INVALID_TOPIC_EXCEPTION (17). Store
topics whose name contains ``%`` (retry, DLQ and the like) or that are system topics are
not shown to Kafka clients.

Group ids are arbitrary strings in Kafka. They map the same way (``.`` → ``|``), and any
other character outside ``[a-zA-Z0-9_-]`` (``|`` and ``%`` included) becomes ``%XX`` per
UTF-8 byte, e.g. ``my group@x`` → ``my%20group%40x``. A group id whose store name would be
longer than 120 characters (or the empty id) is refused with INVALID_GROUP_ID (24).

**Records.** Everything needed to rebuild the Kafka record losslessly is kept in the
message, with reserved property names under the ``__kafka.`` prefix when the plain mapping
is not enough:

==================  =======================================================================
property            when it is written, what it holds
==================  =======================================================================
``KEYS``            the key as text, when it is valid UTF-8 without ``\\x01``/``\\x02``
``__kafka.key``     ``b64:<base64>`` of the raw key, when ``KEYS`` alone is not lossless
                    (empty key, a space in it, binary bytes)
``__kafka.value``   ``null`` or ``empty``: the record's value was null (tombstone) or
                    empty; RocketMQ needs a non-empty body, so the body is ``b"\\x00"``
``<header name>``   each header, as a plain user property, when every header has a
                    unique, non-reserved name and a non-empty text value
``__kafka.hdrs``    JSON list of those header names in their order
``__kafka.hblk``    ``b64:<base64>`` of the Kafka header block, when the headers do not
                    fit the plain form (duplicates, null/empty/binary values, reserved
                    names); the ones that do fit are still mirrored as properties
==================  =======================================================================

A message that did not come from Kafka (REST, RocketMQ clients) is served as: key =
``KEYS`` as UTF-8 (None without keys), value = body, headers = its user properties (sorted
by name), timestamp = born timestamp.

Thread-safety: pure functions.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from mqcore import kafka_properties
from mqcore.broker.types import OutgoingMessage
from mqcore.format.msgid import HostAddress
from mqcore.format.properties import is_system_property
from mqcore.message import MessageExt
from mqcore.validation import MAX_GROUP_LENGTH, MAX_TOPIC_LENGTH

from .primitives import unzigzag
from .record_codec import Header, Record, RecordLike, _decode_headers, _encode_headers

__all__ = [
    "EMPTY_BODY",
    "PROPERTY_PREFIX",
    "from_store_group",
    "from_store_topic",
    "kafka_topic_error",
    "message_to_record",
    "record_to_message",
    "to_store_group",
    "to_store_topic",
]

# -- names -------------------------------------------------------------------------------

MAX_KAFKA_TOPIC_LENGTH = 249
_KAFKA_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_GROUP_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_HEX = frozenset("0123456789ABCDEFabcdef")


def kafka_topic_error(name: str | None) -> str | None:
    """Why ``name`` cannot be a Kafka topic on Cairn, or None when it can.

    The reasons are Kafka's (``Topic.validate``) plus Cairn's 127-character store limit.
    """
    if not name:
        return "a topic name must not be empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > MAX_KAFKA_TOPIC_LENGTH:
        return f"topic name is longer than {MAX_KAFKA_TOPIC_LENGTH} characters"
    if not _KAFKA_TOPIC.fullmatch(name):
        return f"topic name {name!r} may only contain ASCII letters, digits, '.', '_' and '-'"
    if len(name) > MAX_TOPIC_LENGTH:
        return f"topic name is longer than Cairn's limit of {MAX_TOPIC_LENGTH} characters"
    return None


def to_store_topic(name: str) -> str:
    """The store topic for a (valid, see :func:`kafka_topic_error`) Kafka topic name."""
    return name.replace(".", "|")


def from_store_topic(name: str) -> str | None:
    """The Kafka name of a store topic, or None if Kafka clients must not see it."""
    if "%" in name or "." in name:
        return None
    kafka = name.replace("|", ".")
    return kafka if kafka_topic_error(kafka) is None else None


def to_store_group(group_id: str) -> str | None:
    """The store group name of a Kafka group id, or None when it cannot have one (empty,
    or longer than 120 characters once escaped)."""
    if not group_id:
        return None
    name = escape_group(group_id)
    return name if len(name) <= MAX_GROUP_LENGTH else None


def escape_group(group_id: str) -> str:
    """``group_id`` escaped as store group names are, whatever its length. Character by
    character, so the escape of a prefix is a prefix of the escape (ACL name prefixes)."""
    if all(ch in _GROUP_SAFE for ch in group_id):
        return group_id
    parts = []
    for ch in group_id:
        if ch in _GROUP_SAFE:
            parts.append(ch)
        elif ch == ".":
            parts.append("|")
        else:
            parts.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(parts)


def from_store_group(name: str) -> str | None:
    """The Kafka group id of a store group name, or None if it is not an escaped id."""
    if "%" not in name:
        return name.replace("|", ".")
    out = bytearray()
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "%":
            pair = name[i + 1 : i + 3]
            if len(pair) != 2 or not set(pair) <= _HEX:
                return None
            out.append(int(pair, 16))
            i += 3
            continue
        out += b"." if ch == "|" else ch.encode()
        i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


# -- records -----------------------------------------------------------------------------

# The names live in mqcore.kafka_properties, which REST and the console read them with.
PROPERTY_PREFIX = kafka_properties.PROPERTY_PREFIX
P_KEY = PROPERTY_PREFIX + "key"
P_VALUE = PROPERTY_PREFIX + "value"
P_HEADER_NAMES = kafka_properties.HEADER_NAMES
P_HEADER_BLOCK = kafka_properties.HEADER_BLOCK
_KEYS = "KEYS"
_B64 = "b64:"
EMPTY_BODY = b"\x00"
"""Body stored for a null or empty Kafka value (RocketMQ refuses empty bodies)."""
_BAD_TEXT = ("\x01", "\x02")
_PLAIN_NAMES = frozenset({_KEYS, "UNIQ_KEY"})


def _text(raw: bytes) -> str | None:
    """``raw`` as property-safe text, or None."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\x01" in text or "\x02" in text:
        return None
    return text


def _b64(raw: bytes) -> str:
    return _B64 + base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes | None:
    if not text.startswith(_B64):
        return None
    try:
        return base64.b64decode(text[len(_B64) :], validate=True)
    except (binascii.Error, ValueError):
        return None


def _plain_header(name: str, value: bytes | None, seen: set[str]) -> str | None:
    """The property value for a header that can be a plain property, else None."""
    if (
        not name
        or value is None
        or not value
        or name in seen
        or is_system_property(name)
        or name.startswith(PROPERTY_PREFIX)
        or any(c in name for c in _BAD_TEXT)
    ):
        return None
    try:
        name.encode("utf-8")  # header names decoded with surrogateescape may not be text
    except UnicodeEncodeError:
        return None
    return _text(value)


def _header_properties(headers: Sequence[Header], props: dict[str, str]) -> None:
    seen: set[str] = set()
    names: list[str] = []
    lossless = True
    for name, value in headers:
        text = _plain_header(name, value, seen)
        seen.add(name)
        if text is None:
            lossless = False
            continue
        props[name] = text
        names.append(name)
    if lossless:
        props[P_HEADER_NAMES] = json.dumps(names, ensure_ascii=True, separators=(",", ":"))
    else:
        props[P_HEADER_BLOCK] = _b64(_encode_headers(headers))


class _OutgoingBuilder:
    """Same slots as the frozen :class:`OutgoingMessage`: filled, then its ``__class__`` set,
    it is an ordinary instance (``mqcore.broker.sending`` builds ``Placed`` the same way).
    The frozen dataclass ``__init__`` sets its nine fields through ``object.__setattr__``:
    ~3.5 us a record, as much as the rest of the produce handler's per-record work, for
    fields that are all given here (no defaults or checks are skipped: it has none)."""

    __slots__ = OutgoingMessage.__slots__


assert _OutgoingBuilder.__slots__ == tuple(f.name for f in fields(OutgoingMessage))


def stored_body(value: bytes | None) -> bytes:
    """The body :func:`record_to_message` stores for a record value."""
    return value or EMPTY_BODY


def record_to_message(record: Record, partition: int) -> OutgoingMessage:
    """The message that stores one produced Kafka record in ``partition``.

    The hot path: a record with a short text key, a value and no headers costs one
    OutgoingMessage (built without the dataclass ``__init__``) and no property work.
    """
    key, value, headers = record.key, record.value, record.headers
    props: dict[str, str] | None = None
    keys: str = ""
    if key is not None:
        text = _text(key)
        if text is not None:
            keys = text
        if text is None or not text or " " in text:
            props = {P_KEY: _b64(key)}
    if value is None or not value:
        props = props or {}
        props[P_VALUE] = "null" if value is None else "empty"
        value = EMPTY_BODY
    if headers:
        props = props or {}
        _header_properties(headers, props)
    m: Any = _OutgoingBuilder()
    m.body = value
    m.tag = None
    m.keys = keys
    m.properties = props
    m.queue_id = partition
    m.sharding_key = None
    m.delay_level = 0
    m.flag = 0
    m.born_timestamp = record.timestamp
    m.__class__ = OutgoingMessage
    return m  # type: ignore[no-any-return]


def _headers_of(props: Mapping[str, str]) -> Sequence[Header]:
    block = props.get(P_HEADER_BLOCK)
    if block is not None:
        raw = _unb64(block)
        if raw is not None:
            decoded = _decode_header_block(raw)
            if decoded is not None:
                return decoded
    names = props.get(P_HEADER_NAMES)
    if names is not None:
        try:
            listed = json.loads(names)
        except ValueError:
            listed = None
        if isinstance(listed, list):
            return tuple(
                (str(n), props[n].encode()) for n in listed if isinstance(n, str) and n in props
            )
    return tuple(
        (name, value.encode())
        for name, value in sorted(props.items())
        if not is_system_property(name) and not name.startswith(PROPERTY_PREFIX)
    )


def _decode_header_block(raw: bytes) -> tuple[Header, ...] | None:
    try:
        count, pos = 0, 0
        shift = 0
        while True:  # the header count, a zigzag varint
            b = raw[pos]
            count |= (b & 0x7F) << shift
            pos += 1
            if b < 0x80:
                break
            shift += 7
        headers, end = _decode_headers(raw, pos, unzigzag(count), len(raw))
    except Exception:  # a damaged property must not stop the fetch: fall back
        return None
    return headers if end == len(raw) else None


def message_to_record(msg: MessageExt, base_offset: int) -> RecordLike:
    """The Kafka record for a stored message, with its offset delta from ``base_offset``."""
    props = msg.properties
    if props.keys() <= _PLAIN_NAMES:
        # Fast path: a record with at most a text key and no headers (UNIQ_KEY is the
        # store's own id, always present).
        keys = props.get(_KEYS)
        return (
            msg.queue_offset - base_offset,
            msg.born_timestamp,
            keys.encode() if keys is not None else None,
            msg.body,
            (),
        )
    raw_key = props.get(P_KEY)
    key: bytes | None
    if raw_key is not None:
        key = _unb64(raw_key)
    else:
        keys = props.get(_KEYS)
        key = keys.encode() if keys is not None else None
    value: bytes | None = msg.body
    marker = props.get(P_VALUE)
    if marker == "null":
        value = None
    elif marker == "empty":
        value = b""
    return (msg.queue_offset - base_offset, msg.born_timestamp, key, value, _headers_of(props))


def born_host(peer: object) -> HostAddress | None:
    """The born host of a connection's peer address (``socket.getpeername()``)."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        return HostAddress(str(peer[0]), int(peer[1]))
    return None
