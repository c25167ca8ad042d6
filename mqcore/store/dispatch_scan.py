"""Reput's fast walk: the fields ConsumeQueue and IndexFile need, for a run of records.

``CommitLog.iter_dispatch`` yields one :class:`~mqcore.store.format.DispatchRequest` per
record (a frozen object with all properties, for listeners and tools) from a generator,
and reput then sorts out each item. When nobody listens, reput needs only ten fields:
:func:`dispatch_columns` (reput's walk, ``MessageStore.reput_once``) and :func:`scan_columns`
collect them as :class:`Columns`, one list per field, which ``dispatch_write.write_columns``
hands to ``ConsumeQueueStore.put_columns`` and ``IndexService.build_index_many``
(``IndexColumns``) as they are. Per record only the header and the PROPERTIES bytes are
read in Python; the properties of a run of records are decoded and split at once
(:func:`_properties_of_run`). :func:`scan_rows` gives the same records as plain tuples
(:data:`Row`, ``CommitLog.dispatch_rows``). The files come out byte for byte as from the
request path (``test_store_fast_paths.py``, ``test_dispatch_scan.py``,
``test_dispatch_columns.py``).

The framing checks are ``decode_dispatch``'s fast path, inlined; any record off that path
(IPv6 hosts, V2 topics, SCHEDULE_TOPIC_XXXX, anything malformed) goes through
``decode_dispatch`` itself, which alone decides what a bad record is.
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple, cast

from mqcore.store.delay_levels import SCHEDULE_TOPIC
from mqcore.store.format import Blank, Corrupt, DispatchRequest, decode_dispatch
from mqcore.store.hashing import java_string_hash
from mqcore.store.record_layout import (
    HEADER_SIZES,
    HOST_V6_FLAGS,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    PROPERTIES_LENGTH,
    REPUT_HEADER_V1_IPV4,
    V1_MAX_TOPIC_BYTES,
)

if TYPE_CHECKING:
    from mqcore.store.commit_log import CommitLog

Row = tuple[str, int, int, int, int, int, int, str | None, str | None, int]
"""One record for reput, as a plain tuple (built in ~60 ns): the fields of
:class:`DispatchRow`, in its order."""


class DispatchRow(NamedTuple):
    """What reput writes for one record: the ``DispatchRequest`` fields minus the
    properties and the prepared-transaction offset."""

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int


# REPUT_HEADER_V1_IPV4 without PREPARED_TRANSACTION_OFFSET (reput does not use it): one
# int object less per record.
assert REPUT_HEADER_V1_IPV4.format.endswith("qi")
_HEADER = struct.Struct(REPUT_HEADER_V1_IPV4.format[:-2] + "8xi")
_HEADER_SIZE = _HEADER.size
assert _HEADER_SIZE == HEADER_SIZES[0]
_LENGTH_SIZE = PROPERTIES_LENGTH.size

# How _scan_records ended.
_GOING, _BLANK, _ENDED = 0, 1, 2

# Tag codes by tag (a small vocabulary, unlike keys): one lookup instead of a hash.
_TAG_CODES: dict[str | None, int] = {}  # None never stored: map(get) over a column
_TAG_CODES_MAX = 4096
# Topics by their bytes: a decode saved per record (a broker has few topics).
_TOPICS: dict[bytes, str] = {}
_TOPICS_MAX = 4096


def _three(segments: list[str]) -> tuple[str | None, str | None, str | None]:
    """TAGS, KEYS and UNIQ_KEY of a properties string split on \\x02, with
    ``properties.decode_properties``'s rule (the last valid pair of a name wins)."""
    props: dict[str, str] = {}
    for segment in segments:
        name, _, value = segment.partition("\x01")
        if name and value:  # Java: first \x01 neither first nor last in the segment
            props[name] = value
    return props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY")


def _row_of(request: DispatchRequest) -> Row:
    return (
        request.topic,
        request.queue_id,
        request.queue_offset,
        request.phys_offset,
        request.size,
        request.tags_code,
        request.store_timestamp,
        request.keys,
        request.uniq_key,
        request.sys_flag,
    )


