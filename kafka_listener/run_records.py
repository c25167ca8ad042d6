"""Kafka records for a whole run of store records at once, with numpy (the Fetch store path).

``view_records.ViewBatch`` writes a Kafka record per store record in a Python loop: about
1.7 us a record (100-byte keyless records), with the store's own per-record cost (a
ConsumeQueue ``Unit``, a ``RecordView``, a copy of the record) as much again. A consumer
reading old data fetches thousands of consecutive records at a time, so here the same
bytes are computed for a *run* of records with array operations: the records are one
``bytes`` copy of the CommitLog (``store_runs.py``) plus each record's position in it.

Which records: exactly the ones ``ViewBatch.add``'s inline path takes (V1 magic, IPv4
hosts, TOTALSIZE equal to the ConsumeQueue unit's size, a topic length byte of at most
127, a PROPERTIESLENGTH that ends the record, no properties or only ``UNIQ_KEY``: what a
Kafka producer's keyless record stores), and whose QUEUEOFFSET is the unit's queue offset
and born timestamp lies within +-2**62 (so the timestamp delta cannot overflow int64).
:func:`encode_run` encodes the leading records that qualify and stops at the first that
does not; the caller hands that one to ``ViewBatch.add`` (text keys, other properties,
damaged records, whose error the general path raises).

Output layout, per record, as ``record_codec.encode_records`` writes it (zigzag varints)::

    length | attributes 0 | timestamp delta | offset delta | key -1 (0x01) | value length
           | value | header count 0

The prefix (everything before the value, at most 27 bytes) is built in a ``(n, 28)`` array,
one column write per varint byte; the values are gathered from the CommitLog copy with a
mask of their positions and scattered into the output with a mask of theirs. The result
equals ``ViewBatch``'s bytes for the same records (``tests/kafka_listener/test_run_records.py``
compares them, hypothesis-generated runs included).

Thread-safety: pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mqcore.store.format import MESSAGE_MAGIC_CODE
from mqcore.store.record_layout import (
    BORN_TIMESTAMP_POSITION,
    HEADER_SIZES,
    HOST_V6_FLAGS,
    MAGIC_POSITION,
    MIN_RECORD_SIZE,
    PROPERTIES_LENGTH,
    QUEUE_OFFSET_POSITION,
    SYSFLAG_POSITION,
    TOPIC_LENGTH_V1,
    V1_MAX_TOPIC_BYTES,
)

Int64s = npt.NDArray[np.int64]

_HEADER_SIZE = HEADER_SIZES[0]  # V1 record, IPv4 hosts
_BODY_LENGTH_POSITION = _HEADER_SIZE - 4  # BODYLENGTH ends the header
# After the value: the topic length byte and, after the topic, PROPERTIESLENGTH.
_AFTER_VALUE = TOPIC_LENGTH_V1.size + PROPERTIES_LENGTH.size
assert MIN_RECORD_SIZE == _HEADER_SIZE + _AFTER_VALUE
_UNIQ_KEY_NAME = b"UNIQ_KEY"  # a property is NAME \x01 VALUE
_UNIQ_KEY_PAIR_SIZE = len(_UNIQ_KEY_NAME) + 1
_UNIQ_KEY_NAME_INT = int.from_bytes(_UNIQ_KEY_NAME, "big")  # as an '>i8' read of it
_TS_BOUND = 1 << 62  # born timestamps within +-2**62: a delta of two fits int64
# Varint lengths: a value below 2**(7k) takes k bytes.
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
# Prefix columns: length (5) + attributes (1) + timestamp delta (10) + offset delta (5)
# + key (1) + value length (5) = 27, then the header count byte.
_PREFIX_COLUMNS = 28
_ALTERNATE = np.arange(2 * 32768 + 1) % 2 == 1  # False, True, False, ... for _spans


@dataclass(frozen=True, slots=True)
class EncodedRun:
    """The Kafka records of the leading ``count`` records of a run (0: the first record
    does not fit the room left, ``full``)."""

    data: bytes  # the records, back to back (no batch header)
    count: int
    first_timestamp: int  # born timestamp of the first record
    max_timestamp: int
    full: bool  # stopped by the byte limit (the next record would not fit)


def encode_run(
    data: bytes,
    positions: Int64s,
    sizes: Int64s,
    first_offset: int,
    base_offset: int,
    base_timestamp: int | None,
    room_bytes: int,
    first_always: bool,
) -> EncodedRun | None:
    """Encode the leading usual records (module docstring) of a run, within ``room_bytes``.

    Args:
        data: CommitLog bytes holding every record of the run.
        positions: where each record starts in ``data``, increasing, records not overlapping
            and each inside ``data``.
        sizes: each record's size from its ConsumeQueue unit.
        first_offset: the queue offset of the first record (the next ones follow).
        base_offset: the batch's base offset (offset deltas are from it).
        base_timestamp: the batch's base timestamp; None: the first record's (a new batch).
        room_bytes: Kafka bytes still free in the batch.
        first_always: take the first record even past ``room_bytes`` (KIP-74).

    Returns:
        The encoded records (none when the first does not fit), or None when the first
        record is not a usual one.
    """
    if base_timestamp is not None and not -_TS_BOUND <= base_timestamp < _TS_BOUND:
        return None
    value_at, body, ts = _headers(data, positions, sizes, first_offset)
    n = len(body)
    if n == 0:
        return None
    if base_timestamp is None:
        base_timestamp = int(ts[0])
    delta = ts - base_timestamp
    fields = (
        (delta << 1) ^ (delta >> 63),  # timestamp delta, zigzag
        np.arange(first_offset - base_offset, first_offset - base_offset + n) << 1,
        body << 1,  # value length
    )
    zigzags = [z.view(np.uint64) for z in fields]
    lengths = [_varint_lengths(z) for z in zigzags]
    # attributes, the key byte and the header count, then the three varints and the value
    record_size = 3 + lengths[0] + lengths[1] + lengths[2] + body
    zigzags.insert(0, (record_size << 1).view(np.uint64))
    lengths.insert(0, _varint_lengths(zigzags[0]))
    ends = np.cumsum(lengths[0] + record_size)
    fit = int(np.searchsorted(ends, room_bytes, side="right"))
    if fit == 0 and first_always:
        fit = 1
    # The properties of the records that fit and of the next one: if that one is not a
    # usual record, ViewBatch.add decides (its Kafka size differs, or it is damaged).
    k = min(fit + 1, n)
    usual = _usual_properties(data, positions[:k], sizes[:k], value_at[:k], body[:k])
    if usual == 0:
        return None
    m = min(fit, usual)
    if m == 0:  # the first does not fit
        return EncodedRun(b"", 0, int(ts[0]), int(ts[0]), True)
    records = _assemble(
        data,
        [z[:m] for z in zigzags],
        [length[:m] for length in lengths],
        value_at[:m],
        body[:m],
        int(ends[m - 1]),
    )
    return EncodedRun(records, m, int(ts[0]), int(ts[:m].max()), usual > fit)


def _headers(
    data: bytes, positions: Int64s, sizes: Int64s, first_offset: int
) -> tuple[Int64s, Int64s, Int64s]:
    """``(value position, value length, born timestamp)`` of the leading records whose
    header is a usual one (module docstring), the reads inside each record."""
    n = leading(sizes >= MIN_RECORD_SIZE)
    rel, size = positions[:n], sizes[:n]
    i4, i8 = (_unaligned(data, code) for code in (">i4", ">i8"))
    body = i4[rel + _BODY_LENGTH_POSITION].astype(np.int64)
    ts = i8[rel + BORN_TIMESTAMP_POSITION].astype(np.int64)
    n = leading(
        (i4[rel] == size)
        & (i4[rel + MAGIC_POSITION] == MESSAGE_MAGIC_CODE)
        & (i4[rel + SYSFLAG_POSITION] & HOST_V6_FLAGS == 0)
        & (body >= 0)
        & (body <= size - MIN_RECORD_SIZE)  # the value end + 3 <= the record end
        & (i8[rel + QUEUE_OFFSET_POSITION] == np.arange(first_offset, first_offset + n))
        & (ts >= -_TS_BOUND)
        & (ts < _TS_BOUND)
    )
    return rel[:n] + _HEADER_SIZE, body[:n], ts[:n]


def _usual_properties(
    data: bytes, positions: Int64s, sizes: Int64s, value_at: Int64s, body: Int64s
) -> int:
    """How many leading records (their headers checked) have a usual topic length and
    properties: none, or ``UNIQ_KEY`` alone. Each check is made for the records that
    passed the one before, so that every read stays inside its record."""
    if not len(sizes):
        return 0
    # 1. The topic length byte (value end + 3 <= record end), then PROPERTIESLENGTH.
    u8 = np.frombuffer(data, np.uint8, int(positions[-1] + sizes[-1]))
    value_end = value_at + body
    end = positions + sizes
    topic_length = u8[value_end].astype(np.int64)
    properties_at = value_end + _AFTER_VALUE + topic_length
    n = leading((topic_length <= V1_MAX_TOPIC_BYTES) & (properties_at <= end))
    end, properties_at = end[:n], properties_at[:n]
    properties_size = end - properties_at
    framed = _unaligned(data, ">i2")[properties_at - PROPERTIES_LENGTH.size] == properties_size
    # 2. The properties: none, or "UNIQ_KEY\x01" and no other \x01 up to the record end
    # (decode_message's parse then finds UNIQ_KEY alone: a name needs \x01 and a value).
    paired = properties_size >= _UNIQ_KEY_PAIR_SIZE
    at = np.where(paired, properties_at, 0)
    name = _unaligned(data, ">i8")[at] == _UNIQ_KEY_NAME_INT
    uniq = paired & name & (u8[at + len(_UNIQ_KEY_NAME)] == 1)
    ones = np.flatnonzero(u8 == 1)
    after = np.searchsorted(ones, end) - np.searchsorted(ones, at + _UNIQ_KEY_PAIR_SIZE)
    return leading(framed & ((properties_size == 0) | (uniq & (after == 0))))


def _assemble(
    data: bytes,
    zigzags: list[npt.NDArray[np.uint64]],
    lengths: list[Int64s],
    value_at: Int64s,
    body: Int64s,
    total: int,
) -> bytes:
    """The records: each prefix (the four varints in ``zigzags``, the attributes and key
    bytes between them), its value from ``data``, and a header count of 0."""
    m = len(body)
    cols = _PREFIX_COLUMNS
    prefix = np.zeros((m, cols), np.uint8)
    flat = prefix.reshape(-1)
    column = np.arange(0, m * cols, cols, dtype=np.int64)
    length_len, ts_len, offset_len, value_len = lengths
    # Written left to right: a varint's bytes past its length are zeros (see _put_varints),
    # so they only ever land where a later field is written, or stay 0.
    _put_varints(flat, column, zigzags[0], length_len)
    column += length_len + 1  # attributes: 0
    _put_varints(flat, column, zigzags[1], ts_len)
    column += ts_len
    _put_varints(flat, column, zigzags[2], offset_len)
    column += offset_len
    flat[column] = 1  # key length -1: a null key
    column += 1
    _put_varints(flat, column, zigzags[3], value_len)
    prefix_len = column + value_len - np.arange(0, m * cols, cols, dtype=np.int64)
    # Each prefix and the header count byte after the value (column prefix_len: 0).
    around = prefix[np.arange(cols) <= prefix_len[:, None]]
    # Output: prefix 0, value 0, (0, prefix 1), value 1, ..., (0, prefix m-1), value m-1, 0.
    gaps_out = prefix_len + 1
    gaps_out[0] -= 1
    values_out = _spans(gaps_out, body, 1)
    # Input: the bytes before value 0, value 0, the bytes between values 0 and 1, ...
    gaps_in = np.empty(m, np.int64)
    gaps_in[0] = value_at[0]
    np.subtract(value_at[1:], value_at[:-1] + body[:-1], out=gaps_in[1:])
    values_in = _spans(gaps_in, body, len(data) - int(value_at[-1] + body[-1]))
    out = np.empty(total, np.uint8)
    out[values_out] = np.frombuffer(data, np.uint8)[values_in]
    out[~values_out] = around
    return out.tobytes()


def _spans(gaps: Int64s, sizes: Int64s, tail: int) -> npt.NDArray[np.bool_]:
    """A mask: ``gaps[0]`` False, ``sizes[0]`` True, ``gaps[1]`` False, ..., then ``tail``
    False."""
    counts = np.empty(2 * len(gaps) + 1, np.int64)
    counts[0:-1:2] = gaps
    counts[1::2] = sizes
    counts[-1] = tail
    alternate = _ALTERNATE if len(counts) <= len(_ALTERNATE) else np.arange(len(counts)) % 2 == 1
    return np.repeat(alternate[: len(counts)], counts)


def _put_varints(
    flat: npt.NDArray[np.uint8], at: Int64s, z: npt.NDArray[np.uint64], lengths: Int64s
) -> None:
    """Write each unsigned varint ``z`` at ``flat[at:]``. Byte ``k`` past a value's length is
    0 (its 7-bit group is 0 and no continuation bit), so it is written unmasked."""
    for k in range(int(lengths.max())):
        group = (z >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (lengths > k + 1).astype(np.uint64) << np.uint64(7)
        flat[at + k] = group | more


def _varint_lengths(z: npt.NDArray[np.uint64]) -> Int64s:
    """Bytes of each unsigned varint."""
    return np.searchsorted(_VARINT_STEPS, z, side="right").astype(np.int64) + 1


def leading(mask: npt.NDArray[np.bool_]) -> int:
    """How many leading entries of ``mask`` are True."""
    if mask.all():
        return len(mask)
    return int(np.argmin(mask))


def _unaligned(data: bytes, code: str) -> npt.NDArray[np.int64]:
    """``data`` read as ``code`` integers at every byte position (index = position)."""
    dtype = np.dtype(code)
    count = len(data) - dtype.itemsize + 1
    return np.ndarray((count,), dtype, data, 0, (1,))
