"""Records inside a v2 batch: the per-record varint layout, encode and decode (hot path).

Record (all integers zigzag varints, the timestamp delta a varlong)::

    length · attributes int8 · timestamp_delta varlong · offset_delta varint ·
    key_length (-1 = null) · key · value_length (-1 = null) · value ·
    header_count · [header_key_length · key (UTF-8) · header_value_length (-1 = null) · value]

``length`` counts the bytes after itself. Decoded records are :class:`Record` tuples
``(offset_delta, timestamp, key, value, headers)`` with an *absolute* timestamp
(``base_timestamp + delta``) and headers as a tuple of ``(str, bytes | None)``. Header
keys are decoded with ``surrogateescape`` so any bytes survive a round trip. Record
attributes are unused by Kafka: ignored on decode, written as 0.

Speed (why the decode loop is written out by hand): a function call per varint costs
about as much as the rest of a record, so the 1- and 2-byte varint cases are inlined
(all but the key and header counts take 2 bytes in a batch of a few hundred 100-byte
records) and only longer ones call ``_uvarint``. Encoding looks small varints up in a table of
16384 prebuilt ``bytes`` (zigzag values below 2**14, i.e. any length or delta in
[-8192, 8192)), and builds the records section with one ``b"".join``. Measured numbers
are in ``tests/kafka_listener/test_records.py::test_throughput``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .errors import ErrorCode
from .primitives import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, encode_uvarint, zigzag

MIN_RECORD_BYTES = 6  # attributes, ts delta, offset delta, key len, value len, header count
_CORRUPT = ErrorCode.CORRUPT_MESSAGE

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One record; ``timestamp`` is absolute (base_timestamp + delta)."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()


# Anything shaped like a Record: (offset_delta, timestamp, key, value, headers).
RecordLike = tuple[int, int, bytes | None, bytes | None, Sequence[Header]]


# -- decoding ---------------------------------------------------------------------------


def _uvarint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Slow path: decode an unsigned varint of any length up to ``max_bytes``."""
    value = 0
    shift = 0
    for i in range(pos, pos + max_bytes):
        b = buf[i]  # IndexError → caught by the caller as truncation
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
    raise RemoteProtocolError("record varint too long", _CORRUPT)


