"""Kafka records straight from the store's raw record views (the Fetch store path).

``mapping.message_to_record`` takes a fully decoded ``MessageExt``: 17 header fields, two
hosts, a 16-attribute object and a properties dict per record, of which a fetch uses the
born timestamp, the body and one or two properties. :func:`_fast` reads just
those from :class:`~mqcore.store.read.record_views.RecordView` bytes for the usual record (V1,
IPv4 hosts, properties no more than ``KEYS`` and ``UNIQ_KEY``: what a Kafka producer's
text-keyed record or a plain REST message stores) and hands every other record to
``message_to_record`` (via ``RecordView.message()``, which also raises for a record that
fails the framing checks). The framing checks are ``message_decode.decode_message``'s, on
the values of one header unpack, so a record this fast path accepts decodes the same
there. The results equal ``message_to_record``'s, tuple for tuple, so the batch built from
them is byte-identical (``tests/kafka_listener/test_view_records.py``).

:class:`ViewBatch` goes one step further for the Fetch store path: it writes each
record's Kafka bytes straight from the view (no record tuple in between, one pass over the
views) and builds the whole batch (CRC-32C once, over the finished records), stopping at a
byte limit measured in Kafka bytes (what the client's ``partition_max_bytes`` is about), not
store bytes. For a record whose only property is UNIQ_KEY (a Kafka producer's keyless
record) it skips the property parse too; text-keyed records take :func:`_fast`, the rest
``message_to_record``, both then ``encode_records``. Its batch equals
``encode_batch`` of ``message_to_record`` of each view taken, byte for byte
(``test_view_records.py``). Measured in-process (``Broker.pull_records`` + encoding, 100-byte
keyless records): ~2.1 us a record before, ~1.3 us with ViewBatch. :meth:`ViewBatch.add_run`
takes a whole raw run of such records, keyless or with a text key (``store_runs.py``),
encoded with numpy (``run_records.py``, the same bytes as :meth:`ViewBatch.add`); the Fetch
store path uses it for long reads and keeps :meth:`ViewBatch.add` for the records a run
stops at.

Thread-safety: pure functions; a ViewBatch belongs to one thread.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

import google_crc32c

from mqcore.format.layout import (
    DISPATCH_HEADERS,
    HEADER_SIZES,
    HOST_V6_FLAGS,
    PROPERTIES_LENGTH,
    V1_MAX_TOPIC_BYTES,
)
from mqcore.format.record import MESSAGE_MAGIC_CODE
from mqcore.store.read.record_views import RecordView

from .mapping import message_to_record
from .record_codec import _TABLE_HALF, _VARINT, RecordLike, _varint, _varlong, encode_records
from .records import (
    _HEAD,
    _TAIL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
)
from .run_records import Int64s, encode_run

_HEADER = DISPATCH_HEADERS[0]  # V1 record, IPv4 hosts; the hosts skipped (13 values)
_HEADER_SIZE = HEADER_SIZES[0]
_PLEN = PROPERTIES_LENGTH
_PLEN_SIZE = PROPERTIES_LENGTH.size
_MIN_TOTAL = _HEADER_SIZE + 1 + _PLEN_SIZE
assert _PLEN_SIZE == 2  # ViewBatch.add's "+ 3": the topic length byte and this


def _subset(layout: struct.Struct, keep: set[int]) -> struct.Struct:
    """``layout`` with only the values at positions ``keep`` unpacked, the others skipped
    (fewer Python ints per record than all 13)."""
    codes = re.findall(r"\d*[a-zA-Z?]", layout.format[1:])
    out, value = [], 0
    for code in codes:
        if code.endswith("x"):
            out.append(code)
            continue
        out.append(code if value in keep else f"{struct.calcsize('>' + code)}x")
        value += 1
    return struct.Struct(layout.format[0] + "".join(out))


# Two varints and the byte after each, as one ``bytes``: a record's length and its
# attributes (0), and its offset delta and a null key's length (-1). Offset deltas up to
# 16384 (the default max_fetch_records) and record lengths up to 16384 come from here.
_TABLE_SIZE = 16_384
_LENGTH_ATTRIBUTES = tuple(_varint(n) + b"\x00" for n in range(_TABLE_SIZE))
_OFFSET_DELTA_NULL_KEY = tuple(_varint(n) + b"\x01" for n in range(_TABLE_SIZE))

# TOTALSIZE, MAGICCODE, QUEUEOFFSET, SYSFLAG, BORNTIMESTAMP, BODYLENGTH of _HEADER.
_FETCH_FIELDS = _subset(_HEADER, {0, 1, 5, 7, 8, 12})
assert _FETCH_FIELDS.size == _HEADER_SIZE
_KEYS_PAIR = "KEYS\x01"  # a property is NAME \x01 VALUE; pairs are separated by \x02
_UNIQ_KEY_PAIR = "UNIQ_KEY\x01"
_UNIQ_KEY_ONLY = b"UNIQ_KEY\x01"


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


class ViewBatch:
    """One uncompressed v2 batch built from raw views, chunk by chunk, up to a byte limit.

    :meth:`add` takes views (in queue order) while the batch stays within ``max_bytes``
    (the first record always goes in, KIP-74); :meth:`finish` gives the batch, which equals
    ``encode_batch([message_to_record(v.message(), base) for v in taken], base_offset=base)``
    with ``base`` the first view's queue offset. Chunks let a Fetch pull the store piece by piece and still
    answer one batch sized in Kafka bytes (what ``partition_max_bytes`` is about), not store
    bytes (a store record of a 100-byte value is about twice its Kafka record).
    """

    __slots__ = ("max_bytes", "size", "count", "_parts", "_base", "_base_ts", "_max_ts", "_last")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = HEADER_SIZE  # of the batch so far
        self.count = 0  # records taken
        self._parts: list[bytes] = []
        self._base = self._base_ts = self._max_ts = self._last = 0

    def add(self, views: Sequence[RecordView]) -> int:
        """Take views from the front of ``views`` while they fit; how many were taken.

        Raises:
            CorruptRecordError: a record that fails ``decode_message``'s checks.
            LocalProtocolError: a delta or length does not fit its varint.
        """
        if not views:
            return 0
        if not self.count:
            self._base = views[0].queue_offset
            self._base_ts = self._max_ts = _first_timestamp(views[0], self._base)
        table = _VARINT
        half = _TABLE_HALF
        table_size = _TABLE_SIZE
        offset_key = _OFFSET_DELTA_NULL_KEY
        length_attr = _LENGTH_ATTRIBUTES
        unpack = _FETCH_FIELDS.unpack_from
        plen = _PLEN.unpack_from
        header_size = _HEADER_SIZE
        min_total = _MIN_TOTAL
        magic_code = MESSAGE_MAGIC_CODE
        v6 = HOST_V6_FLAGS
        max_topic = V1_MAX_TOPIC_BYTES
        uniq_only = _UNIQ_KEY_ONLY
        len_uniq = len(uniq_only)
        parts = self._parts
        append = parts.append
        max_bytes = self.max_bytes
        size = self.size
        first = self.count
        count = first
        base, base_ts, max_ts = self._base, self._base_ts, self._max_ts
        for view in views:
            raw = view.raw
            end = len(raw)
            # The usual record (see _fast) inlined, for one whose only property is UNIQ_KEY
            # (what a Kafka producer's keyless record stores): no property parse, no tuple.
            if end >= min_total:
                total, magic, queue_offset, sys_flag, ts, body_length = unpack(raw)
                value_end = header_size + body_length
                if (
                    magic == magic_code
                    and not sys_flag & v6
                    and total == end
                    and body_length >= 0
                    and value_end + 3 <= end  # topic length byte + properties length
                ):
                    properties_pos = value_end + 3 + raw[value_end]
                    if (
                        raw[value_end] <= max_topic
                        and properties_pos <= end
                        and plen(raw, properties_pos - 2)[0] == end - properties_pos
                        and (
                            properties_pos == end
                            or (
                                raw.startswith(uniq_only, properties_pos)
                                and raw.find(1, properties_pos + len_uniq) < 0
                            )
                        )
                    ):
                        d = ts - base_ts
                        tsb = table[d + half] if -half <= d < half else _varlong(d)
                        n = queue_offset - base
                        od1 = offset_key[n] if n < table_size else _varint(n) + b"\x01"
                        n = body_length
                        vlb = table[n + half] if n < half else _varint(n)
                        # encode_records' layout: length, attributes 0, timestamp and
                        # offset deltas, key -1, value, 0 headers.
                        n += 2 + len(tsb) + len(od1) + len(vlb)
                        lb0 = length_attr[n] if n < table_size else _varint(n) + b"\x00"
                        n += len(lb0) - 1  # the attributes byte is in both
                        if size + n > max_bytes and count:
                            break
                        parts += (lb0, tsb, od1, vlb, raw[header_size:value_end], b"\x00")
                        size += n
                        if ts > max_ts:  # only for a record that went in
                            max_ts = ts
                        count += 1
                        continue
            # Everything else: _fast's parse (text keys), else message_to_record.
            record = _fast(raw, base) or message_to_record(view.message(), base)
            ts = record[1]
            chunk = encode_records((record,), base_ts)
            if size + len(chunk) > max_bytes and count:
                break
            append(chunk)
            size += len(chunk)
            if ts > max_ts:
                max_ts = ts
            count += 1
        taken = count - first
        if taken:
            self._last = views[taken - 1].queue_offset
        self.size, self.count, self._max_ts = size, count, max_ts
        return taken

    def add_run(
        self, data: bytes, positions: Int64s, sizes: Int64s, first_offset: int
    ) -> tuple[int, bool]:
        """Take the leading usual records of a run (``run_records.encode_run``: what
        :meth:`add` takes with no property but a text key, encoded with numpy, the same
        bytes) while they fit.

        Returns:
            ``(taken, full)``: how many records went in, and whether the next one did not
            fit. ``(0, False)``: the first is not a usual record, :meth:`add` must take it.
        """
        empty = not self.count
        encoded = encode_run(
            data,
            positions,
            sizes,
            first_offset,
            first_offset if empty else self._base,
            None if empty else self._base_ts,
            self.max_bytes - self.size,
            empty,
        )
        if encoded is None:
            return 0, False
        taken = encoded.count
        if taken:
            if empty:
                self._base = first_offset
                self._base_ts = self._max_ts = encoded.first_timestamp
            self._parts.append(encoded.data)
            self.size += len(encoded.data)
            self.count += taken
            self._max_ts = max(self._max_ts, encoded.max_timestamp)
            self._last = first_offset + taken - 1
        return taken, encoded.full

    @property
    def body_size(self) -> int:
        """Bytes of the records taken (the batch without its header)."""
        return self.size - HEADER_SIZE

    def finish(self) -> bytes:
        """The batch of every record taken (at least one must have been)."""
        body = b"".join(self._parts)
        tail = _TAIL.pack(
            0,  # attributes: uncompressed, CreateTime
            self._last - self._base,
            self._base_ts,
            self._max_ts,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            self.count,
        )
        crc = google_crc32c.extend(google_crc32c.value(tail), body)
        head = _HEAD.pack(self._base, HEADER_SIZE - LOG_OVERHEAD + len(body), 0, MAGIC, crc)
        return b"".join((head, tail, body))


def _first_timestamp(view: RecordView, base_offset: int) -> int:
    """The Kafka timestamp of a view's record (the batch's base timestamp)."""
    record = _fast(view.raw, base_offset) or message_to_record(view.message(), base_offset)
    return record[1]
