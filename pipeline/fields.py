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

    def __init__(self, data: bytes) -> None:
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

    def lookup(self, name: str) -> pa.Array:
        """The value of property ``name`` per record, null where absent (the last one wins)."""
        n = len(self.map)
        if self.duplicates:
            return pc.map_lookup(self.map, name, "last")
        hits = np.flatnonzero(pc.equal(self.names, name).to_numpy(zero_copy_only=False))
        index = np.full(n, -1, np.int64)
        index[self.record[hits]] = hits
        missing = index < 0
        if missing.all():
            return pa.nulls(n, pa.string())
        index[missing] = 0
        return pc.take(self.values, pa.array(index, mask=missing))


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
    seps = np.flatnonzero(octets == _ENTRY)
    # Segment ends: every \x02 and every record end; a segment starts after a \x02 (skip it)
    # or at a record start. Ends sort before a \x02 at the same position (next record).
    ends = np.concatenate([bounds[1:], seps])
    is_sep = np.concatenate([np.zeros(n, np.int64), np.ones(len(seps), np.int64)])
    order = np.argsort(2 * ends + is_sep, kind="stable")
    ends, is_sep = ends[order], is_sep[order]
    starts = np.empty_like(ends)
    if len(ends):
        starts[0] = 0
        starts[1:] = ends[:-1] + is_sep[:-1]
    ones = np.flatnonzero(octets == _NAME_VALUE)
    at = np.searchsorted(ones, starts)
    first_one = np.append(ones, size + 1)[at]  # size + 1: no \x01 left
    keep = (first_one > starts) & (first_one < ends - 1)
    # A segment belongs to the record whose end is the next record end at or after it.
    record = (np.cumsum(1 - is_sep) - (1 - is_sep))[keep]
    starts, ends, first_one = starts[keep], ends[keep], first_one[keep]
    names = gather(data_buffer, starts, first_one, pa.string())
    values = gather(data_buffer, first_one + 1, ends, pa.string())
    counts = np.bincount(record, minlength=n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    duplicates = _has_duplicates(names, record, int(counts.max()) if n else 0)
    if duplicates:
        return Properties(
            _last_wins(offsets, names, values), names, values, record.astype(np.int64), True
        )
    mapped = pa.MapArray.from_arrays(pa.array(offsets), names, values)
    return Properties(mapped, names, values, record.astype(np.int64), False)


def _has_duplicates(names: pa.Array, record: npt.NDArray[np.int64], widest: int) -> bool:
    """Whether a name repeats within one record (never written by RocketMQ or mqcore)."""
    if widest < 2:
        return False
    codes = names.dictionary_encode().indices.to_numpy().astype(np.int64)
    if widest <= _MAX_LAG_CHECK:  # entries of a record are adjacent: compare at each lag
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
