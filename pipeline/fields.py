"""Vectorised kernels of the columnar decoder: whole-chunk numpy/pyarrow operations, no row loop.

Every function works on all records of a chunk at once (``columnar.decode_chunk`` calls them),
so the per-record cost is a few nanoseconds of C instead of a Python call:

* :class:`ChunkView`: big-endian int32/int64 fields at arbitrary (unaligned) byte positions,
  read through numpy views whose stride is one byte, so reading a field of n records is one
  fancy-index gather of n items.
* :func:`gather`: ``data[starts[i]:stops[i]]`` for every i as one compact Arrow array, with a
  single ``take`` (element 2i of an array whose offsets interleave starts and stops).
* :func:`parse_properties`: RocketMQ's ``string2messageProperties`` over every record's
  PROPERTIES bytes, as the entries of a ``map<string,string>`` plus the value of named
  properties (TAGS, KEYS, UNIQ_KEY) per record.
* :func:`hex_ids` and :func:`host_texts`: offsetMsgId hex and "ip:port" text.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "ChunkView",
    "Properties",
    "gather",
    "hex_ids",
    "host_texts",
    "parse_properties",
    "split_keys",
]

type I64 = npt.NDArray[np.int64]

# Two upper-case hex digits per byte value, as one little-endian uint16: high digit first in memory.
_HEX2 = np.array(
    [ord("0123456789ABCDEF"[b >> 4]) | ord("0123456789ABCDEF"[b & 15]) << 8 for b in range(256)],
    np.uint16,
)
_NAME_VALUE, _ENTRY = 0x01, 0x02  # mqcore.store.properties' separators
_MAX_LAG_CHECK = 16  # records with more properties than this: duplicates found by sorting


class ChunkView:
    """A chunk's bytes as numpy arrays: octets, and big-endian ints starting at any byte."""

    def __init__(self, data: bytes | memoryview) -> None:
        self.buffer = pa.py_buffer(data)
        self.octets = np.frombuffer(data, np.uint8)
        size = len(data)
        # Stride 1: element i is the integer whose first byte is data[i] (numpy allows
        # unaligned items), so a field of n records is one gather of n items.
        self._be32 = np.ndarray((max(size - 3, 0),), ">i4", data, 0, (1,))
        self._be64 = np.ndarray((max(size - 7, 0),), ">i8", data, 0, (1,))

    def int32(self, at: I64) -> npt.NDArray[np.int32]:
        return self._be32[at].astype(np.int32)

    def int64(self, at: I64) -> I64:
        return self._be64[at].astype(np.int64)

    def records(self, at: I64, dtype: np.dtype[np.void]) -> npt.NDArray[np.void]:
        """The ``dtype`` record (a fixed layout) starting at each of ``at``, copied out.

        Every ``at[i] + dtype.itemsize`` must be within the chunk.
        """
        count = max(len(self.octets) - dtype.itemsize + 1, 0)
        # Gathered as opaque items (a plain memcpy each, ~8x faster than gathering a dtype
        # with fields), then seen through the layout.
        raw = np.ndarray((count,), np.dtype((np.void, dtype.itemsize)), self.octets, 0, (1,))
        return raw[at].view(dtype)


def gather(buffer: pa.Buffer, starts: I64, stops: I64, kind: pa.DataType) -> pa.Array:
    """``buffer[starts[i]:stops[i]]`` for every i as one compact array of ``kind``.

    ``starts`` must ascend with ``stops[i] <= starts[i+1]`` (fields of records in order).
    """
    n = len(starts)
    if n == 0:
        return pa.array([], kind)
    offsets = np.empty(2 * n + 1, np.int32)
    offsets[0 : 2 * n : 2] = starts
    offsets[1 : 2 * n : 2] = stops
    offsets[2 * n] = stops[-1]
    pairs = pa.Array.from_buffers(kind, 2 * n, [None, pa.py_buffer(offsets), buffer])
    return pc.take(pairs, pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))


def hex_ids(hosts: I64, offsets: I64) -> pa.Array:
    """Upper-case hex of an 8-byte host field then an int64 offset, per record (32 chars).

    The host part is formatted once per distinct host; the offset's 16 digits come from its
    nibbles, so no per-byte gather of the chunk is needed.
    """
    n = len(hosts)
    encoded = pa.array(hosts).dictionary_encode()
    distinct = np.array(encoded.dictionary.to_numpy(zero_copy_only=False), np.int64)
    text = np.empty((n, 16), np.uint16)
    host_digits = _HEX2[distinct.astype(">i8").view(np.uint8).reshape(-1, 8)]
    text[:, :8] = host_digits[encoded.indices.to_numpy(zero_copy_only=False)]
    text[:, 8:] = _HEX2[offsets.astype(">i8").view(np.uint8).reshape(-1, 8)]
    bounds = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(bounds), pa.py_buffer(text.tobytes())]
    )


