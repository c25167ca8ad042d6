"""The store's read paths (spec 7): pull by queue offset, query by key, view by id.

Plain functions over the store's parts, so that each rule of the spec's tables sits in one
short function and the facade stays a facade.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable

from mqcore.errors import CorruptRecordError, ValidationError
from mqcore.format.msgid import decode_offset_msg_id
from mqcore.message import MessageExt
from mqcore.store.commit_log import CommitLog
from mqcore.store.consume_queue import BLANK_SIZE, ConsumeQueue, Unit
from mqcore.store.index.index_service import IndexService
from mqcore.store.read.record_reader import RecordReader
from mqcore.store.read.record_views import RecordsResult, RecordView
from mqcore.store.results import GetResult, GetStatus

log = logging.getLogger(__name__)

MAX_FILTER_SCAN_BYTES = 16_000  # maxFilterMessageSize: how far a filtered pull scans (spec 7.1)
CQ_UNIT_SIZE = 20
INDEX_TIME_GRANULARITY_MS = 1000  # IndexFile entries store time differences in seconds (4.3)
#: Pulls (``get_messages``, the REST and broker pull path) and lookups by key or id recompute
#: each record's body CRC: a body damaged after recovery scanned it is quarantined, never
#: served. It costs a CRC-32 of each body served, a fraction of a microsecond for a 100-byte
#: body (``bench/engine.py``'s pull row shows it).
CHECK_CRC_ON_PULL = True


def get_messages(
    commit_log: CommitLog,
    queue: ConsumeQueue | None,
    offset: int,
    max_count: int,
    tag_filter: Collection[int] | None,
    max_bytes: int,
) -> GetResult:
    """Spec 7.1's status table, then a scan of at most one ConsumeQueue file.

    Without a filter, only the ``max_count`` units that can be returned are read; with one,
    up to ``MAX_FILTER_SCAN_BYTES`` of units (RocketMQ's bound on a filtered scan). Each
    record's header is checked against its unit and its body CRC recomputed
    (:data:`CHECK_CRC_ON_PULL`); :func:`_scan` says what is skipped."""
    key = (queue.topic, queue.queue_id) if queue is not None else None
    with RecordReader(commit_log, queue=key, check_crc=CHECK_CRC_ON_PULL) as reader:
        status, next_offset, low, high, messages = _scan(
            commit_log, queue, offset, max_count, tag_filter, max_bytes, reader.message
        )
    return GetResult(status, next_offset, low, high, messages)


def get_records(
    commit_log: CommitLog, queue: ConsumeQueue | None, offset: int, max_count: int, max_bytes: int
) -> RecordsResult:
    """:func:`get_messages` without a filter, as raw records (``record_views.py``): the
    same skips and header checks, no CRC (the records are not decoded here)."""
    key = (queue.topic, queue.queue_id) if queue is not None else None
    with RecordReader(commit_log, queue=key) as reader:
        raw = reader.raw

        def view(phys_offset: int, size: int, queue_offset: int) -> RecordView | None:
            data = raw(phys_offset, size)
            return None if data is None else RecordView(data, phys_offset, queue_offset)

        status, next_offset, low, high, records = _scan(
            commit_log, queue, offset, max_count, None, max_bytes, view, with_offset=True
        )
    return RecordsResult(status, next_offset, low, high, records)


def _scan[T](
    commit_log: CommitLog,
    queue: ConsumeQueue | None,
    offset: int,
    max_count: int,
    tag_filter: Collection[int] | None,
    max_bytes: int,
    read: Callable[..., T | None],
    *,
    with_offset: bool = False,
) -> tuple[GetStatus, int, int, int, list[T]]:
    """The status table and the unit walk, shared by the two read forms: ``read(phys_offset,
    size[, queue_offset])`` gives an item, or None when the bytes are gone.

    Never served, each with a logged error, the walk going on past them: a blank unit in
    the middle of the queue (a gap where records are missing: ``ConsumeQueue.put``), a
    unit pointing into a quarantined range, and a record that fails ``read``'s checks
    (``CorruptRecordError``), which is quarantined when the log is damaged there
    (``CommitLog.quarantine_unreadable``). A read of nothing but such units answers
    NO_MATCHED_MESSAGE with ``next_offset`` past them, so a consumer moves on."""
    if queue is None:
        return GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0, []
    low, high = queue.min_offset, queue.max_offset
    if high == 0:
        return GetStatus.NO_MESSAGE_IN_QUEUE, 0, low, high, []
    if offset < low:
        return GetStatus.OFFSET_TOO_SMALL, low, low, high, []
    if offset == high:
        return GetStatus.OFFSET_OVERFLOW_ONE, offset, low, high, []
    if offset > high:
        return GetStatus.OFFSET_OVERFLOW_BADLY, high, low, high, []
    codes = set(tag_filter) if tag_filter else None
    if codes is None:
        scan_limit = max(max_count, 1)  # one item at least, as the loop below returns
    else:
        scan_limit = max(MAX_FILTER_SCAN_BYTES, max_count * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
    units = queue.units(offset, min(scan_limit, high - offset))
    if not units:
        per_file = queue.file_size // CQ_UNIT_SIZE
        return GetStatus.OFFSET_FOUND_NULL, offset + per_file - offset % per_file, low, high, []
    quarantine = commit_log.quarantine
    quarantine.refresh()
    ranges = quarantine.ranges
    status = GetStatus.NO_MATCHED_MESSAGE
    items: list[T] = []
    blanks: list[int] = []
    total_bytes = 0
    next_offset = offset
    for unit in units:
        if items and len(items) >= max_count:
            break
        phys, size = unit.phys_offset, unit.size
        if size == BLANK_SIZE and phys == 0:
            blanks.append(unit.queue_offset)
            next_offset = unit.queue_offset + 1
            continue
        if items and total_bytes + size > max_bytes:
            break
        next_offset = unit.queue_offset + 1
        if codes is not None and _int32(unit.tags_code) not in codes:
            continue
        if ranges:
            entry = quarantine.covering(phys, size)
            if entry is not None:
                what = f"{queue.topic}-{queue.queue_id} offset {unit.queue_offset}"
                quarantine.log_skip(entry, "a pull", what)
                continue
        try:
            if with_offset:
                item = read(phys, size, unit.queue_offset)
            else:
                item = read(phys, size)
        except CorruptRecordError as exc:
            _unreadable(commit_log, queue, unit, exc)
            continue
        if item is None:
            if not items:
                status = GetStatus.MESSAGE_WAS_REMOVING
            continue
        items.append(item)
        total_bytes += size
        status = GetStatus.FOUND
    if blanks:
        what = (
            f"{len(blanks)} blank unit(s) up to offset {blanks[-1]}: a gap whose records "
            "are missing from the CommitLog"
        )
        _log_once(queue, blanks[0], what)
    return status, next_offset, low, high, items


def _unreadable(
    commit_log: CommitLog, queue: ConsumeQueue, unit: Unit, exc: CorruptRecordError
) -> None:
    """A unit whose record fails the reader's checks: quarantine the bytes if the log is
    damaged there, else log that the unit is wrong (a derived file to rebuild)."""
    where = f"{queue.topic}-{queue.queue_id} offset {unit.queue_offset}"
    reason = f"found by a pull of {where}: {exc.detail}"
    if commit_log.quarantine_unreadable(unit.phys_offset, unit.size, reason):
        return
    _log_once(
        queue,
        unit.queue_offset,
        f"a unit (CommitLog {unit.phys_offset}, {unit.size} bytes) whose record fails its "
        f"checks ({exc.detail}); not quarantined: the unit may be wrong (a damaged "
        "ConsumeQueue) or the records around it damaged too (python -m mqcore check and "
        "the next start tell)",
    )


_logged: set[tuple[str, int, int]] = set()
_LOGGED_MAX = 10_000


def _log_once(queue: ConsumeQueue, queue_offset: int, what: str) -> None:
    """An ERROR the first time a unit is skipped in this process, DEBUG after."""
    key = (queue.topic, queue.queue_id, queue_offset)
    first = key not in _logged
    if first and len(_logged) < _LOGGED_MAX:
        _logged.add(key)
    log.log(
        logging.ERROR if first else logging.DEBUG,
        "%s-%d offset %d: skipped %s",
        queue.topic, queue.queue_id, queue_offset, what,
    )  # fmt: skip


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _matches_key(message: MessageExt, topic: str, key: str) -> bool:
    return message.topic == topic and (
        key in message.keys or message.properties.get("UNIQ_KEY") == key
    )


def query_by_key(
    commit_log: CommitLog,
    index: IndexService,
    topic: str,
    key: str,
    begin_ms: int,
    end_ms: int,
    max_count: int,
) -> list[MessageExt]:
    """Up to ``max_count`` exact matches, oldest first (spec 7.4, with the client's key
    re-check done here: the index compares hashes only)."""
    if not key:
        raise ValidationError("key", "required", "key: must not be empty")
    if begin_ms > end_ms:
        raise ValidationError("begin", "before_end", "begin: must not be after end")
    found: dict[int, MessageExt] = {}
    end = end_ms
    for _round in range(3):
        # Index entries keep whole seconds since their file's begin time, floored, so an
        # entry reads up to 999 ms earlier than its message: ask from a second before
        # ``begin_ms`` and keep the exact bound on the decoded store times below.
        result = index.query(
            topic, key, max(max_count, 1) * 2, begin_ms - INDEX_TIME_GRANULARITY_MS, end
        )
        if not result.phys_offsets:
            break
        earliest = end
        for phys in sorted(set(result.phys_offsets)):
            if phys in found:
                continue
            message = commit_log.message_at(phys, check_crc=CHECK_CRC_ON_PULL)
            if message is None:
                continue
            earliest = min(earliest, message.store_timestamp)
            if _matches_key(message, topic, key) and begin_ms <= message.store_timestamp <= end_ms:
                found[phys] = message
        if len(found) >= max_count or earliest >= end:
            break
        end = earliest - 1
        if end < begin_ms:
            break
    ordered = sorted(found.values(), key=lambda m: m.phys_offset)
    return ordered[:max_count]


def view_by_id(
    commit_log: CommitLog, index: IndexService, topics: Iterable[str], msg_id: str
) -> MessageExt | None:
    """An offsetMsgId names a phys_offset; a UNIQ_KEY is looked up in the index of every
    topic (the id carries no topic)."""
    text = msg_id.strip().upper()
    try:
        _host, phys = decode_offset_msg_id(text)
    except ValidationError:
        phys = -1
    if phys >= 0:
        message = commit_log.message_at(phys, check_crc=CHECK_CRC_ON_PULL)
        if message is not None and message.offset_msg_id.upper() == text:
            return message
    for topic in topics:
        for message in query_by_key(commit_log, index, topic, text, 0, 2**62, 1):
            if message.properties.get("UNIQ_KEY", "").upper() == text:
                return message
    return None
