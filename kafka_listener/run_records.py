"""Kafka records for a whole run of store records at once, with numpy (the Fetch store path).

``view_records.ViewBatch`` writes a Kafka record per store record in a Python loop: about
1.7 us a record (100-byte keyless records), with the store's own per-record cost (a
ConsumeQueue ``Unit``, a ``RecordView``, a copy of the record) as much again. A consumer
reading old data fetches thousands of consecutive records at a time, so here the same
bytes are computed for a *run* of records with array operations: the records are one
``bytes`` copy of the CommitLog (``store_runs.py``) plus each record's position in it.

Which records: the usual ones among those ``ViewBatch.add`` encodes without a
``MessageExt`` (V1 magic, IPv4 hosts, TOTALSIZE equal to the ConsumeQueue unit's size, a
topic length byte of at most 127, a PROPERTIESLENGTH that ends the record), whose
QUEUEOFFSET is the unit's queue offset and born timestamp lies within +-2**62 (so the
timestamp delta cannot overflow int64), and whose properties are either

- none, or ``UNIQ_KEY\\x01<id>\\x02``: a null Kafka key (a Kafka producer's keyless record), or
- ``KEYS\\x01<key>\\x02UNIQ_KEY\\x01<id>\\x02``: the Kafka key ``<key>`` (a Kafka producer's
  keyed record, a REST message's keys: several keys are one space-separated string,
  served whole, as ``mapping.message_to_record`` does),

where ``<id>`` holds no ``\\x01`` and ``<key>`` is non-empty UTF-8 without ``\\x01`` or
``\\x02`` (``view_records._fast`` reads another key from those: up to the first ``\\x02``,
U+FFFD for bytes that are not UTF-8). A run may mix both forms. :func:`encode_run` encodes
the leading records that qualify and stops at the first that does not; the caller hands
that one to ``ViewBatch.add`` (other properties, KEYS after UNIQ_KEY, an empty KEYS,
damaged records, whose error the general path raises).

Output layout, per record, as ``record_codec.encode_records`` writes it (zigzag varints)::

    length | attributes 0 | timestamp delta | offset delta | key length (-1: 0x01) | key
           | value length | value | header count 0

The fixed-width part (the varints, at most 29 bytes, and the header count) is built in an
``(n, 30)`` array, one column write per varint byte; the values are gathered from the
CommitLog copy with a mask of their positions and scattered into the output with a mask of
theirs; the keys, a few bytes each, are gathered and scattered by index (one index per key
byte). The result equals ``ViewBatch``'s bytes for the same records
(``tests/kafka_listener/test_run_records.py`` compares them, hypothesis-generated runs of
keyed, keyless and odd records included, and raw property bytes no put writes).

Speed: the Fetch store path in process (``handlers/fetch._read_local``, 1 MB fetches, no
fetch cache, 200,000 records of 100-byte values, thread CPU a record, best of 7 passes,
alternating in one process with the previous, keyless-only encoder): keyed records (keys
``order-<i>``, which had gone through record views and ``_fast`` one by one) 5.9-6.1 ->
1.29-1.35 us, keyless ones 0.87-0.90 -> 0.84-0.88 us. Page faults on the MB-sized arrays
are a good part of both: with glibc's mmap and trim thresholds pinned
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``), keyed 5.7 -> 0.75 us, keyless
0.52 -> 0.55 us. Keys that are not ASCII cost one ``bytes.decode`` of them all per run
(~10-byte Cyrillic keys: ~0.07 us a record more, hot, than ASCII ones).

Thread-safety: pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mqcore.format.layout import (
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
from mqcore.format.record import MESSAGE_MAGIC_CODE

Int64s = npt.NDArray[np.int64]

_HEADER_SIZE = HEADER_SIZES[0]  # V1 record, IPv4 hosts
_BODY_LENGTH_POSITION = _HEADER_SIZE - 4  # BODYLENGTH ends the header
# After the value: the topic length byte and, after the topic, PROPERTIESLENGTH.
_AFTER_VALUE = TOPIC_LENGTH_V1.size + PROPERTIES_LENGTH.size
assert MIN_RECORD_SIZE == _HEADER_SIZE + _AFTER_VALUE
_UNIQ_KEY_NAME = b"UNIQ_KEY"  # a property is NAME \x01 VALUE
_UNIQ_KEY_PAIR_SIZE = len(_UNIQ_KEY_NAME) + 1
_UNIQ_KEY_NAME_INT = int.from_bytes(_UNIQ_KEY_NAME, "big")  # as an '>i8' read of it
_KEYS_OPEN = b"KEYS\x01"
_KEYS_NAME_INT = int.from_bytes(_KEYS_OPEN[:4], "big")  # as an '>i4' read of it
# "KEYS\x01", a key byte, "\x02UNIQ_KEY\x01": the least a keyed record's properties hold.
_MIN_KEYED_SIZE = len(_KEYS_OPEN) + 2 + _UNIQ_KEY_PAIR_SIZE
_TS_BOUND = 1 << 62  # born timestamps within +-2**62: a delta of two fits int64
# Varint lengths: a value below 2**(7k) takes k bytes.
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
# Prefix columns: length (5) + attributes (1) + timestamp delta (10) + offset delta (5)
# + key length (3: a key is part of at most 32767 bytes of properties) + value length (5)
# = 29, then the header count byte.
_PREFIX_COLUMNS = 30
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
    if not len(body):
        return None
    # Only the records that may fit, and the one after them, need their properties read:
    # a Kafka record is at least its value and 7 bytes (one per varint and fixed byte).
    may_fit = int(np.searchsorted(np.cumsum(body + 7), room_bytes, side="right"))
    k = min(len(body), max(may_fit, 1) + 1)
    key_at, key_len = _properties(data, positions[:k], sizes[:k], value_at[:k], body[:k])
    keys, n = _key_bytes(data, key_at, key_len)
    if n == 0:
        return None
    value_at, body, ts, key_at, key_len = value_at[:n], body[:n], ts[:n], key_at[:n], key_len[:n]
    if base_timestamp is None:
        base_timestamp = int(ts[0])
    delta = ts - base_timestamp
    fields = (
        (delta << 1) ^ (delta >> 63),  # timestamp delta, zigzag
        np.arange(first_offset - base_offset, first_offset - base_offset + n) << 1,
        (key_len << 1) ^ (key_len >> 63),  # key length, -1 (no key) included
        body << 1,  # value length
    )
    zigzags = [z.view(np.uint64) for z in fields]
    lengths = [_varint_lengths(z) for z in zigzags]
    key_size = np.maximum(key_len, 0)
    # attributes and header count, the four varints, the key and the value
    record_size = 2 + lengths[0] + lengths[1] + lengths[2] + lengths[3] + key_size + body
    zigzags.insert(0, (record_size << 1).view(np.uint64))
    lengths.insert(0, _varint_lengths(zigzags[0]))
    ends = np.cumsum(lengths[0] + record_size)
    # The records that fit, all usual; if the next one is not (n), ViewBatch.add decides
    # (its Kafka size differs, or it is damaged).
    m = int(np.searchsorted(ends, room_bytes, side="right"))
    if m == 0 and first_always:
        m = 1
    if m == 0:  # the first does not fit
        return EncodedRun(b"", 0, int(ts[0]), int(ts[0]), True)
    records = _assemble(
        data,
        [z[:m] for z in zigzags],
        [length[:m] for length in lengths],
        (value_at[:m], body[:m]),
        (key_size[:m], keys[: int(key_size[:m].sum())]),
        ends[:m],
    )
    return EncodedRun(records, m, int(ts[0]), int(ts[:m].max()), m < n)


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


def _properties(
    data: bytes, positions: Int64s, sizes: Int64s, value_at: Int64s, body: Int64s
) -> tuple[Int64s, Int64s]:
    """``(key position, key length)`` (-1: no key) of the leading records (their headers
    checked) with a usual topic length and properties: none, ``UNIQ_KEY`` alone, or
    ``KEYS`` then ``UNIQ_KEY``. Each check is made for the records that passed the one
    before, so that every read stays inside its record."""
    # 1. The topic length byte (value end + 3 <= record end), then PROPERTIESLENGTH.
    u8 = np.frombuffer(data, np.uint8, int(positions[-1] + sizes[-1]))
    value_end = value_at + body
    end = positions + sizes
    topic_length = u8[value_end].astype(np.int64)
    at = value_end + _AFTER_VALUE + topic_length
    n = leading((topic_length <= V1_MAX_TOPIC_BYTES) & (at <= end))
    end, at = end[:n], at[:n]
    size = end - at
    framed = _unaligned(data, ">i2")[at - PROPERTIES_LENGTH.size] == size
    # 2. Where the \x01s are: decode_message's parse splits pairs at \x02 and a pair's name
    # at its first \x01, so a record with one \x01, right after a leading "UNIQ_KEY", has
    # that property alone, and one with two, after a leading "KEYS" and after the
    # "\x02UNIQ_KEY" that ends the key, has those two (if no \x02 is inside the key:
    # _key_bytes checks that in the key bytes, rather than here in the whole copy).
    ones = np.flatnonzero(u8 == 1)
    first = np.searchsorted(ones, at)
    count = np.searchsorted(ones, end) - first
    one_at = ones[np.minimum(first, len(ones) - 1)] if len(ones) else at
    i8 = _unaligned(data, ">i8")
    uniq = (count == 1) & (one_at == at + len(_UNIQ_KEY_NAME))
    uniq &= i8[np.where(uniq, at, 0)] == _UNIQ_KEY_NAME_INT
    # 3. "KEYS\x01" key "\x02UNIQ_KEY\x01" ..., a key of at least one byte.
    key_at = at + len(_KEYS_OPEN)
    keyed = (count == 2) & (one_at == key_at - 1) & (size >= _MIN_KEYED_SIZE)
    keyed &= _unaligned(data, ">i4")[np.where(keyed, at, 0)] == _KEYS_NAME_INT
    key_end = key_at  # the key's \x02 (the reads below stay in [at - 4, end) of a record)
    if keyed.any():
        # The second \x01 ends "UNIQ_KEY", which comes right after the key's \x02.
        second = ones[np.where(keyed, first + 1, 0)]
        key_end = np.where(keyed, second - len(_UNIQ_KEY_NAME) - 1, key_at)
        keyed &= (key_end > key_at) & (u8[np.where(keyed, key_end, 0)] == 2)
        keyed &= i8[np.where(keyed, key_end + 1, 0)] == _UNIQ_KEY_NAME_INT
    n = leading(framed & ((size == 0) | uniq | keyed))
    return np.where(keyed, key_at, at)[:n], np.where(keyed, key_end - key_at, -1)[:n]


def _key_bytes(data: bytes, key_at: Int64s, key_len: Int64s) -> tuple[npt.NDArray[np.uint8], int]:
    """The key bytes of the leading records whose key (if any) is what ``_fast`` reads,
    back to back, and how many records that is. Its parse ends a pair at the first
    ``\\x02``, and it decodes properties with errors replaced and encodes the key again,
    which changes the bytes of a key that is not UTF-8: a key with a ``\\x02`` or that is
    not UTF-8 stops the run. ASCII keys (no byte past 0x7F) need no decode."""
    count = len(key_len)
    if not count:
        return np.zeros(0, np.uint8), 0
    size = np.maximum(key_len, 0)
    starts = np.cumsum(size) - size  # of each key in the key bytes
    index = np.repeat(key_at - starts, size) + np.arange(int(starts[-1] + size[-1]))
    keys = np.frombuffer(data, np.uint8)[index]
    twos = np.flatnonzero(keys == 2)
    if len(twos):
        count = int(np.searchsorted(starts, twos[0], side="right")) - 1
    if (keys >= 0x80).any():
        # One strict decode of all the keys, each followed by an ASCII byte so that no
        # sequence runs on into the next key: the key of the first error stops the run.
        # (A Python decode per key measured ~1 us a record with ~10-byte Cyrillic keys.)
        shift = np.arange(len(size))  # the separators before each key
        text = np.zeros(len(keys) + len(size), np.uint8)
        text[np.repeat(shift, size) + np.arange(len(keys))] = keys
        try:
            text.tobytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = int(np.searchsorted(starts + shift, exc.start, side="right")) - 1
            count = min(count, bad)
    return keys[: int(starts[count])] if count < len(key_len) else keys, count


def _assemble(
    data: bytes,
    zigzags: list[npt.NDArray[np.uint64]],
    lengths: list[Int64s],
    values: tuple[Int64s, Int64s],
    keys: tuple[Int64s, npt.NDArray[np.uint8]],
    ends: Int64s,
) -> bytes:
    """The records: each prefix (the five varints in ``zigzags`` and the attributes byte),
    its key (``keys``: each record's key size and the key bytes back to back) placed
    before the value length, its value (``values``: position in ``data``, length), and a
    header count of 0."""
    value_at, body = values
    key_size, key_bytes = keys
    m = len(body)
    cols = _PREFIX_COLUMNS
    prefix = np.zeros((m, cols), np.uint8)
    flat = prefix.reshape(-1)
    row = np.arange(0, m * cols, cols, dtype=np.int64)
    column = row.copy()
    length_len, ts_len, offset_len, key_length_len, value_len = lengths
    # Written left to right: a varint's bytes past its length are zeros (see _put_varints),
    # so they only ever land where a later field is written, or stay 0.
    _put_varints(flat, column, zigzags[0], length_len)
    column += length_len + 1  # attributes: 0
    _put_varints(flat, column, zigzags[1], ts_len)
    column += ts_len
    _put_varints(flat, column, zigzags[2], offset_len)
    column += offset_len
    _put_varints(flat, column, zigzags[3], key_length_len)
    column += key_length_len
    key_out = column - row  # where the key goes in the record, past the prefix's first part
    _put_varints(flat, column, zigzags[4], value_len)
    prefix_len = column + value_len - row
    # Each prefix and the header count byte after the value (column prefix_len: 0).
    around = prefix[np.arange(cols) <= prefix_len[:, None]]
    # Output: prefix 0 (key 0 inside it), value 0, (0, prefix 1), value 1, ..., value m-1, 0.
    starts = np.empty(m, np.int64)  # of each record in the output (ends: of each one)
    starts[0] = 0
    starts[1:] = ends[:-1]
    value_out = starts + prefix_len + key_size
    gaps_out = np.empty(m, np.int64)
    gaps_out[0] = value_out[0]
    np.subtract(value_out[1:], value_out[:-1] + body[:-1], out=gaps_out[1:])
    values_out = _spans(gaps_out, body, 1)
    # Input: the bytes before value 0, value 0, the bytes between values 0 and 1, ...
    gaps_in = np.empty(m, np.int64)
    gaps_in[0] = value_at[0]
    np.subtract(value_at[1:], value_at[:-1] + body[:-1], out=gaps_in[1:])
    values_in = _spans(gaps_in, body, len(data) - int(value_at[-1] + body[-1]))
    out = np.empty(int(ends[-1]), np.uint8)
    out[values_out] = np.frombuffer(data, np.uint8)[values_in]
    # The masks are as long as the input and the output (MBs): one freed, the other
    # turned into the mask of the generated bytes in place, not allocated again.
    del values_in
    generated = np.logical_not(values_out, out=values_out)
    if len(key_bytes):
        key_starts = np.cumsum(key_size) - key_size
        where = np.repeat(starts + key_out - key_starts, key_size) + np.arange(len(key_bytes))
        out[where] = key_bytes
        generated[where] = False
    out[generated] = around
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
