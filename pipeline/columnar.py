"""Columnar decoding: a :class:`~pipeline.segments.Chunk` of CommitLog records to one Arrow batch.

Why not ``mqcore.store.format.decode_record`` per record: it costs ~4.8 us a record on the CI
box, ~200,000 rows/s per core, and a Spark scan must do several times that. Here the Python
walk (``segments.iter_chunks``) only chains TOTALSIZE fields (~0.3 us a record); every field is
then cut out of the chunk for all records at once with Arrow compute kernels (C++):

* The chunk is one Arrow ``binary`` array whose offsets are the record positions, zero-copy:
  element *i* is record *i*. The 88-byte fixed header (V1, IPv4 hosts: the shape of nearly every
  record) is sliced out of every record and byte-reversed, after which each big-endian integer
  field is a little-endian slice of it (``binary_slice``), read as int32/int64 in place.
* Variable parts (body, topic, properties) start at per-record positions computed from the
  lengths; one ``take`` over an array whose offsets interleave (start, stop) pairs copies them.
* Properties are parsed with ``split_pattern`` on ``\\x02`` and ``\\x01`` using RocketMQ's
  rule (first ``\\x01`` neither first nor last; a later duplicate name wins), into a map.

Records that do not have that shape (V2 magic, IPv6 hosts) or whose lengths do not add up are
decoded by mqcore's own ``check_record``/``decode_record``, one by one, and merged in
phys_offset order, so every row equals what mqcore reads. A record mqcore calls corrupt with a
size is skipped (as reput does); one without (negative topic length) ends the scan there.

The layout positions come from ``mqcore.store.record_layout``; pyarrow only, no Spark.
"""

from __future__ import annotations

import socket
from array import array
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mqcore.message import MessageExt
from mqcore.store.format import (
    MESSAGE_MAGIC_CODE_V1,
    Corrupt,
    Valid,
    check_record,
    decode_record,
)
from mqcore.store.record_layout import (
    HEADER_SIZES,
    HOST_V6_FLAGS,
    MIN_RECORD_SIZE,
    PROPERTIES_LENGTH,
    TOPIC_LENGTH_V1,
)
from pipeline.schema import ARROW_SCHEMA
from pipeline.segments import Chunk

__all__ = ["Bounds", "decode_chunk", "message_row"]

_HEADER = HEADER_SIZES[0]  # 88 bytes, V1 with IPv4 born and store hosts
# (offset, width) of each header field for V1/IPv4 (record_layout's table).
_TOTALSIZE, _MAGIC, _BODYCRC, _QUEUEID, _FLAG = (0, 4), (4, 4), (8, 4), (12, 4), (16, 4)
_QUEUEOFFSET, _PHYSOFFSET, _SYSFLAG, _BORNTS = (20, 8), (28, 8), (36, 4), (40, 8)
_BORNHOST, _STORETS, _STOREHOST, _RECONSUME = (48, 8), (56, 8), (64, 8), (72, 4)
_PREPARED, _BODYLENGTH = (76, 8), (84, 4)
_V1_MAX_TOPIC = 127
_TRAILER = TOPIC_LENGTH_V1.size + PROPERTIES_LENGTH.size  # 3
_HEX = pa.array(b"0123456789ABCDEF", pa.uint8())
_ARANGE_SIZE = 1 << 17
_arange_cache: list[pa.Array] = [pa.array(range(_ARANGE_SIZE), pa.int32())]


@dataclass(frozen=True, slots=True)
class Bounds:
    """Row filters applied while decoding (the data source's options and pushed filters).

    ``begin_ms``/``end_ms`` bound ``store_timestamp`` inclusively (as the store's key query);
    ``min_phys`` is inclusive and ``max_phys`` exclusive on ``phys_offset``.
    """

    topics: frozenset[str] | None = None
    begin_ms: int | None = None
    end_ms: int | None = None
    min_phys: int | None = None
    max_phys: int | None = None

    def accepts(self, topic: str, store_timestamp: int, phys_offset: int) -> bool:
        """The same test for one row (the slow path)."""
        return (
            (self.topics is None or topic in self.topics)
            and (self.begin_ms is None or store_timestamp >= self.begin_ms)
            and (self.end_ms is None or store_timestamp <= self.end_ms)
            and (self.min_phys is None or phys_offset >= self.min_phys)
            and (self.max_phys is None or phys_offset < self.max_phys)
        )


