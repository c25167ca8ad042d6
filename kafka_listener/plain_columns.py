"""Produce's fast path, columnar: a records section's plain records read field by field
for all records at once with numpy (``plain_records.py`` has the rules).

``plain_records.plain_messages_loop`` reads each record's six varints in Python: about
0.9 us a record of the ~1.3 us it takes (5,000 keyless 100-byte records). Here the record
*lengths* are followed first (each record's start depends on the one before: runs of
records of one size are guessed at that stride and checked as arrays, other records
walked in Python); the
attributes, timestamp delta, offset delta, key, value length and header count of every
record are then decoded as arrays (varints as up to ``n`` gathered byte columns), and the
values (and text keys) are cut out at the positions found, in one call
(``mqcore.store.put.byte_cuts.cut``: slicing them one by one took ~0.15 us a value), into the
store's ``PlainColumns``, with no ``Message`` per record: 9,082 keyless 100-byte records
(a 1 MB batch, confluent-kafka's usual one in ``bench/kafka.py``) take ~0.26 us a record
where slicing took ~0.36-0.43 and building the messages ~0.5 (thread time); the store
encodes the columns without messages too (``mqcore.store.put.plain_batch.encode_plain_columns``).
Text keys are gathered into one buffer and decoded and split once (``_keys``): 9,082
records keyed ``order-{i}`` take ~0.46-0.49 us a record where cutting and decoding each key
took ~0.68-0.69 (timeit, loaded machine; keyless ~0.33).

Same acceptance as ``plain_messages_loop``, varint for varint: a varint longer than its
limit, a read past the end of the section, a record whose fields do not end exactly at its
end, anything that is not plain, all give None. Where the arrays could not represent the
loop's arithmetic (a timestamp varint of 10 bytes, whose value may exceed 64 bits, or a
timestamp beyond +-2**62) :func:`plain_columns` says it has not decided, and the caller
runs the loop. ``tests/kafka_listener/test_plain_records.py`` compares the two,
Hypothesis-generated sections (well formed and damaged) included.

Thread-safety: a pure function.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mqcore.format.msgid import HostAddress
from mqcore.store.put.byte_cuts import cut
from mqcore.store.put.plain_batch import PlainColumns

from .record_codec import MIN_RECORD_BYTES
from .run_records import leading

U64s = npt.NDArray[np.uint64]
I64s = npt.NDArray[np.int64]

_MIN_LENGTH_ZIGZAG = MIN_RECORD_BYTES << 1
_PAD = 16  # zero bytes after the section: every gathered varint byte lies in the copy
_TS_BOUND = 1 << 62
_VARINT_BYTES = 5  # an int32 varint's limit
_VARLONG_BYTES = 10  # an int64 varint's limit; 10-byte ones are left to the loop
# Below this many records the loop is as fast (measured: equal near 256, 1.5 times slower
# at 5,000 records: ~1.4 against ~0.9 us a record).
MIN_COLUMN_RECORDS = 256
UNDECIDED = "undecided"  # plain_columns' answer when the loop must decide
# _record_starts: the first guessed run, the longest, a run short enough to count as a
# miss, and how many misses hand the rest to the walk.
_FIRST_RUN = 64
_MAX_RUN = 1 << 16
_SHORT_RUN = 8
_MAX_MISSES = 4
_SPACE = ord(" ")  # _keys' separator
_KEYS_OPEN, _PAIR_END = "KEYS\x01", "\x02"  # a KEYS property pair: KEYS \x01 key \x02
_KEYS_GLUE = _PAIR_END + _KEYS_OPEN


def plain_columns(
    buf: bytes, count: int, base_timestamp: int, topic: str, born_host: HostAddress | None
) -> PlainColumns | None | str:
    """``plain_records.plain_messages_loop(...)``'s answer as columns (its messages are
    ``to_messages()``), or :data:`UNDECIDED` (see the module docstring). Never raises on
    bad input."""
    end = len(buf)
    if count <= 0 or count * MIN_RECORD_BYTES > end:
        return None
    if not -_TS_BOUND < base_timestamp < _TS_BOUND:
        return UNDECIDED
    data = np.frombuffer(buf + bytes(_PAD), np.uint8)
    at = _record_starts(buf, data, count)
    if at is None:
        return None
    length_z, heads, ok = _varints(data, at, _VARINT_BYTES, end)
    if not ok.all() or (length_z & np.uint64(1)).any() or (length_z < _MIN_LENGTH_ZIGZAG).any():
        return None
    ends = np.empty_like(at)
    ends[:-1] = at[1:]
    ends[-1] = end
    # attributes (1 byte, unused), then the timestamp delta
    ts_z, pos, ok = _varints(data, heads + 1, _VARLONG_BYTES, end)
    if not ok.all():
        return None
    if (pos - heads - 1 == _VARLONG_BYTES).any():
        return UNDECIDED  # its value may not fit 64 bits
    offset_z, pos, ok = _varints(data, pos, _VARINT_BYTES, end)
    ok &= offset_z == np.arange(0, 2 * count, 2, dtype=np.uint64)
    # key: 0x01 (-1) is null; else a positive even zigzag (text of that many bytes)
    null_key = data[np.minimum(pos, end)] == 1
    keyless = bool(null_key.all())
    if keyless:  # the usual batch: no key to decode
        key_at = key_end = pos = pos + 1
    else:
        key_z, after_key, key_ok = _varints(data, pos, _VARINT_BYTES, end)
        ok &= null_key | (key_ok & (key_z & np.uint64(1) == 0) & (key_z > 0))
        key_at = np.where(null_key, -1, after_key)
        pos = np.where(null_key, pos + 1, after_key + (key_z >> np.uint64(1)).astype(np.int64))
        key_end = pos
    # value: a positive even zigzag, then its bytes, then a header count of 0
    value_z, value_at, value_ok = _varints(data, np.minimum(pos, end), _VARINT_BYTES, end)
    ok &= (pos <= end) & value_ok & (value_z & np.uint64(1) == 0) & (value_z > 0)
    value_end = value_at + (value_z >> np.uint64(1)).astype(np.int64)
    ok &= value_end + 1 == ends
    if not ok.all() or data[value_end].any():
        return None
    delta = (ts_z >> np.uint64(1)).astype(np.int64) ^ -(ts_z & np.uint64(1)).astype(np.int64)
    if (np.abs(delta) >= _TS_BOUND).any():
        return UNDECIDED
    timestamps = (delta + base_timestamp).tolist()
    bodies = cut(buf, value_at, value_end - value_at)
    if keyless:  # the usual batch: no key to decode
        return PlainColumns(topic, bodies, [""] * count, timestamps, born_host)
    found = _keys(data, key_at, key_end)
    if found is None:
        return None
    keys, pairs = found
    return PlainColumns(topic, bodies, keys, timestamps, born_host, pairs)


def _record_starts(buf: bytes, data: npt.NDArray[np.uint8], count: int) -> I64s | None:
    """Where each of ``count`` records starts, following the length varints (their signs
    and sizes are checked afterwards, with the arrays), or None when a length varint is
    longer than 5 bytes, a read passes the end of ``buf``, or the records do not end
    exactly there. A negative length moves forward too, so the walk always ends.

    Records of one size come in runs (a producer's values are often alike, and the varints
    of the timestamp and offset deltas grow only now and then), so after each record taken
    by the walk the next ones are guessed at that stride and checked at once: a guess is
    taken when the length varint there leads exactly to the next guess, which is where the
    walk would go. After ``_MAX_MISSES`` short runs (records of varied sizes) the walk takes
    the rest."""
    end = len(buf)
    starts = np.empty(count, np.int64)
    i = pos = misses = 0
    chunk = _FIRST_RUN
    while i < count:
        if misses > _MAX_MISSES:
            walked = _walk(buf, pos, count - i)
            if walked is None:
                return None
            starts[i:], pos = walked
            break
        walked = _walk(buf, pos, 1)
        if walked is None:
            return None
        starts[i] = pos
        i += 1
        stride, pos = walked[1] - pos, walked[1]
        k = min(count - i, chunk, -(-(end - pos) // stride))  # guesses inside buf
        if k <= 0:
            continue
        guesses = np.arange(pos, pos + stride * k, stride, dtype=np.int64)
        length_z, after, ok = _varints(data, guesses, _VARINT_BYTES, end)
        ok &= after + (length_z >> np.uint64(1)).astype(np.int64) == guesses + stride
        n = leading(ok)
        starts[i : i + n] = guesses[:n]
        i += n
        pos += stride * n
        if n == k:
            chunk = min(2 * chunk, _MAX_RUN)
        elif n < _SHORT_RUN:
            misses += 1
    return starts if pos == end else None


def _walk(buf: bytes, pos: int, count: int) -> tuple[list[int], int] | None:
    """``count`` record starts from ``pos`` by their length varints, and the position after
    the last record; None when a varint is too long or a read passes the end."""
    starts: list[int] = []
    append = starts.append
    try:
        for _ in range(count):
            append(pos)
            b = buf[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
            else:
                c = buf[pos + 1]
                if c < 0x80:
                    pos += 2 + (((b & 0x7F) | (c << 7)) >> 1)
                else:
                    b, after = _uvarint(buf, pos)
                    if b < 0:
                        return None
                    pos = after + (b >> 1)
    except IndexError:
        return None
    return starts, pos


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An int32 varint's value and end, or (-1, pos) when longer than 5 bytes."""
    value = shift = 0
    for i in range(pos, pos + _VARINT_BYTES):
        b = buf[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
    return -1, pos


def _varints(
    data: npt.NDArray[np.uint8], at: I64s, limit: int, end: int
) -> tuple[U64s, I64s, npt.NDArray[np.bool_]]:
    """Unsigned varints at ``at`` (at most ``limit`` bytes each): values, where each ends,
    and whether it is valid (ends within ``limit`` bytes, starts inside the section).
    ``data`` holds the section and ``_PAD`` zeros, so every gather stays inside it."""
    at = np.minimum(at, end)  # a start past the end is invalid anyway (checked below)
    value = np.zeros(len(at), np.uint64)
    size = np.zeros(len(at), np.int64)
    going = np.ones(len(at), np.bool_)
    for k in range(limit):
        byte = data[at + k]
        value |= ((byte & 0x7F) * going).astype(np.uint64) << np.uint64(7 * k)
        size += going
        going &= byte >= 0x80
        if not going.any():
            break
    return value, at + size, ~going & (at < end)


def _keys(
    data: npt.NDArray[np.uint8], key_at: I64s, key_end: I64s
) -> tuple[list[str], tuple[bytes, I64s] | None] | None:
    """Each record's text key (``key_at`` -1: null, "") and, when every key is there and
    ASCII, their ``PlainColumns.key_pairs`` (made from the text with one ``replace``); None
    when a key is not UTF-8 or holds a space or a property separator (not plain).

    The keys are gathered into one buffer, a space after each but the last (a space in a
    key declines the batch anyway, so one more piece than records tells it), decoded once
    and split once: ~0.2 us a key less than cutting each key out and decoding it (9,082
    keys ``order-{i}``, module docstring). One decode says what a decode of each key says: a space cannot
    continue a UTF-8 sequence, so none runs from one key into the next."""
    count = len(key_at)
    lengths = np.where(key_at < 0, 0, key_end - key_at)
    spans = lengths + 1  # the key and its space
    out_at = np.cumsum(spans) - spans
    # Each output byte's source: the span's output start moved to its key's start (a
    # span's last byte reads the byte after the key, and is overwritten by the space).
    moved = np.repeat(key_at - out_at, spans)
    moved += np.arange(len(moved))
    joined = data[moved]
    joined[out_at + lengths] = _SPACE
    try:
        text = joined[:-1].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\x01" in text or "\x02" in text:
        return None
    keys = text.split(" ")
    if len(keys) != count:
        return None
    if (key_at < 0).any() or not text.isascii():
        return keys, None
    pairs = f"{_KEYS_OPEN}{text.replace(' ', _KEYS_GLUE)}{_PAIR_END}".encode("ascii")
    return keys, (pairs, lengths)
