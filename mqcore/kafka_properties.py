"""The Kafka listener's reserved message properties, as the other front ends read them.

The listener keeps what a plain message cannot hold of a Kafka record in properties named
``__kafka.*`` (``kafka_listener/mapping.py`` has the table): they are the listener's own
bookkeeping, never a user's properties. REST and the console (which may not import the
listener) leave them out of a message's properties and show the record's headers instead,
read here from ``__kafka.hdrs`` (the header names, in order, when every header is also a
plain property) or ``__kafka.hblk`` (``b64:`` + the Kafka header block otherwise). The
listener's own fast path decodes the same properties itself; a test checks both agree.

Thread-safety: pure functions.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping

PROPERTY_PREFIX = "__kafka."
HEADER_NAMES = PROPERTY_PREFIX + "hdrs"
HEADER_BLOCK = PROPERTY_PREFIX + "hblk"
_B64 = "b64:"

KafkaHeader = tuple[str, bytes | None]


def is_reserved_property(name: str) -> bool:
    """Whether a property is the Kafka listener's own (``__kafka.*``), never a user's."""
    return name.startswith(PROPERTY_PREFIX)


def produced_headers(props: Mapping[str, str]) -> tuple[KafkaHeader, ...] | None:
    """The headers a Kafka producer sent with a message, in its order (None values for
    null headers); None when no Kafka producer sent it headers (Kafka consumers then get
    its user properties as headers) or the reserved properties cannot be read."""
    block = props.get(HEADER_BLOCK)
    if block is not None:
        return _header_block(block)
    names = props.get(HEADER_NAMES)
    if names is None:
        return None
    try:
        listed = json.loads(names)
    except ValueError:
        return None
    if not isinstance(listed, list):
        return None
    return tuple((n, props[n].encode()) for n in listed if isinstance(n, str) and n in props)


def _header_block(text: str) -> tuple[KafkaHeader, ...] | None:
    if not text.startswith(_B64):
        return None
    try:
        raw = base64.b64decode(text[len(_B64) :], validate=True)
        count, pos = _zigzag(raw, 0)
        headers: list[KafkaHeader] = []
        for _ in range(count):
            size, pos = _zigzag(raw, pos)
            if size < 0 or pos + size > len(raw):
                return None
            name = str(raw[pos : pos + size], "utf-8", "surrogateescape")
            pos += size
            size, pos = _zigzag(raw, pos)
            if size < -1 or pos + size > len(raw):
                return None
            headers.append((name, None if size == -1 else raw[pos : pos + size]))
            pos += max(size, 0)
    except (binascii.Error, ValueError, IndexError):
        return None
    return tuple(headers) if pos == len(raw) else None


def _zigzag(raw: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos`` (at most 5 bytes) and the position after it."""
    value = shift = 0
    for _ in range(5):
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise ValueError("varint longer than 5 bytes")