def _scan_records(
    buf: mmap.mmap | bytes,
    pos: int,
    stop: int,
    limit: int,
    delay_levels_ms: Sequence[int],
    rows: list[Row],
    budget: int,
) -> tuple[int, int]:
    """The walk one record at a time, for at most ``budget`` records (the records the column
    walk leaves: anything off its path, and the ones right after).

    Returns:
        ``(position reached, how the walk ended)``: :data:`_GOING` (budget spent or ``stop``
        reached), :data:`_BLANK` (a blank record: on to the next segment) or :data:`_ENDED`
        (a record not fully written, or corrupt with no size).
    """
    unpack = _HEADER.unpack_from
    unpack_length = PROPERTIES_LENGTH.unpack_from
    append = rows.append
    topics = _TOPICS
    tag_codes = _TAG_CODES
    for _ in range(budget):
        if pos >= stop:
            break
        if limit - pos >= MIN_RECORD_SIZE:
            total, magic, queue_id, queue_offset, phys_offset, sys_flag, store_timestamp, body_length = unpack(buf, pos)  # fmt: skip
            end = pos + total
            topic_pos = pos + _HEADER_SIZE + body_length + 1
            if (
                magic == MESSAGE_MAGIC_CODE
                and not sys_flag & HOST_V6_FLAGS
                and MIN_RECORD_SIZE <= total <= limit - pos
                and body_length >= 0
                and topic_pos + _LENGTH_SIZE <= end
            ):
                topic_end = topic_pos + buf[topic_pos - 1]
                properties_pos = topic_end + _LENGTH_SIZE
                if (
                    topic_end - topic_pos <= V1_MAX_TOPIC_BYTES
                    and properties_pos <= end
                    and properties_pos + unpack_length(buf, topic_end)[0] == end
                ):
                    raw_topic = buf[topic_pos:topic_end]
                    topic = topics.get(raw_topic)
                    if topic is None:
                        topic = str(raw_topic, "utf-8", "replace")
                        if topic == SCHEDULE_TOPIC:  # tag code from the delay level
                            topic = ""
                        elif len(topics) < _TOPICS_MAX:
                            topics[raw_topic] = topic
                    if topic:
                        tags, keys, uniq_key = _properties_of(buf[properties_pos:end])
                        tags_code = 0
                        if tags:
                            cached = tag_codes.get(tags)
                            if cached is None:
                                cached = java_string_hash(tags)
                                if len(tag_codes) < _TAG_CODES_MAX:
                                    tag_codes[tags] = cached
                            tags_code = cached
                        append(
                            (
                                topic,
                                queue_id,
                                queue_offset,
                                phys_offset,
                                total,
                                tags_code,
                                store_timestamp,
                                keys,
                                uniq_key,
                                sys_flag,
                            )  # fmt: skip
                        )
                        pos = end
                        continue
        result = decode_dispatch(buf, pos, limit, delay_levels_ms=delay_levels_ms)
        if isinstance(result, DispatchRequest):
            append(_row_of(result))
            pos += result.size
        elif isinstance(result, Blank):
            return pos, _BLANK
        elif isinstance(result, Corrupt) and result.size > 0:
            pos += result.size
        else:  # NeedMore, or Corrupt with nothing to skip: wait for recovery
            return pos, _ENDED
    return pos, _GOING


def _properties_of(raw: bytes) -> tuple[str | None, str | None, str | None]:
    """TAGS, KEYS and UNIQ_KEY of one record's PROPERTIES bytes (``decode_properties``'
    rule), with Cairn's own layout recognised first."""
    segments = str(raw, "utf-8", "replace").split("\x02")
    # Cairn's own order (plain_batch), exactly: TAGS, KEYS, UNIQ_KEY, each with a value,
    # and the trailing separator. Names hold no \x01, so each value is all after the
    # name's \x01, as partition gives it.
    if (
        len(segments) == 4
        and not segments[3]
        and segments[0].startswith("TAGS\x01")
        and segments[1].startswith("KEYS\x01")
        and segments[2].startswith("UNIQ_KEY\x01")
    ):
        tags = segments[0][5:]
        keys = segments[1][5:]
        uniq_key = segments[2][9:]
        if tags and keys and uniq_key:
            return tags, keys, uniq_key
    return _three(segments)