def _decode_headers(buf: bytes, pos: int, count: int, limit: int) -> tuple[tuple[Header, ...], int]:
    if count < 0 or count > (limit - pos) // 2:
        raise RemoteProtocolError(f"bad record header count {count}", _CORRUPT)
    headers = []
    for _ in range(count):
        n = buf[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = _uvarint(buf, pos, 5)
        n = (n >> 1) ^ -(n & 1)
        if n < 0:
            raise RemoteProtocolError(f"bad record header key length {n}", _CORRUPT)
        key = str(buf[pos : pos + n], "utf-8", "surrogateescape")
        pos += n
        n = buf[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = _uvarint(buf, pos, 5)
        n = (n >> 1) ^ -(n & 1)
        if n >= 0:
            value: bytes | None = buf[pos : pos + n]
            pos += n
        elif n == -1:
            value = None
        else:
            raise RemoteProtocolError(f"bad record header value length {n}", _CORRUPT)
        headers.append((key, value))
    return tuple(headers), pos


def decode_records_section(buf: bytes, count: int, base_timestamp: int) -> list[Record]:
    """Parse ``count`` records from an uncompressed records section.

    Args:
        buf: the records section (after decompression).
        count: the batch's ``records_count``.
        base_timestamp: the batch's ``base_timestamp``; record timestamps are absolute.

    Returns:
        The records in order.

    Raises:
        RemoteProtocolError: CORRUPT_MESSAGE for any truncation, bad length, count
            mismatch or trailing bytes.
    """
    end = len(buf)
    if count < 0 or count * MIN_RECORD_BYTES > end:
        raise RemoteProtocolError(f"records_count {count} does not fit {end} bytes", _CORRUPT)
    out: list[Record] = []
    append = out.append
    new = tuple.__new__
    pos = 0
    try:
        for _ in range(count):
            # length (varint; 1- and 2-byte forms inlined)
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
            length = (b >> 1) ^ -(b & 1)
            record_end = pos + length
            if length < MIN_RECORD_BYTES or record_end > end:
                raise RemoteProtocolError(f"bad record length {length}", _CORRUPT)
            pos += 1  # attributes: unused
            # timestamp delta (varlong): 2 bytes once a batch spans 64 ms
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
            ts_delta = (b >> 1) ^ -(b & 1)
            # offset delta (varint): 2 bytes from the 65th record of a batch on
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
            offset_delta = (b >> 1) ^ -(b & 1)
            # key
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                b, pos = _uvarint(buf, pos, 5)
            n = (b >> 1) ^ -(b & 1)
            if n >= 0:
                key: bytes | None = buf[pos : pos + n]
                pos += n
            elif n == -1:
                key = None
            else:
                raise RemoteProtocolError(f"bad record key length {n}", _CORRUPT)
            # value
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
            n = (b >> 1) ^ -(b & 1)
            if n >= 0:
                value: bytes | None = buf[pos : pos + n]
                pos += n
            elif n == -1:
                value = None
            else:
                raise RemoteProtocolError(f"bad record value length {n}", _CORRUPT)
            # headers
            b = buf[pos]
            if b == 0:
                pos += 1
                headers: tuple[tuple[str, bytes | None], ...] = ()
            else:
                b, pos = _uvarint(buf, pos, 5)
                headers, pos = _decode_headers(buf, pos, (b >> 1) ^ -(b & 1), record_end)
            if pos != record_end:
                raise RemoteProtocolError("record length disagrees with its fields", _CORRUPT)
            append(new(Record, (offset_delta, base_timestamp + ts_delta, key, value, headers)))
    except IndexError:
        raise RemoteProtocolError("truncated record", _CORRUPT) from None
    if pos != end:
        raise RemoteProtocolError(f"{end - pos} bytes after the last record", _CORRUPT)
    return out


# -- encoding ----------------------------------------------------------------------------

_TABLE_HALF = 1 << 13
# _VARINT[n + _TABLE_HALF] is the zigzag varint of n for n in [-8192, 8192).
_VARINT: tuple[bytes, ...] = tuple(
    encode_uvarint(zigzag(n)) for n in range(-_TABLE_HALF, _TABLE_HALF)
)


def _varint(n: int) -> bytes:
    if -_TABLE_HALF <= n < _TABLE_HALF:
        return _VARINT[n + _TABLE_HALF]
    if not INT32_MIN <= n <= INT32_MAX:
        raise LocalProtocolError(f"record varint cannot hold {n}")
    return encode_uvarint(zigzag(n))


def _varlong(n: int) -> bytes:
    if -_TABLE_HALF <= n < _TABLE_HALF:
        return _VARINT[n + _TABLE_HALF]
    if not INT64_MIN <= n <= INT64_MAX:
        raise LocalProtocolError(f"record varlong cannot hold {n}")
    return encode_uvarint(zigzag(n))


def _encode_headers(headers: Iterable[Header]) -> bytes:
    table = _VARINT
    half = _TABLE_HALF
    parts: list[bytes] = []
    count = 0
    for key, value in headers:
        raw_key = key.encode("utf-8", "surrogateescape")
        n = len(raw_key)
        if value is None:
            parts += (table[n + half] if n < half else _varint(n), raw_key, b"\x01")
        else:
            m = len(value)
            parts += (
                table[n + half] if n < half else _varint(n),
                raw_key,
                table[m + half] if m < half else _varint(m),
                value,
            )
        count += 1
    parts.insert(0, _varint(count))
    return b"".join(parts)


def encode_records(records: Iterable[RecordLike], base_timestamp: int) -> bytes:
    """Encode records into an uncompressed records section.

    Args:
        records: ``(offset_delta, timestamp, key, value, headers)`` tuples.
        base_timestamp: timestamps are written as deltas from it.

    Raises:
        LocalProtocolError: a delta or length does not fit its varint.
        TypeError: a key, value or header is not bytes / str (``encode_batch`` turns
            this into LocalProtocolError).
    """
    table = _VARINT
    half = _TABLE_HALF
    parts: list[bytes] = []
    for offset_delta, timestamp, key, value, headers in records:
        d = timestamp - base_timestamp
        ts = table[d + half] if -half <= d < half else _varlong(d)
        od = table[offset_delta + half] if -half <= offset_delta < half else _varint(offset_delta)
        if key is None:
            kl = b"\x01"
            key = b""
        else:
            n = len(key)
            kl = table[n + half] if n < half else _varint(n)
        if value is None:
            vl = b"\x01"
            value = b""
        else:
            n = len(value)
            vl = table[n + half] if n < half else _varint(n)
        hb = _encode_headers(headers) if headers else b"\x00"
        n = 1 + len(ts) + len(od) + len(kl) + len(key) + len(vl) + len(value) + len(hb)
        parts += (
            table[n + half] if n < half else _varint(n),
            b"\x00",
            ts,
            od,
            kl,
            key,
            vl,
            value,
            hb,
        )
    return b"".join(parts)
