"""Kafka records straight from the store's raw record views (the Fetch store path).

``mapping.message_to_record`` takes a fully decoded ``MessageExt``: 17 header fields, two
hosts, a 16-attribute object and a properties dict per record, of which a fetch uses the
born timestamp, the body and one or two properties. :func:`views_to_records` reads just
those from :class:`~mqcore.store.record_views.RecordView` bytes for the usual record (V1,
IPv4 hosts, properties no more than ``KEYS`` and ``UNIQ_KEY``: what a Kafka producer's
text-keyed record or a plain REST message stores) and hands every other record to
``message_to_record`` (via ``RecordView.message()``, which also raises for a record that
fails the framing checks). The framing checks are ``message_decode.decode_message``'s, on
the values of one header unpack, so a record this fast path accepts decodes the same
there. The results equal ``message_to_record``'s, tuple for tuple, so the batch built from
them is byte-identical (``tests/kafka_listener/test_view_records.py``).

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from mqcore.store.format import MESSAGE_MAGIC_CODE
from mqcore.store.record_layout import (
    DISPATCH_HEADERS,
    HEADER_SIZES,
    HOST_V6_FLAGS,
    PROPERTIES_LENGTH,
    V1_MAX_TOPIC_BYTES,
)
from mqcore.store.record_views import RecordView

from .mapping import message_to_record
from .record_codec import RecordLike

_HEADER = DISPATCH_HEADERS[0]  # V1 record, IPv4 hosts; the hosts skipped (13 values)
_HEADER_SIZE = HEADER_SIZES[0]
_PLEN = PROPERTIES_LENGTH
_PLEN_SIZE = PROPERTIES_LENGTH.size
_MIN_TOTAL = _HEADER_SIZE + 1 + _PLEN_SIZE
_KEYS_PAIR = "KEYS\x01"  # a property is NAME \x01 VALUE; pairs are separated by \x02
_UNIQ_KEY_PAIR = "UNIQ_KEY\x01"


def _fast(raw: bytes, base_offset: int) -> RecordLike | None:
    """The record of a usual V1/IPv4 record with at most KEYS and UNIQ_KEY, else None."""
    if len(raw) < _MIN_TOTAL:
        return None
    (
        total, magic, _crc, _queue_id, _flag, queue_offset, _phys, sys_flag,
        born_timestamp, _store_ts, _reconsume, _prepared, body_length,
    ) = _HEADER.unpack_from(raw)  # fmt: skip
    end = len(raw)
    topic_length_pos = _HEADER_SIZE + body_length
    if (
        magic != MESSAGE_MAGIC_CODE
        or sys_flag & HOST_V6_FLAGS
        or total != end
        or body_length < 0
        or topic_length_pos + 1 + _PLEN_SIZE > end
    ):
        return None
    topic_length = raw[topic_length_pos]
    properties_pos = topic_length_pos + 1 + topic_length + _PLEN_SIZE
    if topic_length > V1_MAX_TOPIC_BYTES or properties_pos > end:
        return None
    (properties_length,) = _PLEN.unpack_from(raw, properties_pos - _PLEN_SIZE)
    if properties_length < 0 or properties_pos + properties_length != end:
        return None
    keys: str | None = None
    if properties_length:
        # decode_message's property parse (a pair counts when its name and value are
        # non-empty; the last of a name wins), with the two usual names matched by prefix
        # rather than split; any other name needs message_to_record's slow path.
        for segment in str(raw[properties_pos:end], "utf-8", "replace").split("\x02"):
            if not segment or segment.startswith(_UNIQ_KEY_PAIR):
                continue
            if segment.startswith(_KEYS_PAIR):
                if len(segment) > len(_KEYS_PAIR):
                    keys = segment[len(_KEYS_PAIR) :]
                continue
            name, _, value = segment.partition("\x01")
            if name and value:
                return None
    return (
        queue_offset - base_offset,
        born_timestamp,
        keys.encode() if keys is not None else None,
        raw[_HEADER_SIZE:topic_length_pos],
        (),
    )


def views_to_records(views: Sequence[RecordView], base_offset: int) -> list[RecordLike]:
    """``[message_to_record(v.message(), base_offset) for v in views]``, cheaper.

    Raises:
        CorruptRecordError: a record that fails ``decode_message``'s checks.
    """
    out: list[RecordLike] = []
    append = out.append
    for view in views:
        record = _fast(view.raw, base_offset)
        append(record if record is not None else message_to_record(view.message(), base_offset))
    return out