def host_texts(packed: I64) -> pa.Array:
    """8-byte IPv4 host fields (read as one big-endian int64) as "ip:port" text.

    A store has few distinct hosts: each is formatted once and the texts are taken by index.
    """
    encoded = pa.array(packed).dictionary_encode()
    texts = []
    for value in encoded.dictionary.to_pylist():
        raw = int(value).to_bytes(8, "big", signed=True)
        port = int.from_bytes(raw[4:], "big", signed=True)
        texts.append(f"{socket.inet_ntop(socket.AF_INET, raw[:4])}:{port}")
    return pc.take(pa.array(texts, pa.string()), encoded.indices)


@dataclass(slots=True)
class Properties:
    """The parsed PROPERTIES of n records."""

    map: pa.Array
    """``map<string,string>`` per record (RocketMQ's rule; a later duplicate name wins)."""
    names: pa.Array
    values: pa.Array
    record: npt.NDArray[np.int64]
    """Record index of each entry of ``names``/``values`` (ascending)."""
    duplicates: bool
    keys: _NameKeys
    """Each name's length and first 8 bytes (:func:`_name_keys`), for :meth:`lookup`."""

    def lookup(self, name: str) -> pa.Array:
        """The value of property ``name`` per record, null where absent (the last one wins)."""
        n = len(self.map)
        if self.duplicates:
            return pc.map_lookup(self.map, name, "last")
        raw = name.encode()
        if len(raw) <= _KEY_BYTES:  # the key is the whole name: integer compares suffice
            keys = self.keys
            match = (keys.length == len(raw)) & (keys.word == _key_word(raw))
        else:
            match = pc.equal(self.names, name).to_numpy(zero_copy_only=False)
        hits = np.flatnonzero(match)
        index = np.full(n, -1, np.int64)
        index[self.record[hits]] = hits
        missing = index < 0
        if missing.all():
            return pa.nulls(n, pa.string())
        index[missing] = 0
        return pc.take(self.values, pa.array(index, mask=missing))


_KEY_BYTES = 8  # names up to this long are identified exactly by their _NameKeys
# _KEPT[k]: the mask keeping the first k bytes of a big-endian word (k = 0..8).
_KEPT = np.array([((1 << 64) - 1) ^ ((1 << (64 - 8 * k)) - 1) for k in range(9)], np.uint64)


@dataclass(slots=True)
class _NameKeys:
    """Per name: its byte length and its first 8 bytes as one big-endian word (zero-padded)."""

    length: I64
    word: npt.NDArray[np.uint64]


def _key_word(raw: bytes) -> np.uint64:
    return np.uint64(int.from_bytes(raw[:_KEY_BYTES].ljust(_KEY_BYTES, b"\0"), "big"))


def _name_keys(names: pa.Array) -> _NameKeys:
    """The :class:`_NameKeys` of every name of a compact ``string`` array.

    One integer gather instead of hashing strings: equal names have equal keys, and names of
    up to 8 bytes (TAGS, KEYS, UNIQ_KEY) are equal iff their keys are.
    """
    count = len(names)
    bounds = np.frombuffer(names.buffers()[1], np.int32, count + 1 + names.offset)[names.offset :]
    length = np.diff(bounds).astype(np.int64)
    size = int(bounds[-1])
    padded = np.zeros(size + 8, np.uint8)  # an 8-byte read may run past the last name
    if size:
        padded[:size] = np.frombuffer(names.buffers()[2], np.uint8, size)
    words = np.ndarray((size + 1,), ">u8", padded, 0, (1,))
    word = words[bounds[:-1]].astype(np.uint64) & _KEPT[np.minimum(length, _KEY_BYTES)]
    return _NameKeys(length, word)