# --- small Arrow helpers --------------------------------------------------------------------------


def _arange(n: int) -> pa.Array:
    """0..n-1 as int32, sliced from a cached array (grown when needed)."""
    if n > len(_arange_cache[0]):
        _arange_cache[0] = pa.array(range(max(n, 2 * len(_arange_cache[0]))), pa.int32())
    return _arange_cache[0].slice(0, n)


def _be_field(records: pa.Array, n: int, field: tuple[int, int]) -> pa.Array:
    """A big-endian int32/int64 header field of every record (cut out, then byte-swapped)."""
    start, width = field
    sliced = pc.binary_slice(records, start, start + width)
    values = array("i" if width == 4 else "q")
    if n:
        values.frombytes(memoryview(sliced.buffers()[2])[: n * width])
    values.byteswap()
    return pa.Array.from_buffers(
        pa.int32() if width == 4 else pa.int64(), n, [None, pa.py_buffer(values)]
    )


def _raw_field(records: pa.Array, field: tuple[int, int]) -> pa.Array:
    start, width = field
    return pc.binary_slice(records, start, start + width)


def _gather(data: pa.Buffer, starts: pa.Array, stops: pa.Array, kind: pa.DataType) -> pa.Array:
    """``data[starts[i]:stops[i]]`` for every i, as one compact array (starts ascending, and
    each stop at most the next start)."""
    n = len(starts)
    if n == 0:
        return pa.array([], kind)
    # Offsets s0, e0, s1, e1, ... make element 2i the wanted slice and 2i+1 the gap after it.
    both = pa.concat_arrays([starts.cast(pa.int32()), stops.cast(pa.int32())])
    a = _arange(2 * n)
    order = pc.add(pc.shift_right(a, 1), pc.multiply(pc.bit_wise_and(a, 1), n))
    offsets = pa.concat_arrays([pc.take(both, order), stops.slice(n - 1, 1).cast(pa.int32())])
    pairs = pa.Array.from_buffers(kind, 2 * n, [None, offsets.buffers()[1], data])
    return pc.take(pairs, pc.multiply(_arange(n), 2))


