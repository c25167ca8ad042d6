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
  properties (TAGS, KEYS, UNIQ_KEY) per record. The shape producers write (``n\\x01v\\x02``
  entries, the same names in every record) is recognised and cut with fewer steps; any other
  text takes the general rule.
* :func:`split_keys`: KEYS on spaces (the same shortcut when every value has as many keys).
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
    "repeat_text",
    "split_keys",
]

type I64 = npt.NDArray[np.int64]

# Two upper-case hex digits per byte value, as one little-endian uint16: high digit first in memory.
_HEX2 = np.array(
    [ord("0123456789ABCDEF"[b >> 4]) | ord("0123456789ABCDEF"[b & 15]) << 8 for b in range(256)],
    np.uint16,
)
# Four digits per pair of bytes, indexed by the pair read as a little-endian uint16 (first
# byte low): its digits first in memory. 256 KiB, half the lookups of _HEX2 (~35% faster).
_HEX4 = _HEX2[np.arange(65536) & 255].astype(np.uint32) | (
    _HEX2[np.arange(65536) >> 8].astype(np.uint32) << 16
)
_NAME_VALUE, _ENTRY = 0x01, 0x02  # mqcore.format.properties' separators
_SPACE = 0x20  # between KEYS
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


def hex_ids(raw: npt.NDArray[np.uint8]) -> pa.Array:
    """Upper-case hex of each row of an (n, 16) byte matrix (32 chars a row).

    One table lookup per two bytes (``np.take``: about twice as fast as fancy indexing
    here), straight into the string array's data buffer.
    """
    n = len(raw)
    pairs = np.ascontiguousarray(raw, np.uint8).view("<u2")  # (n, 8)
    text = np.take(_HEX4, pairs)  # (n, 8) uint32: four digits a pair
    bounds = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(bounds), pa.py_buffer(text)])


def host_texts(packed: I64) -> pa.Array:
    """8-byte IPv4 host fields (read as one big-endian int64) as "ip:port" text.

    A store has few distinct hosts (often one per chunk): each is formatted once and the
    texts are repeated or taken by index.
    """
    if len(packed) and (packed == packed[0]).all():
        return repeat_text(_host_text(int(packed[0])), len(packed))
    encoded = pa.array(packed).dictionary_encode()
    texts = [_host_text(value) for value in encoded.dictionary.to_pylist()]
    return pc.take(pa.array(texts, pa.string()), encoded.indices)


def _host_text(value: int) -> str:
    raw = value.to_bytes(8, "big", signed=True)
    port = int.from_bytes(raw[4:], "big", signed=True)
    return f"{socket.inet_ntop(socket.AF_INET, raw[:4])}:{port}"


def repeat_text(text: str, n: int) -> pa.Array:
    """A ``string`` array of ``n`` times ``text``, built from buffers (no per-row work)."""
    raw = text.encode()
    bounds = np.arange(0, len(raw) * (n + 1), len(raw), dtype=np.int32) if raw else None
    if bounds is None:
        bounds = np.zeros(n + 1, np.int32)
    data = np.tile(np.frombuffer(raw, np.uint8), n)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(bounds), pa.py_buffer(data)])


@dataclass(slots=True)
class Properties:
    """The parsed PROPERTIES of n records."""

    map: pa.Array
    """``map<string,string>`` per record (RocketMQ's rule; a later duplicate name wins)."""
    names: pa.Array
    values: pa.Array
    duplicates: bool
    record: npt.NDArray[np.int64] | None = None
    """Record index of each entry of ``names``/``values`` (ascending); None with a template."""
    keys: _NameKeys | None = None
    """Each name's length and first 8 bytes (:func:`_name_keys`), for :meth:`lookup`."""
    template: dict[str, int] | None = None
    """When every record has the same names in the same order (the usual chunk: one producer
    sets the same properties on every message): each name's last column. Entry ``r * width + c``
    is then record r's column c, so a lookup needs no per-entry search."""
    width: int = 0

    def lookup(self, name: str) -> pa.Array:
        """The value of property ``name`` per record, null where absent (the last one wins)."""
        n = len(self.map)
        if self.template is not None:
            column = self.template.get(name)
            if column is None:
                return pa.nulls(n, pa.string())
            every = np.arange(column, n * self.width, self.width, dtype=np.int32)
            return pc.take(self.values, pa.array(every))
        if self.duplicates:
            return pc.map_lookup(self.map, name, "last")
        assert self.record is not None and self.keys is not None
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
    # Every separator, in order, from one pass (a NUL also passes the test).
    marks = np.flatnonzero(octets <= max(_NAME_VALUE, _ENTRY))
    kinds = octets[marks]
    cuts = _regular_entries(octets, bounds, marks, kinds)
    if cuts is None:
        cuts = _any_entries(bounds, size, marks, kinds)
    starts, ones, ends, offsets = cuts
    names = gather(data_buffer, starts, ones, pa.string())
    values = gather(data_buffer, ones + 1, ends, pa.string())
    counts = np.diff(offsets)
    width = int(counts[0]) if n else 0
    template = _template(names, n, width) if (counts == width).all() else None
    if template is not None:
        duplicates = len(template) < width
        record, keys = None, None
    else:
        record = np.repeat(np.arange(n, dtype=np.int64), counts)
        keys = _name_keys(names)
        duplicates = _has_duplicates(names, keys, record, int(counts.max()) if n else 0)
    if duplicates:
        mapped = _last_wins(offsets, names, values)
    else:
        mapped = pa.MapArray.from_arrays(pa.array(offsets), names, values)
    return Properties(mapped, names, values, duplicates, record, keys, template, width)


type _Cuts = tuple[I64, I64, I64, npt.NDArray[np.int32]]
"""Per entry: name start, its ``\\x01``, value end (in the text); and map offsets per record."""