def parse_properties(text: pa.Array) -> Properties:
    """RocketMQ's ``string2messageProperties`` over a ``string`` array, all records at once.

    Each record is split on ``\\x02``; a segment is an entry iff its first ``\\x01`` is
    neither its first nor its last byte (non-empty name and value); a value keeps any later
    ``\\x01``. ``text`` must be valid UTF-8 (separators are ASCII, so a cut never splits a
    character).
    """
    n = len(text)
    text = text if text.offset == 0 else pc.take(text, pa.array(np.arange(n, dtype=np.int32)))
    bounds = np.frombuffer(text.buffers()[1], np.int32, n + 1).astype(np.int64)
    size = int(bounds[-1])
    data_buffer = text.buffers()[2] if size else pa.py_buffer(b"")
    octets = np.frombuffer(data_buffer, np.uint8, size)
    # Every separator, in order, from one pass (a NUL also passes the test; dropped after).
    marks = np.flatnonzero(octets <= max(_NAME_VALUE, _ENTRY))
    kinds = octets[marks]
    if len(kinds) and not kinds.all():
        marks = marks[kinds != 0]
        kinds = octets[marks]
    is_sep = kinds == _ENTRY
    sep_at = np.flatnonzero(is_sep)  # indices into marks
    seps = marks[sep_at]
    # The first separator at or after each record bound, and how many \x02 come before it.
    first_mark = np.searchsorted(marks, bounds)
    before = np.searchsorted(seps, bounds)
    # Segments end at every \x02 and every record end, in position order; a record's end comes
    # after its own \x02s (all before it) and before the next record's. Record r has
    # before[r+1] - before[r] \x02s, so its end is segment end number before[r+1] + r.
    segments = len(seps) + n
    end_slot = before[1:] + np.arange(n)
    is_end = np.zeros(segments, np.bool_)
    is_end[end_slot] = True
    sep_slot = np.flatnonzero(~is_end)
    ends = np.empty(segments, np.int64)
    ends[end_slot] = bounds[1:]
    ends[sep_slot] = seps
    # A segment starts after a \x02 (skip it) or at a record start (where the last one ended).
    # Its first \x01, if any, is the first separator after its start: the separator after
    # that \x02, or the first one at or after the record start.
    starts = np.empty_like(ends)
    following = np.empty(segments, np.int64)  # index into marks; len(marks): none left
    if segments:
        starts[0] = 0
        starts[1:] = ends[:-1] + ~is_end[:-1]
        record_first = np.concatenate([[0], end_slot[:-1] + 1])
        following[record_first] = first_mark[:-1]
        after_sep = sep_slot + 1
        inside = after_sep < segments  # a \x02 ending the very last segment starts none
        following[after_sep[inside]] = sep_at[inside] + 1
    found = np.append(kinds, _ENTRY)[following] == _NAME_VALUE
    first_one = np.where(found, np.append(marks, size + 1)[following], size + 1)
    keep = (first_one > starts) & (first_one < ends - 1)
    # Record r owns its \x02 count plus one segments, in order.
    record = np.repeat(np.arange(n, dtype=np.int64), np.diff(before) + 1)[keep]
    starts, ends, first_one = starts[keep], ends[keep], first_one[keep]
    names = gather(data_buffer, starts, first_one, pa.string())
    values = gather(data_buffer, first_one + 1, ends, pa.string())
    keys = _name_keys(names)
    counts = np.bincount(record, minlength=n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    duplicates = _has_duplicates(names, keys, record, int(counts.max()) if n else 0)
    if duplicates:
        mapped = _last_wins(offsets, names, values)
    else:
        mapped = pa.MapArray.from_arrays(pa.array(offsets), names, values)
    return Properties(mapped, names, values, record, duplicates, keys)


def _has_duplicates(
    names: pa.Array, keys: _NameKeys, record: npt.NDArray[np.int64], widest: int
) -> bool:
    """Whether a name repeats within one record (never written by RocketMQ or mqcore)."""
    if widest < 2:
        return False
    if widest <= _MAX_LAG_CHECK:  # entries of a record are adjacent: compare at each lag
        # Equal names have equal keys, so keys that never repeat prove there is no duplicate;
        # only then (or for long names) are the strings themselves compared.
        word, length = keys.word, keys.length
        for lag in range(1, widest):
            if np.any(
                (word[lag:] == word[:-lag])
                & (length[lag:] == length[:-lag])
                & (record[lag:] == record[:-lag])
            ):
                return _names_repeat(names, record, widest)
        return False
    return _names_repeat(names, record, widest)


def _names_repeat(names: pa.Array, record: npt.NDArray[np.int64], widest: int) -> bool:
    """The exact test of :func:`_has_duplicates`, on the name strings."""
    codes = names.dictionary_encode().indices.to_numpy().astype(np.int64)
    if widest <= _MAX_LAG_CHECK:
        for lag in range(1, widest):
            if np.any((codes[lag:] == codes[:-lag]) & (record[lag:] == record[:-lag])):
                return True
        return False
    combined = record * (int(codes.max()) + 1) + codes
    return len(np.unique(combined)) != len(combined)


def _last_wins(offsets: npt.NDArray[np.int32], names: pa.Array, values: pa.Array) -> pa.Array:
    """A name repeats within a record: the later value wins (Java overwrites)."""
    bounds = offsets.tolist()
    names_list, values_list = names.to_pylist(), values.to_pylist()
    rows = [
        list(dict(zip(names_list[a:b], values_list[a:b], strict=True)).items())
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    return pa.array(rows, pa.map_(pa.string(), pa.string()))


def split_keys(value: pa.Array, kind: pa.DataType) -> pa.Array:
    """KEYS values split on a single space, empty keys dropped; [] where null."""
    parts = pc.split_pattern(pc.fill_null(value, ""), " ")
    flat = parts.flatten()
    keep = pc.greater(pc.binary_length(flat), 0)
    if keep.false_count:
        kept = np.zeros(len(flat) + 1, np.int32)
        np.cumsum(keep.to_numpy(zero_copy_only=False), out=kept[1:])
        offsets = pa.array(kept[parts.offsets.to_numpy()])
        flat = pc.filter(flat, keep)
    else:
        offsets = parts.offsets
    return pa.ListArray.from_arrays(offsets, flat).cast(kind)
