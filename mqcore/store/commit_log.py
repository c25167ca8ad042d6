"""The CommitLog: every message of every topic, appended in one sequence of mapped segments.

Layout (spec 1, 2.2)::

    <root>/commitlog/00000000000000000000      records, then an end-of-file blank record
    <root>/commitlog/00000000001073741824      the next segment, named by its phys_offset

A record never straddles two segments: when a record (or a whole batch) plus the 8-byte
blank record does not fit in what is left of a segment, the writer writes the blank record
(``TOTALSIZE = remaining``, ``BLANK_MAGIC_CODE``), claims the rest of the segment and writes
the record at the start of the next one.

Invariants:
  * One writer: every append runs under ``put_lock``; STORETIMESTAMP is taken inside it, so
    store times never go back along the log.
  * ``queue_offsets`` holds the next ConsumeQueue offset of every (topic, queue_id); it is
    assigned at append time (written into the record's QUEUEOFFSET) and rebuilt at start from
    the ConsumeQueues' max offsets (spec 5.4 step 6).
  * Readers read only below a segment's ``wrote_position`` (the bytes are copied in before the
    position moves), so they never see half a record.

Crash behaviour: the CommitLog is the source of truth and carries a CRC per record; recovery
(``recovery.py``) scans it, quarantines corrupt ranges in the middle of the log
(``quarantine.py``: kept in place, skipped by reput and by every read here), cuts a torn tail
and rebuilds what is derived from it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

from mqcore.clock import Clock
from mqcore.errors import CorruptRecordError, MessageIllegalError
from mqcore.format.body_crc import body_crc
from mqcore.format.delay_levels import parse_delay_levels
from mqcore.format.layout import (
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    INT32,
    INT64,
    SIZE_MAGIC,
    SYSFLAG_POSITION,
    store_timestamp_position,
)
from mqcore.format.msgid import HostAddress
from mqcore.format.record import (
    Blank,
    Corrupt,
    DispatchRequest,
    decode_dispatch,
    decode_record,
    encode_blank,
    encode_record_parts,
)
from mqcore.message import Message, MessageExt
from mqcore.store.config import StoreConfig
from mqcore.store.files.prefault import reserve_chunk_bytes
from mqcore.store.files.segments import MappedFileQueue
from mqcore.store.put.plain_batch import PlainColumns, encode_plain, encode_plain_columns
from mqcore.store.recovery.quarantine import FoundBy, Quarantine, record_header
from mqcore.store.recovery.record_search import SegmentFile
from mqcore.store.results import BatchPutResults


@dataclass(slots=True)
class PendingRecord:
    """A message ready to append: everything but the offsets and the store time.

    ``size`` is the record's TOTALSIZE (``layout.record_size``), computed by the
    caller before the put lock is taken. ``takes_queue_offset`` is False for PREPARED and
    ROLLBACK transaction records, which get QUEUEOFFSET 0 and no ConsumeQueue entry.
    """

    topic: str
    queue_id: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    properties: bytes
    size: int
    takes_queue_offset: bool = True


class Appended(NamedTuple):
    """Where one record went. (A NamedTuple: built once per record under the put lock, in
    ~0.15 us against ~0.6 us for a frozen dataclass.)"""

    phys_offset: int
    queue_offset: int
    store_timestamp: int
    size: int


# Bytes from a record's start that always cover STORETIMESTAMP: it follows BORNHOST, which is
# 20 bytes when IPv6. Every record is longer than this (91 bytes at least), so it is readable.
_STORE_TIMESTAMP_HEAD_BYTES = store_timestamp_position(BORNHOST_V6_FLAG) + INT64.size


class CommitLog:
    """The mapped segments of the CommitLog, their single writer and their readers."""

    def __init__(
        self, root: Path, config: StoreConfig, clock: Clock, *, readonly: bool = False
    ) -> None:
        self.config = config
        self.clock = clock
        self.file_size = config.commitlog_file_size
        self.store_host = config.store_host
        self.segments = MappedFileQueue(
            Path(root) / "commitlog",
            self.file_size,
            readonly=readonly,
            clock=clock,
            reserve_chunk_bytes=reserve_chunk_bytes(config),  # blocks ahead of the writer
        )
        self.put_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.delay_levels_ms = parse_delay_levels(config.message_delay_level)
        #: Corrupt ranges that reput and readers skip; the store replaces it with its own
        #: (which reports to its health), tools keep this one (loaded by whoever needs it).
        self.quarantine = Quarantine(root, clock, readonly=readonly)

    # -- lifecycle ------------------------------------------------------------------------

    def load(self) -> None:
        """Map the existing segments (all considered full until recovery truncates)."""
        self.segments.load()

    def close(self) -> None:
        self.segments.close()

    # -- offsets --------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """The first readable phys_offset (0 for an empty log). Thread-safe."""
        return self.segments.min_offset

    @property
    def max_offset(self) -> int:
        """One past the last written byte. Thread-safe."""
        return self.segments.max_offset

    @property
    def flushed_offset(self) -> int:
        """Everything below is on disk. Thread-safe."""
        return self.segments.flushed_where

    @property
    def confirm_offset(self) -> int:
        """How far reput may dispatch (spec 6.1): the flushed offset under sync flush (a
        consumer never sees a message the producer was not told is safe), else the end."""
        return self.flushed_offset if self.config.flush == "sync" else self.max_offset

    def roll_next_file(self, offset: int) -> int:
        """The start of the segment after the one holding ``offset``."""
        return offset + self.file_size - offset % self.file_size

    # -- writing --------------------------------------------------------------------------

    def append(self, batch: Sequence[PendingRecord]) -> list[Appended]:
        """Append records contiguously in one segment, under the put lock. Thread-safe.

        Raises:
            MessageIllegalError: the batch cannot fit even in an empty segment.
            StoreNotWritableError: the log is open read-only.
        """
        total = sum(r.size for r in batch)
        if total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise MessageIllegalError(
                "messages",
                "max_batch_bytes",
                f"messages: {total} bytes do not fit in one CommitLog segment "
                f"of {self.file_size} bytes",
            )
        with self.put_lock:
            return self._append_locked(batch, total)

    def _append_locked(self, batch: Sequence[PendingRecord], total: int) -> list[Appended]:
        segment = self.segments.last_or_create(0)
        if total + END_FILE_MIN_BLANK_LENGTH > segment.remaining:
            segment.fill_to_end(encode_blank(segment.remaining))
            segment = self.segments.last_or_create(0)
        store_timestamp = self.clock.now_ms()
        phys_offset = segment.base_offset + segment.wrote_position
        # The records' pieces go into one list, joined once (encode_record_parts).
        parts: list[bytes] = []
        appended: list[Appended] = []
        offsets = self.queue_offsets
        # Queue offsets are taken here and committed to the table only once the bytes are in
        # the segment: a record that fails to encode must not leave a gap in its queue.
        advanced: dict[tuple[str, int], int] = {}
        store_host = self.store_host
        for r in batch:
            key = (r.topic, r.queue_id)
            if r.takes_queue_offset:
                queue_offset = advanced.get(key)
                if queue_offset is None:
                    queue_offset = offsets.get(key, 0)
            else:
                queue_offset = 0
            size = encode_record_parts(
                parts, r.topic, r.queue_id, r.flag, queue_offset, phys_offset, r.sys_flag,
                r.born_timestamp, r.born_host, store_timestamp, store_host, r.reconsume_times,
                r.prepared_transaction_offset, r.body, r.properties,
            )  # fmt: skip
            appended.append(Appended(phys_offset, queue_offset, store_timestamp, size))
            phys_offset += size
            if r.takes_queue_offset:
                advanced[key] = queue_offset + 1
        segment.append(b"".join(parts))
        offsets.update(advanced)
        segment.store_timestamp_ms = store_timestamp
        return appended

    def append_plain(
        self,
        msgs: Sequence[Message] | PlainColumns,
        queue_id: int,
        uniq_head: str,
        uniq_first: int,
        now_ms: int,
        default_born_host: HostAddress,
    ) -> BatchPutResults | None:
        """Append a plain batch (``plain_batch.py``) contiguously in one segment, under the
        put lock: the same bytes and offsets as :meth:`append`. ``msgs`` are messages
        (:func:`encode_plain`) or columns (:func:`encode_plain_columns`); the other
        arguments are the encoder's. Thread-safe.

        Returns:
            The PutResults (status PUT_OK), or None when the batch is not plain (nothing
            written: take the general path).

        Raises:
            MessageIllegalError: as :meth:`append` (too big for a segment, or an integer
                field outside its width); nothing is written then.
        """
        if isinstance(msgs, PlainColumns):
            key, encode = (msgs.topic, queue_id), partial(encode_plain_columns, msgs)
        else:
            key, encode = (msgs[0].topic, queue_id), partial(encode_plain, msgs)
        max_body = self.config.max_message_size
        store_host = self.store_host
        with self.put_lock:
            segment = self.segments.last_or_create(0)
            store_timestamp = self.clock.now_ms()
            queue_offset = self.queue_offsets.get(key, 0)
            phys_offset = segment.base_offset + segment.wrote_position
            batch = encode(
                queue_id, uniq_head, uniq_first, now_ms, max_body, default_born_host,
                store_host, phys_offset, queue_offset, store_timestamp,
            )  # fmt: skip
            if batch is None:
                return None
            parts, results, total, next_queue_offset = batch
            if total + END_FILE_MIN_BLANK_LENGTH > segment.remaining:
                if total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
                    raise MessageIllegalError(
                        "messages",
                        "max_batch_bytes",
                        f"messages: {total} bytes do not fit in one CommitLog segment "
                        f"of {self.file_size} bytes",
                    )
                segment.fill_to_end(encode_blank(segment.remaining))
                segment = self.segments.last_or_create(0)
                phys_offset = segment.base_offset + segment.wrote_position
                # Encoding is deterministic: the same records at the new position.
                batch = encode(
                    queue_id, uniq_head, uniq_first, now_ms, max_body, default_born_host,
                    store_host, phys_offset, queue_offset, store_timestamp,
                )  # fmt: skip
                assert batch is not None
                parts, results, total, next_queue_offset = batch
            segment.append(b"".join(parts))
            self.queue_offsets[key] = next_queue_offset
            segment.store_timestamp_ms = store_timestamp
        return results

    def flush(self, least_pages: int) -> bool:
        """One flush pass (spec 6.2). Thread-safe: flushes are serialised.

        Returns:
            True if the flushed offset moved.
        """
        with self._flush_lock:
            return self.segments.flush(least_pages)

    def flush_until(self, end_offset: int) -> bool:
        """Group commit: return once everything below ``end_offset`` is on disk.

        The first producer to get here flushes for everyone waiting behind it: each flush
        covers all bytes written so far, so the waiters after it find their offset already
        flushed and return without another msync. Thread-safe.

        Returns:
            False if the flush stopped making progress before reaching ``end_offset``.
        """
        if self.segments.flushed_where >= end_offset:
            return True
        with self._flush_lock:
            while self.segments.flushed_where < end_offset:
                if not self.segments.flush(0):
                    return self.segments.flushed_where >= end_offset
        return True

    # -- reading --------------------------------------------------------------------------

    def read(self, phys_offset: int, size: int) -> bytes | None:
        """A copy of ``size`` bytes at ``phys_offset``, or None if they are not readable."""
        segment = self.segments.find(phys_offset)
        if segment is None or not segment.hold():
            return None
        try:
            pos = phys_offset - segment.base_offset
            if pos < 0 or pos + size > segment.wrote_position:
                return None
            return segment.read(pos, size)
        finally:
            segment.release()

    def record_size_at(self, phys_offset: int) -> int | None:
        """TOTALSIZE of the record at ``phys_offset`` (None if unreadable or blank)."""
        head = self.read(phys_offset, SIZE_MAGIC.size)
        if head is None:
            return None
        size, _magic = SIZE_MAGIC.unpack(head)
        return size if size > 0 else None

    def message_at(
        self, phys_offset: int, size: int | None = None, *, check_crc: bool = False
    ) -> MessageExt | None:
        """Decode the record at ``phys_offset`` (spec 7.3), or None if it is not there, is
        not a whole record, or lies in a quarantined range (logged).

        With ``check_crc`` the body CRC is checked too; a mismatch is quarantined (found by
        a read, :meth:`quarantine_unreadable`) and the record not returned."""
        quarantine = self.quarantine
        if quarantine.ranges:
            entry = quarantine.covering(phys_offset, size or 1)
            if entry is not None:
                quarantine.log_skip(entry, "a read", f"the record at {phys_offset}")
                return None
        if size is None:
            size = self.record_size_at(phys_offset)
            if size is None:
                return None
        raw = self.read(phys_offset, size)
        if raw is None:
            return None
        try:
            # decode_record frames the record as reput does and raises on anything else.
            message = decode_record(raw, 0)
        except CorruptRecordError:
            return None
        if message.phys_offset != phys_offset:
            return None
        if check_crc and body_crc(message.body) != message.body_crc:
            reason = (
                f"body CRC mismatch: stored {message.body_crc}, computed {body_crc(message.body)}"
            )
            self.quarantine_unreadable(phys_offset, size, reason)
            return None
        return message

    def quarantine_unreadable(
        self, phys_offset: int, size: int, reason: str, *, found_by: FoundBy = "read"
    ) -> bool:
        """A read (or the start check, ``found_by``) found no good record of ``size`` bytes
        at ``phys_offset`` (where a ConsumeQueue unit or an index entry says one is):
        quarantine those bytes if the CommitLog is really damaged there, not the pointer.
        Returns whether it did (or whether they were quarantined already).

        The bytes count as damaged only when no valid record starts at ``phys_offset``
        (CRC and PHYSICALOFFSET checked; a valid record whose topic is not a valid name
        counts as damaged, since no CRC covers the topic), none starts inside the range,
        and the range is followed by a valid record, a blank record or the written end: the
        pointer frames a record that went bad. Anything else is a wrong pointer (a damaged
        derived file): logged by the caller, never quarantined, so a good record is never
        skipped because a unit pointed at it wrongly.
        """
        segment = self.segments.find(phys_offset)
        if segment is None or size <= 0:
            return False
        base = segment.base_offset
        pos = phys_offset - base
        end = pos + size
        written = segment.wrote_position
        if pos < 0 or end > written:
            return False
        with SegmentFile(segment.path, self.file_size) as f:
            if f.valid_at(pos, base) == "record":
                header = record_header(f.read(pos, size), phys_offset)
                if header is None or header.topic is not None:
                    return False  # an intact record: the pointer is what is wrong
            if end < written and f.valid_at(end, base) is None:
                return False
            if f.find_valid(pos + 1, end, base) is not None:
                return False
            self.quarantine.quarantine(f, base, pos, end, reason=reason, found_by=found_by)
        return True

    def store_time_of(self, phys_offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at ``phys_offset``, or -1 (``pickupStoreTimestamp``)."""
        if phys_offset < self.min_offset:
            return -1
        head = self.read(phys_offset, _STORE_TIMESTAMP_HEAD_BYTES)
        if head is None:
            return -1
        (sys_flag,) = INT32.unpack_from(head, SYSFLAG_POSITION)
        (timestamp,) = INT64.unpack_from(head, store_timestamp_position(sys_flag))
        return int(timestamp)

    def iter_dispatch(
        self,
        from_offset: int,
        end_offset: int,
        max_bytes: int,
        delay_levels_ms: Sequence[int],
        *,
        skip_corrupt: bool = True,
    ) -> Iterator[DispatchRequest | int]:
        """Walk records from ``from_offset`` towards ``end_offset`` for reput (spec 6.1).

        Yields each record's :class:`DispatchRequest`; the last item is always an ``int``:
        the offset the walk reached, where the next walk starts. It stops at ``end_offset``,
        after about ``max_bytes``, at a record not fully written yet, or at a corrupt record
        with no size to skip (recovery's business: a torn tail, or corruption another
        process quarantines; the quarantine is re-read then). A blank record jumps to the
        next segment; a quarantined range is jumped over (logged once); a corrupt record
        that states its size is skipped, as RocketMQ does, unless ``skip_corrupt`` is
        False: then it stops the walk too (the rebuilds' walks, ``rebuild_walk.py``).
        """
        quarantine = self.quarantine
        offset = max(from_offset, self.min_offset)
        budget_end = offset + max_bytes
        while offset < end_offset and offset < budget_end:
            bad = None
            if quarantine.ranges:
                entry = quarantine.covering(offset)
                if entry is not None:
                    quarantine.log_skip(entry, "reput", f"CommitLog {offset}..{entry.end}")
                    offset = entry.end
                    continue
                bad = quarantine.next_start(offset)
            segment = self.segments.find(offset)
            if segment is None or not segment.hold():
                break
            base = segment.base_offset
            pos = offset - base
            to_next_segment = stalled = False
            try:
                limit = min(segment.wrote_position, end_offset - base)
                if bad is not None:
                    limit = min(limit, bad - base)
                stop = min(limit, budget_end - base)
                buf = segment.buffer
                while pos < stop:
                    result = decode_dispatch(buf, pos, limit, delay_levels_ms=delay_levels_ms)
                    if isinstance(result, DispatchRequest):
                        yield result
                        pos += result.size
                    elif isinstance(result, Blank):
                        to_next_segment = True
                        break
                    elif isinstance(result, Corrupt) and result.size > 0 and skip_corrupt:
                        pos += result.size
                    else:  # NeedMore, or Corrupt with nothing to skip: wait for recovery
                        stalled = isinstance(result, Corrupt)
                        break
            finally:
                segment.release()
            if to_next_segment:
                offset = base + self.file_size
                continue
            offset = base + pos
            if bad is not None and offset == bad and not stalled:
                continue  # at a quarantined range: jumped next round
            if stalled:
                quarantine.refresh()  # another process may have quarantined it
            break
        yield offset