def _regular_entries(
    octets: npt.NDArray[np.uint8], bounds: I64, marks: I64, kinds: npt.NDArray[np.uint8]
) -> _Cuts | None:
    """The entries when every record is ``name\\x01value\\x02...`` (what producers write).

    That is: separators alternate ``\\x01``, ``\\x02`` (no NUL, no second ``\\x01`` in a
    value), every non-empty record ends with ``\\x02`` (so no entry crosses a record), and no
    name or value is empty (no entry is dropped). Then entry i is simply the bytes between
    ``\\x02`` number i-1 and number i. None when a record is not like that.
    """
    if len(marks) % 2:
        return None
    # Pairs of separator bytes read as one little-endian uint16: \x01 then \x02 each.
    if not (kinds.view("<u2") == _ENTRY << 8 | _NAME_VALUE).all():
        return None
    last = bounds[1:][bounds[1:] > bounds[:-1]] - 1
    if len(last) and not (octets[last] == _ENTRY).all():
        return None
    pairs = marks.reshape(-1, 2)
    ones, twos = pairs[:, 0].copy(), pairs[:, 1].copy()
    starts = np.empty_like(twos)
    starts[:1] = 0
    starts[1:] = twos[:-1] + 1
    if not ((ones > starts).all() and (twos > ones + 1).all()):
        return None
    return starts, ones, twos, _entry_offsets(twos, bounds)


def _entry_offsets(twos: I64, bounds: I64) -> npt.NDArray[np.int32]:
    """Map offsets: record r's entries are those whose ``\\x02`` lies inside it.

    Usually every record has as many entries as the first: that guess is checked (entry
    ``k * (r + 1) - 1`` must end record r) before the general search.
    """
    n = len(bounds) - 1
    k = int(np.searchsorted(twos, bounds[1])) if n else 0
    if k and len(twos) == k * n:
        guess = np.arange(0, k * n + 1, k, dtype=np.int32)
        if (twos[k - 1 :: k] == bounds[1:] - 1).all():
            return guess
    return np.searchsorted(twos, bounds).astype(np.int32)


def _any_entries(bounds: I64, size: int, marks: I64, kinds: npt.NDArray[np.uint8]) -> _Cuts:
    """The entries of any texts (empty segments, NULs, ``\\x01`` in values, no final ``\\x02``)."""
    n = len(bounds) - 1
    if len(kinds) and not kinds.all():  # NULs are not separators
        marks = marks[kinds != 0]
        kinds = kinds[kinds != 0]
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
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(record, minlength=n), out=offsets[1:])
    return starts[keep], first_one[keep], ends[keep], offsets


def _template(names: pa.Array, n: int, width: int) -> dict[str, int] | None:
    """Each name's last column, if all ``n`` records have the same ``width`` names in order.

    ``names`` is compact (from :func:`gather`): the test is that its bytes are the first
    record's names repeated, with the same lengths.
    """
    if n == 0 or width == 0:
        return {}
    bounds = np.frombuffer(names.buffers()[1], np.int32, n * width + 1)
    lengths = np.diff(bounds).reshape(n, width)
    if not (lengths == lengths[0]).all():
        return None
    size = int(bounds[width])
    octets = np.frombuffer(names.buffers()[2], np.uint8, n * size).reshape(n, size)
    if not (octets == octets[0]).all():
        return None
    return {name: column for column, name in enumerate(names.slice(0, width).to_pylist())}


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
    n = len(value)
    if n and not value.null_count:
        regular = _split_evenly(value, kind)
        if regular is not None:
            return regular
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


def _split_evenly(value: pa.Array, kind: pa.DataType) -> pa.Array | None:
    """:func:`split_keys` when every value holds the same number of single inner spaces.

    (A producer sets KEYS the same way on every message.) The keys are then the bytes with
    the spaces squeezed out, cut at positions known from the spaces' places alone; None for
    any other shape (a leading, trailing or double space, or a varying key count).
    """
    n = len(value)
    first = value.offset
    bounds = np.frombuffer(value.buffers()[1], np.int32, first + n + 1)[first:].astype(np.int64)
    base, size = int(bounds[0]), int(bounds[-1] - bounds[0])
    if not size:
        return None
    bounds -= base
    octets = np.frombuffer(value.buffers()[2], np.uint8, size, base)
    is_space = octets == _SPACE
    spaces = np.flatnonzero(is_space)
    per, rest = divmod(len(spaces), n)
    if rest:
        return None
    at = spaces.reshape(n, per)
    if per and not (
        (at[:, 0] > bounds[:-1]).all()
        and (at[:, -1] < bounds[1:] - 1).all()
        and (np.diff(at, axis=1) > 1).all()
    ):
        return None  # some value does not have exactly `per` spaces, or has an empty key
    if not (bounds[1:] > bounds[:-1]).all():
        return None  # an empty value: no keys
    # Squeezed, record r starts at bounds[r] - r * per and its j-th space cuts at
    # at[r, j] - r * per - j.
    cuts = np.empty((n, per + 1), np.int32)
    shift = np.arange(0, n * per, per, dtype=np.int64) if per else np.zeros(n, np.int64)
    cuts[:, 0] = bounds[:-1] - shift
    if per:
        cuts[:, 1:] = at - shift[:, None] - np.arange(per)
    ends = np.append(cuts.ravel(), size - len(spaces)).astype(np.int32)
    squeezed = octets[~is_space] if per else octets
    keys = pa.Array.from_buffers(
        pa.string(), len(ends) - 1, [None, pa.py_buffer(ends), pa.py_buffer(squeezed)]
    )
    lists = np.arange(0, (per + 1) * (n + 1), per + 1, dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(lists), keys, type=kind)