def _rebuild_lists(lists: pa.Array, keep: pa.Array, values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Offsets for ``lists`` after dropping the flattened elements where ``keep`` is false."""
    kept = pc.cumulative_sum(keep.cast(pa.int32()))
    before = pa.concat_arrays([pa.array([0], pa.int32()), kept.cast(pa.int32())])
    offsets = pc.take(before, lists.offsets)
    return offsets, pc.filter(values, keep)


def _hosts(raw: pa.Array) -> pa.Array:
    """8-byte IPv4 host fields as "ip:port" text (few distinct values: format each once)."""
    encoded = pc.dictionary_encode(raw)
    texts = [
        f"{socket.inet_ntop(socket.AF_INET, b[:4])}:{int.from_bytes(b[4:], 'big', signed=True)}"
        for b in encoded.dictionary.to_pylist()
    ]
    return pc.take(pa.array(texts, pa.string()), encoded.indices)


def _offset_msg_ids(store_host: pa.Array, phys_raw: pa.Array) -> pa.Array:
    """Upper-case hex of store host (8 bytes) + phys offset (8 bytes): spec 2.3."""
    n = len(store_host)
    joined = pc.binary_join_element_wise(store_host, phys_raw, b"")
    octets = pa.Array.from_buffers(pa.uint8(), 16 * n, [None, joined.buffers()[2]])
    high = pc.take(_HEX, pc.shift_right(octets, 4)).cast(pa.uint16())
    low = pc.take(_HEX, pc.bit_wise_and(octets, 15)).cast(pa.uint16())
    # As a little-endian uint16 the pair puts the high digit first in memory.
    pairs = pc.add(pc.multiply(low, pa.scalar(256, pa.uint16())), high)
    offsets = pc.multiply(_arange(n + 1), pa.scalar(32, pa.int32()))
    return pa.Array.from_buffers(pa.string(), n, [None, offsets.buffers()[1], pairs.buffers()[1]])


def _valid_utf8(arr: pa.Array) -> pa.Array:
    """``arr`` if it is valid UTF-8, else re-decoded with U+FFFD (as mqcore and Java do)."""
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        raw = arr.cast(pa.binary()) if arr.type == pa.string() else arr
        return pa.array(
            [None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()],
            pa.string(),
        )


# --- properties ----------------------------------------------------------------------------------


def _properties(text: pa.Array) -> pa.Array:
    """RocketMQ's ``string2messageProperties`` over a whole column, as map<string,string>."""
    parts = pc.split_pattern(text, "\x02")
    flat = parts.flatten()
    sep = pc.find_substring(flat, "\x01")
    lengths = pc.binary_length(flat)
    keep = pc.and_(pc.greater(sep, 0), pc.less(sep, pc.subtract(lengths, 1)))
    if keep.false_count:  # empty names or values (the trailing "" always): drop them
        offsets, flat = _rebuild_lists(parts, keep, flat)
        sep = pc.filter(sep, keep)
    else:
        offsets = parts.offsets
    if len(flat) == 0:
        return pa.MapArray.from_arrays(
            offsets, pa.array([], pa.string()), pa.array([], pa.string())
        )
    starts = pa.Array.from_buffers(
        pa.int32(), len(flat), [None, flat.buffers()[1]], offset=flat.offset
    )
    stops = pa.Array.from_buffers(
        pa.int32(), len(flat), [None, flat.buffers()[1]], offset=flat.offset + 1
    )
    name_end = pc.add(starts, sep)
    data = flat.buffers()[2]
    names = _gather(data, starts, name_end, pa.string())
    values = _gather(data, pc.add(name_end, 1), stops, pa.string())
    if _has_duplicates(offsets, names):
        return _properties_slow(offsets, names, values)
    return pa.MapArray.from_arrays(offsets, names, values)


def _has_duplicates(offsets: pa.Array, names: pa.Array) -> bool:
    """Whether a name repeats within one record (never written by RocketMQ or mqcore)."""
    codes = pc.dictionary_encode(names)
    parents = pc.list_parent_indices(pa.ListArray.from_arrays(offsets, codes.indices))
    width = len(codes.dictionary)
    combined = pc.add(pc.multiply(parents.cast(pa.int64()), width), codes.indices.cast(pa.int64()))
    return len(pc.unique(combined)) != len(combined)


def _properties_slow(offsets: pa.Array, names: pa.Array, values: pa.Array) -> pa.Array:
    """A name repeats within a record: the later value wins (Java overwrites)."""
    bounds = offsets.to_pylist()
    names_list, values_list = names.to_pylist(), values.to_pylist()
    rows = [
        list(dict(zip(names_list[a:b], values_list[a:b], strict=True)).items())
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    return pa.array(rows, pa.map_(pa.string(), pa.string()))


def _keys(props: pa.Array) -> pa.Array:
    """KEYS split on a single space, empty keys dropped; [] when absent."""
    value = pc.fill_null(pc.map_lookup(props, "KEYS", "last"), "")
    parts = pc.split_pattern(value, " ")
    flat = parts.flatten()
    keep = pc.greater(pc.binary_length(flat), 0)
    if keep.false_count:
        offsets, flat = _rebuild_lists(parts, keep, flat)
    else:
        offsets = parts.offsets
    return pa.ListArray.from_arrays(offsets, flat).cast(ARROW_SCHEMA.field("keys").type)


# --- the batch -------------------------------------------------------------------------------------


def decode_chunk(chunk: Chunk, bounds: Bounds) -> tuple[pa.RecordBatch, int | None]:
    """Decode every record of ``chunk`` that ``bounds`` accepts.

    Returns:
        The rows as a batch with :data:`~pipeline.schema.ARROW_SCHEMA`, in phys_offset order,
        and the absolute offset of a record that ends the scan (corrupt with nothing to
        skip), or None.
    """
    n = chunk.count
    data = pa.py_buffer(chunk.data)
    offsets = pa.py_buffer(chunk.positions)
    records = pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])
    pos = pa.Array.from_buffers(pa.int32(), n, [None, offsets])
    end = pa.Array.from_buffers(pa.int32(), n, [None, offsets], offset=1)
    octets = pa.Array.from_buffers(pa.uint8(), len(chunk.data), [None, data])

    total, magic = _be_field(records, n, _TOTALSIZE), _be_field(records, n, _MAGIC)
    sys_flag, body_length = _be_field(records, n, _SYSFLAG), _be_field(records, n, _BODYLENGTH)
    # Shape checks; lengths of rows that fail are zeroed so later positions stay in the chunk.
    ok = pc.and_(
        pc.and_(
            pc.equal(magic, MESSAGE_MAGIC_CODE_V1),
            pc.equal(pc.bit_wise_and(sys_flag, HOST_V6_FLAGS), 0),
        ),
        pc.and_(
            pc.greater_equal(body_length, 0),
            pc.less_equal(pc.add(body_length, MIN_RECORD_SIZE), total),
        ),
    )
    body_length = pc.if_else(ok, body_length, 0)
    body_start = pc.add(pos, _HEADER)
    topic_length_at = pc.add(body_start, body_length)
    topic_length = pc.take(octets, topic_length_at).cast(pa.int32())
    fits = pc.less_equal(pc.add(pc.add(topic_length_at, topic_length), _TRAILER), end)
    ok = pc.and_(ok, pc.and_(pc.less_equal(topic_length, _V1_MAX_TOPIC), fits))
    topic_length = pc.if_else(ok, topic_length, 0)
    topic_start = pc.add(topic_length_at, 1)
    topic_end = pc.add(topic_start, topic_length)
    high = pc.take(octets, topic_end).cast(pa.int32())
    low = pc.take(octets, pc.add(topic_end, 1)).cast(pa.int32())
    properties_start = pc.add(topic_end, PROPERTIES_LENGTH.size)
    adds_up = pc.equal(pc.add(properties_start, pc.add(pc.multiply(high, 256), low)), end)
    ok = pc.and_(ok, pc.and_(pc.less(high, 128), adds_up))

    store_ts = _be_field(records, n, _STORETS)
    phys = _be_field(records, n, _PHYSOFFSET)
    keep = _bounds_mask(
        bounds, store_ts, phys, lambda: _gather(data, topic_start, topic_end, pa.string())
    )
    selected = ok if keep is None else pc.and_(ok, keep)
    slow_rows = [i for i, good in enumerate(ok.to_pylist()) if not good] if ok.false_count else []
    take_all = selected.true_count == n

    def sel(arr: pa.Array) -> pa.Array:
        return arr if take_all else pc.filter(arr, selected)

    records = sel(records)
    m = len(records)

    def field(spec: tuple[int, int]) -> pa.Array:
        return _be_field(records, m, spec)

    topic = _valid_utf8(_gather(data, sel(topic_start), sel(topic_end), pa.string()))
    props_text = _valid_utf8(_gather(data, sel(properties_start), sel(end), pa.string()))
    properties = _properties(props_text)
    offset_ids = _offset_msg_ids(_raw_field(records, _STOREHOST), _raw_field(records, _PHYSOFFSET))
    store_ts = sel(store_ts)
    body_start = sel(body_start)
    columns: dict[str, pa.Array] = {
        "topic": topic,
        "queue_id": field(_QUEUEID),
        "queue_offset": field(_QUEUEOFFSET),
        "phys_offset": sel(phys),
        "store_size": sel(total),
        "msg_id": pc.coalesce(pc.map_lookup(properties, "UNIQ_KEY", "last"), offset_ids),
        "offset_msg_id": offset_ids,
        "keys": _keys(properties),
        "tags": pc.map_lookup(properties, "TAGS", "last"),
        "properties": properties,
        "body": _gather(data, body_start, pc.add(body_start, sel(body_length)), pa.binary()),
        "body_crc": field(_BODYCRC),
        "flag": field(_FLAG),
        "sys_flag": sel(sys_flag),
        "born_timestamp": field(_BORNTS),
        "born_host": _hosts(_raw_field(records, _BORNHOST)),
        "store_timestamp": store_ts,
        "store_time": pc.multiply(store_ts, 1000).cast(pa.timestamp("us", tz="UTC")),
        "store_host": _hosts(_raw_field(records, _STOREHOST)),
        "reconsume_times": field(_RECONSUME),
        "prepared_transaction_offset": field(_PREPARED),
    }
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)
    if not slow_rows:
        return batch, None
    return _merge_slow(chunk, batch, slow_rows, bounds)