def scan_rows(
    buf: mmap.mmap | bytes,
    pos: int,
    stop: int,
    limit: int,
    delay_levels_ms: Sequence[int],
    rows: list[Row],
) -> tuple[int, bool]:
    """Append a row for each record in ``buf`` (a segment's mapping, or bytes: slices must
    be hashable) from ``pos`` while ``pos < stop`` (``limit``: end of the readable bytes, as
    ``decode_dispatch`` takes it), as ``CommitLog.iter_dispatch``
    walks a segment: a corrupt record that states its size is skipped; a blank record,
    a record not fully written, or a corrupt one with no size ends the walk.

    :func:`scan_columns` does the walk; this only turns its columns into rows.

    Returns:
        ``(position reached, whether a blank record sent the walk to the next segment)``.
    """
    columns = Columns()
    reached = scan_columns(buf, pos, stop, limit, delay_levels_ms, columns)
    rows.extend(columns.rows())
    return reached


# --- the column walk ------------------------------------------------------------------------------
#
# _scan_records builds ~15 objects per record: the properties decoded and split into segments,
# their values, a row tuple that the writer then takes apart again. _scan_run keeps from each
# record only what it reads anyway (the header tuple, the PROPERTIES bytes, the topic when it
# changes) and leaves the rest to C-level passes over the whole run: the headers transposed
# into columns, and the properties of all records joined, decoded and split at once
# (_properties_of_run). The framing checks are _scan_records' own; a record off that path ends
# the run, and _scan_records takes it.

#: What comes before TAGS' value (after the previous record's \x02 and the joiner), before
#: KEYS' and before UNIQ_KEY's, in a run of Cairn-layout properties joined on \x02.
_PAIR_SEPARATORS = ("\x02\x02TAGS\x01", "\x02KEYS\x01", "\x02UNIQ_KEY\x01")
_SEPARATOR = b"\x02"[0]
_LAST = itemgetter(-1)
#: Records per run at most: the run's columns and text stay in the CPU caches between passes
#: (the passes over a run of 16k records cost ~2x those over 512).
_RUN = range(512)


@functools.lru_cache(maxsize=256)
def _topic_tail(topic_length: int) -> struct.Struct:
    """TOPIC (``topic_length`` bytes) then PROPERTIESLENGTH, read from the TOPIC position."""
    return struct.Struct(f">{topic_length}s{PROPERTIES_LENGTH.format.lstrip('>')}")


class Columns:
    """The fields of :class:`DispatchRow` for a run of records, one list per field, in
    CommitLog order (what reput writes column by column, ``dispatch_write.write_columns``)."""

    __slots__ = (
        "topics",
        "queue_ids",
        "queue_offsets",
        "phys_offsets",
        "sizes",
        "tags_codes",
        "store_timestamps",
        "keys",
        "uniq_keys",
        "sys_flags",
    )

    def __init__(self) -> None:
        self.topics: list[str] = []
        self.queue_ids: list[int] = []
        self.queue_offsets: list[int] = []
        self.phys_offsets: list[int] = []
        self.sizes: list[int] = []
        self.tags_codes: list[int] = []
        self.store_timestamps: list[int] = []
        self.keys: list[str | None] = []
        self.uniq_keys: list[str | None] = []
        self.sys_flags: list[int] = []

    def __len__(self) -> int:
        return len(self.phys_offsets)

    def lists(self) -> tuple[list[str], list[int], list[int], list[int], list[int], list[int], list[int], list[str | None], list[str | None], list[int]]:  # fmt: skip
        """The ten lists, in :class:`DispatchRow` order."""
        return (
            self.topics, self.queue_ids, self.queue_offsets, self.phys_offsets, self.sizes,
            self.tags_codes, self.store_timestamps, self.keys, self.uniq_keys, self.sys_flags,
        )  # fmt: skip

    def rows(self) -> list[Row]:
        """The records as :data:`Row` tuples."""
        return list(zip(*self.lists(), strict=True))

    def extend_rows(self, rows: Sequence[Row]) -> None:
        """Append rows (the records :func:`_scan_records` decoded)."""
        if rows:
            for column, values in zip(self.lists(), zip(*rows, strict=True), strict=True):
                cast("list[object]", column).extend(values)  # each column its own type

    def slice(self, start: int, stop: int) -> Columns:
        """The records ``start:stop`` as new columns."""
        part = Columns()
        for name in Columns.__slots__:
            setattr(part, name, getattr(self, name)[start:stop])
        return part


