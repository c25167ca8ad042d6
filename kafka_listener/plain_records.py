"""Produce's fast path: a records section decoded straight into store messages.

Nearly every produced batch holds only *plain* records: no headers, a non-empty value,
and a key that is null or text ``KEYS`` holds losslessly (``mapping.record_to_message``
gives such a record no properties). For those, the general path builds three objects per
record (a :class:`~kafka_listener.record_codec.Record`, an ``OutgoingMessage``, then the
broker's ``Message``) and checks each of them on the way; here one pass over the bytes
builds the store's :class:`~mqcore.message.Message` directly, with the same fields
``Broker.send`` would give it, for ``Broker.send``'s fast path (one put for the batch).

:func:`plain_messages` never raises on bad input: anything it does not accept (a record
with headers, a null or empty value, a key that needs ``__kafka.key``, offset deltas other
than 0, 1, …, n-1, and every malformation) returns None, and the caller takes the general
path (``record_codec.decode_records_section`` and ``mapping.record_to_message``), which
raises the exact error or builds the properties. So whatever this module accepts, the
general decoder accepts too and reads the same records from it (``test_plain_records.py``
compares them, Hypothesis included).

The varint reads are written out by hand as in ``record_codec.py`` (same reason: a call
per varint costs as much as the rest of a record).
"""

from __future__ import annotations

from mqcore.errors import RemoteProtocolError
from mqcore.format.msgid import HostAddress
from mqcore.message import Message, plain_message
from mqcore.store.put.plain_batch import PlainColumns

from .plain_columns import MIN_COLUMN_RECORDS, UNDECIDED, plain_columns
from .record_codec import MIN_RECORD_BYTES, _uvarint

_MIN_LENGTH_ZIGZAG = MIN_RECORD_BYTES << 1


def plain_messages(
    buf: bytes, count: int, base_timestamp: int, topic: str, born_host: HostAddress | None
) -> list[Message] | PlainColumns | None:
    """The store messages of an uncompressed records section whose records are all plain
    (module docstring), or None when any is not or the section is not well formed. Large
    batches come as columns (``PlainColumns``, whose ``to_messages()`` are the messages),
    which ``Broker.send`` takes as they are.

    ``plain_columns.plain_columns`` decides batches of ``MIN_COLUMN_RECORDS`` records or
    more (the same answer, ~1.5 times faster at 5,000 records, ~190 us a call however
    small) unless it cannot represent a value; :func:`plain_messages_loop` decides the
    rest.
    """
    if count < MIN_COLUMN_RECORDS:  # numpy's per-call costs outweigh the loop's
        return plain_messages_loop(buf, count, base_timestamp, topic, born_host)
    found = plain_columns(buf, count, base_timestamp, topic, born_host)
    if isinstance(found, str):  # UNDECIDED
        assert found is UNDECIDED
        return plain_messages_loop(buf, count, base_timestamp, topic, born_host)
    return found


def plain_messages_loop(
    buf: bytes, count: int, base_timestamp: int, topic: str, born_host: HostAddress | None
) -> list[Message] | None:
    """:func:`plain_messages`, one record at a time (the reference the columnar decoder
    is tested against).

    Args:
        buf: the records section (after decompression).
        count: the batch's ``records_count``.
        base_timestamp: the batch's ``base_timestamp`` (BORNTIMESTAMP = base + delta).
        topic: the store topic of every message.
        born_host: the producer's address (None: the store's default).
    """
    end = len(buf)
    if count <= 0 or count * MIN_RECORD_BYTES > end:
        return None
    out: list[Message] = []
    append = out.append
    new = plain_message
    pos = 0
    try:
        for expected in range(0, count << 1, 2):  # zigzag of the offset delta 0, 1, ...
            # length
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                c = buf[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = _uvarint(buf, pos, 5)
            record_end = pos + (b >> 1)
            if b & 1 or b < _MIN_LENGTH_ZIGZAG or record_end > end:  # negative or too short
                return None
            pos += 1  # attributes: unused
            # timestamp delta (varlong)
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                c = buf[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = _uvarint(buf, pos, 10)
            timestamp = base_timestamp + ((b >> 1) ^ -(b & 1))
            # offset delta: compared undecoded with the expected zigzag value
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                c = buf[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = _uvarint(buf, pos, 5)
            if b != expected:
                return None
            # key: null (zigzag -1 = 1), or non-empty text without a space or separator
            b = buf[pos]
            if b == 1:
                pos += 1
                keys = ""
            else:
                if b < 0x80:
                    pos += 1
                else:
                    b, pos = _uvarint(buf, pos, 5)
                if b & 1 or not b:  # negative, or empty: not plain (or not valid)
                    return None
                n = b >> 1
                keys = str(buf[pos : pos + n], "utf-8")  # UnicodeDecodeError: not plain
                pos += n
                if " " in keys or "\x01" in keys or "\x02" in keys:
                    return None
            # value: non-empty
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                c = buf[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    b, pos = _uvarint(buf, pos, 5)
            if b & 1 or not b:  # null, negative or empty: not plain (or not valid)
                return None
            n = b >> 1
            value = buf[pos : pos + n]
            pos += n
            # header count: none
            if buf[pos]:
                return None
            pos += 1
            if pos != record_end:
                return None
            append(new(topic, value, keys, timestamp, born_host))
    except (IndexError, UnicodeDecodeError, RemoteProtocolError):
        return None  # truncated, not text, or a varint too long: the general path says which
    return out if pos == end else None