def _bounds_mask(
    bounds: Bounds, store_ts: pa.Array, phys: pa.Array, topics: Any
) -> pa.Array | None:
    masks: list[pa.Array] = []
    if bounds.begin_ms is not None:
        masks.append(pc.greater_equal(store_ts, bounds.begin_ms))
    if bounds.end_ms is not None:
        masks.append(pc.less_equal(store_ts, bounds.end_ms))
    if bounds.min_phys is not None:
        masks.append(pc.greater_equal(phys, bounds.min_phys))
    if bounds.max_phys is not None:
        masks.append(pc.less(phys, bounds.max_phys))
    if bounds.topics is not None:
        masks.append(pc.is_in(topics(), pa.array(sorted(bounds.topics), pa.string())))
    if not masks:
        return None
    mask = masks[0]
    for more in masks[1:]:
        mask = pc.and_(mask, more)
    return mask


# --- records mqcore decodes one by one -------------------------------------------------------------


def message_row(m: MessageExt) -> dict[str, Any]:
    """One row of :data:`~pipeline.schema.ARROW_SCHEMA` from a decoded record."""
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "phys_offset": m.phys_offset,
        "store_size": m.store_size,
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "keys": list(m.keys),
        "tags": m.tags,
        "properties": list(m.properties.items()),
        "body": m.body,
        "body_crc": m.body_crc,
        "flag": m.flag,
        "sys_flag": m.sys_flag,
        "born_timestamp": m.born_timestamp,
        "born_host": str(m.born_host),
        "store_timestamp": m.store_timestamp,
        "store_time": datetime.fromtimestamp(m.store_timestamp / 1000, UTC),
        "store_host": str(m.store_host),
        "reconsume_times": m.reconsume_times,
        "prepared_transaction_offset": m.prepared_transaction_offset,
    }


def _merge_slow(
    chunk: Chunk, batch: pa.RecordBatch, slow_rows: list[int], bounds: Bounds
) -> tuple[pa.RecordBatch, int | None]:
    """Decode the odd records with mqcore and merge them into ``batch`` by phys_offset."""
    rows: list[dict[str, Any]] = []
    stop_at: int | None = None
    data, positions = chunk.data, chunk.positions
    for i in slow_rows:
        q = positions[i]
        result = check_record(data, q, positions[i + 1], check_crc=False)
        if isinstance(result, Corrupt) and result.size > 0:
            continue  # reput skips a record whose TOTALSIZE still frames it
        if not isinstance(result, Valid):
            stop_at = chunk.base + q
            break
        m = decode_record(data, q, limit=positions[i + 1])
        if bounds.accepts(m.topic, m.store_timestamp, m.phys_offset):
            rows.append(message_row(m))
    if stop_at is not None:
        batch = batch.filter(pc.less(batch.column("phys_offset"), stop_at))
    if not rows:
        return batch, stop_at
    slow = pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)
    merged = pa.Table.from_batches([batch, slow]).sort_by("phys_offset").combine_chunks()
    return merged.to_batches()[0] if merged.num_rows else batch.slice(0, 0), stop_at