def _scan_run(buf: mmap.mmap | bytes, pos: int, stop: int, limit: int, out: Columns) -> int:
    """Append the columns of the records from ``pos`` while ``pos < stop``, up to the first one
    off the column path (anything :func:`_scan_records` does not take on its fast path: a
    blank record, IPv6 hosts, a V2 or SCHEDULE_TOPIC_XXXX topic, bad framing, the end of
    the written bytes). Same fields as :func:`_scan_records`.

    Returns:
        The position of the first record not taken.
    """
    heads: list[tuple[int, ...]] = []
    properties: list[bytes] = []
    changes: list[tuple[int, str]] = []  # (first record, topic) of each stretch of one topic
    append_head = heads.append
    append_properties = properties.append
    unpack = _HEADER.unpack_from
    topic_length = -1
    tail = _topic_tail(1).unpack_from
    raw_topic_now = b""
    for _ in _RUN:
        if pos >= stop or limit - pos < MIN_RECORD_SIZE:
            break
        head = unpack(buf, pos)
        # head: TOTALSIZE, MAGICCODE, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG,
        # STORETIMESTAMP, BODYLENGTH
        total = head[0]
        end = pos + total
        topic_pos = pos + _HEADER_SIZE + head[7] + 1
        if (
            head[1] != MESSAGE_MAGIC_CODE
            or head[5] & HOST_V6_FLAGS
            or not MIN_RECORD_SIZE <= total <= limit - pos
            or head[7] < 0
            or topic_pos + _LENGTH_SIZE > end
        ):
            break
        length = buf[topic_pos - 1]
        if length != topic_length:
            if not 0 < length <= V1_MAX_TOPIC_BYTES:
                break
            topic_length = length
            tail = _topic_tail(length).unpack_from
        properties_pos = topic_pos + length + _LENGTH_SIZE
        if properties_pos > end:
            break
        raw_topic, properties_length = tail(buf, topic_pos)
        if properties_pos + properties_length != end:
            break
        if raw_topic != raw_topic_now:
            topic = _TOPICS.get(raw_topic) or _cache_topic(raw_topic)
            if topic is None:  # SCHEDULE_TOPIC_XXXX: its tag code is a delivery time
                break
            raw_topic_now = raw_topic
            changes.append((len(heads), topic))
        append_head(head)
        append_properties(buf[properties_pos:end])
        pos = end
    if heads:
        _append_run(heads, properties, changes, out)
    return pos


def _append_run(
    heads: list[tuple[int, ...]],
    properties: list[bytes],
    changes: list[tuple[int, str]],
    out: Columns,
) -> None:
    """The columns of a run :func:`_scan_run` read."""
    sizes, _, queue_ids, queue_offsets, phys_offsets, sys_flags, times, _ = zip(*heads, strict=True)  # fmt: skip
    count = len(heads)
    topics = out.topics
    for k, (first, topic) in enumerate(changes):
        upto = changes[k + 1][0] if k + 1 < len(changes) else count
        topics += [topic] * (upto - first)
    tags, keys, uniq_keys = _properties_of_run(properties)
    tags_codes = list(map(_TAG_CODES.get, tags))
    if None in tags_codes:
        tags_codes = list(map(_tag_code, tags))
    out.queue_ids += queue_ids
    out.queue_offsets += queue_offsets
    out.phys_offsets += phys_offsets
    out.sizes += sizes
    out.tags_codes += tags_codes  # type: ignore[arg-type]  # None ruled out
    out.store_timestamps += times
    out.keys += keys
    out.uniq_keys += uniq_keys
    out.sys_flags += sys_flags


def _cache_topic(raw: bytes) -> str | None:
    """``raw`` decoded as _scan_records does (and remembered); None for SCHEDULE_TOPIC_XXXX."""
    topic = str(raw, "utf-8", "replace")
    if topic == SCHEDULE_TOPIC or not topic:
        return None
    if len(_TOPICS) < _TOPICS_MAX:
        _TOPICS[raw] = topic
    return topic


