"""Reput's fast walk: the fields ConsumeQueue and IndexFile need, for a run of records.

``CommitLog.iter_dispatch`` yields one :class:`~mqcore.store.format.DispatchRequest` per
record (a frozen object with all properties, for listeners and tools) from a generator,
and reput then sorts out each item. When nobody listens, reput needs only ten fields, so
:func:`scan_rows` decodes a whole run of records in one loop into plain tuples
(:data:`Row`): no generator step, no per-record call, no request object, no properties
dict for the usual TAGS/KEYS/UNIQ_KEY record. ``MessageStore`` then writes a run of rows
column by column (``ConsumeQueueStore.put_columns``, ``IndexService.build_index_many`` with
``IndexColumns``), and the files come out byte for byte as from the request path
(``test_store_fast_paths.py``, ``test_dispatch_scan.py``).

The framing checks are ``decode_dispatch``'s fast path, inlined; any record off that path
(IPv6 hosts, V2 topics, SCHEDULE_TOPIC_XXXX, anything malformed) goes through
``decode_dispatch`` itself, which alone decides what a bad record is.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import NamedTuple

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


_HEADER = REPUT_HEADER_V1_IPV4
_HEADER_SIZE = _HEADER.size
assert _HEADER_SIZE == HEADER_SIZES[0]
_LENGTH_SIZE = PROPERTIES_LENGTH.size

# Tag codes by tag (a small vocabulary, unlike keys): one lookup instead of a hash.
_TAG_CODES: dict[str, int] = {}
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

    Returns:
        ``(position reached, whether a blank record sent the walk to the next segment)``.
    """
    unpack = _HEADER.unpack_from
    unpack_length = PROPERTIES_LENGTH.unpack_from
    append = rows.append
    topics = _TOPICS
    tag_codes = _TAG_CODES
    while pos < stop:
        if limit - pos >= MIN_RECORD_SIZE:
            total, magic, queue_id, queue_offset, phys_offset, sys_flag, store_timestamp, _, body_length = unpack(buf, pos)  # fmt: skip
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
                        segments = str(buf[properties_pos:end], "utf-8", "replace").split("\x02")
                        tags: str | None
                        keys: str | None
                        uniq_key: str | None
                        # Cairn's own order (plain_batch), exactly: TAGS, KEYS, UNIQ_KEY, each
                        # with a value, and the trailing separator. Names hold no \x01, so
                        # each value is all after the name's \x01, as partition gives it.
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
                            if not (tags and keys and uniq_key):
                                tags, keys, uniq_key = _three(segments)
                        else:
                            tags, keys, uniq_key = _three(segments)
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
            return pos, True
        elif isinstance(result, Corrupt) and result.size > 0:
            pos += result.size
        else:  # NeedMore, or Corrupt with nothing to skip: wait for recovery
            break
    return pos, False