def _tag_code(tags: str | None) -> int:
    """The tag code _scan_records gives ``tags`` (and remembered)."""
    if not tags:
        return 0
    code = _TAG_CODES.get(tags)
    if code is None:
        code = java_string_hash(tags)
        if len(_TAG_CODES) < _TAG_CODES_MAX:
            _TAG_CODES[tags] = code
    return code


def _properties_of_run(
    properties: list[bytes],
) -> tuple[Sequence[str | None], Sequence[str | None], Sequence[str | None]]:
    """:func:`_properties_of` for each record's PROPERTIES bytes, as three columns.

    The usual run (valid UTF-8, each record in Cairn's own layout) is decoded and split once
    for all records, joined on an extra \x02: with each \x01 made a \x02 too, the run splits
    into TAGS, t, KEYS, k, UNIQ_KEY, u and an empty segment per record. Those values are
    right iff the canonical text rebuilt from them is the joined text (names and separators
    in place, the doubled \x02 only between records, since values hold no \x02), every
    record ends with its \x02 (so the doubled ones are the record boundaries), and no
    value is empty. Valid UTF-8 cannot span the ASCII joiner, so the strict decode of the
    run is each record's decode. Anything else: record by record.
    """
    count = len(properties)
    text = b"\x02".join(properties)
    try:
        run = str(text, "utf-8")
    except UnicodeDecodeError:
        run = ""
    parts = run.replace("\x01", "\x02").split("\x02")
    if len(parts) == 7 * count:  # the last record has no joiner: one empty segment less
        tags = parts[1::7]
        keys = parts[3::7]
        uniq_keys = parts[5::7]
        again = [_PAIR_SEPARATORS[0]] * (6 * count)
        again[1::6] = tags
        again[2::6] = [_PAIR_SEPARATORS[1]] * count
        again[3::6] = keys
        again[4::6] = [_PAIR_SEPARATORS[2]] * count
        again[5::6] = uniq_keys
        again[0] = "TAGS\x01"  # the first record has none before it
        if (
            "".join(again) + "\x02" == run
            and "" not in tags
            and "" not in keys
            and "" not in uniq_keys
            and list(map(_LAST, properties)).count(_SEPARATOR) == count
        ):
            return tags, keys, uniq_keys
    tags_column, keys_column, uniq_column = zip(*map(_properties_of, properties), strict=True)
    return tags_column, keys_column, uniq_column


def scan_columns(
    buf: mmap.mmap | bytes,
    pos: int,
    stop: int,
    limit: int,
    delay_levels_ms: Sequence[int],
    out: Columns,
) -> tuple[int, bool]:
    """:func:`scan_rows` into columns: the same records, fields, skips and stops.

    Returns:
        ``(position reached, whether a blank record sent the walk to the next segment)``.
    """
    while pos < stop:
        pos = _scan_run(buf, pos, stop, limit, out)
        if pos >= stop:
            break
        # The record at ``pos`` is off the column path: _scan_records decides what it is.
        rows: list[Row] = []
        pos, ended = _scan_records(buf, pos, stop, limit, delay_levels_ms, rows, 1)
        out.extend_rows(rows)
        if ended != _GOING:
            return pos, ended == _BLANK
    return pos, False


def dispatch_columns(
    commit_log: CommitLog,
    from_offset: int,
    end_offset: int,
    max_bytes: int,
    delay_levels_ms: Sequence[int],
) -> tuple[Columns, int]:
    """``CommitLog.dispatch_rows`` as columns (reput's walk): the same segments, stops and
    records. Returns the columns and the offset the walk reached."""
    out = Columns()
    offset = max(from_offset, commit_log.min_offset)
    budget_end = offset + max_bytes
    while offset < end_offset and offset < budget_end:
        segment = commit_log.segments.find(offset)
        if segment is None or not segment.hold():
            break
        base = segment.base_offset
        try:
            limit = min(segment.wrote_position, end_offset - base)
            stop = min(limit, budget_end - base)
            pos, to_next_segment = scan_columns(
                segment.buffer, offset - base, stop, limit, delay_levels_ms, out
            )
        finally:
            segment.release()
        if not to_next_segment:
            offset = base + pos
            break
        offset = base + commit_log.file_size
    return out, offset
