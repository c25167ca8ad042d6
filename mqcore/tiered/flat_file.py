"""One queue's flat CommitLog and flat ConsumeQueue in the tier (spec 10, RocketMQ
``FlatMessageFile``).

Layout (both are sequences of backend segments, named by their first byte offset)::

    flat CommitLog    [record q0][record q1][record q2] ...   records byte for byte from the
                      0          s0         s0+s1             local CommitLog, no padding
    flat ConsumeQueue [unit q0][unit q1][unit q2] ...         20-byte CQ units (spec 3.1):
                      q0*20    (q0+1)*20                      phys_offset re-based to the flat
                                                              CommitLog, size, tags_code

Only the CQ unit's phys_offset is re-based; the record keeps its original PHYSICALOFFSET and
QUEUEOFFSET fields, so a record read from the tier is identical to the local one. A queue
offset whose record the local store does not have (a blank unit there: the record is missing
from the CommitLog, or quarantined as corrupt) gets a *blank unit* here too, ``(0,
2147483647, 0)`` as locally, and no CommitLog bytes (:meth:`FlatFile.append_blank`): queue
offsets never shift, and readers skip it as local readers do. The flat
ConsumeQueue starts at ``start_queue_offset * 20`` (a queue's tier may begin mid-queue); the
flat CommitLog starts at byte 0. A record never straddles CommitLog segments: a segment rolls
before a record would take it past ``commit_log_segment_size_bytes``.

Invariants:

* ``min_offset <= commit_offset <= dispatch_offset`` (queue offsets). ``append`` buffers in
  memory and advances ``dispatch_offset``; ``commit`` uploads (CommitLog first, then
  ConsumeQueue, so a committed unit never points at missing bytes), then saves the progress in
  ``tieredStoreMetadata.json`` and advances ``commit_offset``. Reads serve committed offsets
  only.
* The metadata is saved after the backend append, so after a crash the backend may hold more
  than the metadata says, never less.

Crash behaviour (``_resume``, run by the constructor): the metadata's committed segment sizes
are the truth. Backend bytes past them (an upload that finished, or half-finished, before
the metadata save) are truncated, and segments the metadata does not know are deleted; the
dispatcher then re-appends from ``commit_offset``, so nothing is lost and nothing duplicated.
A backend holding *less* than the metadata says means committed data was lost outside our
control: :class:`TieredStoreError`, never a silent rewind. The bytes cut are reported in
:class:`ResumeReport` and logged.

Thread-safety: every public method holds the file's lock (``commit`` holds it across the
upload, so readers of this queue wait for it; other queues do not).
"""

from __future__ import annotations

import bisect
import logging
import threading
from dataclasses import dataclass, field

from mqcore.clock import Clock, SystemClock
from mqcore.errors import CorruptIndexError, CorruptRecordError, ValidationError
from mqcore.format.record import Valid, check_record
from mqcore.store.consume_queue import BLANK_SIZE, BLANK_UNIT, CQ_UNIT, CQ_UNIT_SIZE, Unit
from mqcore.tiered.backend import SegmentBackend, SegmentId, SegmentType, TieredStoreError
from mqcore.tiered.config import TieredConfig
from mqcore.tiered.metadata import QueueProgress, SegmentMeta, SegmentStatus, TieredMetadataStore

log = logging.getLogger(__name__)


#: Units read at a time while looking past blank units.
_SCAN_UNITS = 256


def is_blank(unit: Unit) -> bool:
    """Whether ``unit`` is a blank unit (module docstring): an offset with no record."""
    return unit.phys_offset == 0 and unit.size == BLANK_SIZE


@dataclass(slots=True)
class ResumeReport:
    """What resuming had to undo: backend bytes past the committed sizes, per segment type,
    and backend segments the metadata did not know."""

    truncated_bytes: dict[SegmentType, int] = field(default_factory=dict)
    deleted_segments: list[SegmentId] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not any(self.truncated_bytes.values()) and not self.deleted_segments


@dataclass(slots=True)
class _Segment:
    base_offset: int
    committed: int = 0
    pending: bytearray = field(default_factory=bytearray)
    created: bool = False
    sealed: bool = False
    create_timestamp: int = 0
    begin_timestamp: int = 0
    end_timestamp: int = 0
    seal_timestamp: int = 0

    def meta(self) -> SegmentMeta:
        status = SegmentStatus.SEALED if self.sealed else SegmentStatus.NEW
        return SegmentMeta(
            self.base_offset,
            self.committed,
            status,
            self.create_timestamp,
            self.begin_timestamp,
            self.end_timestamp,
            self.seal_timestamp,
        )


class _FlatLog:
    """An append-only byte log of one type over backend segments. Not thread-safe: the
    owning :class:`FlatFile` holds its lock around every call."""

    def __init__(
        self,
        backend: SegmentBackend,
        topic: str,
        queue_id: int,
        type: SegmentType,
        max_segment_bytes: int,
        start_offset: int,
        committed: dict[int, SegmentMeta],
    ) -> None:
        self.backend = backend
        self.topic = topic
        self.queue_id = queue_id
        self.type = type
        self.max_segment_bytes = max_segment_bytes
        self.segments = [
            _Segment(
                m.base_offset,
                m.size,
                created=True,
                sealed=m.status == SegmentStatus.SEALED,
                create_timestamp=m.create_timestamp,
                begin_timestamp=m.begin_timestamp,
                end_timestamp=m.end_timestamp,
                seal_timestamp=m.seal_timestamp,
            )
            for m in sorted(committed.values(), key=lambda m: m.base_offset)
        ]
        self.commit_offset = self._end(start_offset)
        self.append_offset = self.commit_offset

    def _end(self, start_offset: int) -> int:
        if not self.segments:
            return start_offset
        for prev, nxt in zip(self.segments, self.segments[1:], strict=False):
            if prev.base_offset + prev.committed != nxt.base_offset:
                raise TieredStoreError(
                    f"{self._id(nxt.base_offset)}: segment tables have a gap or overlap"
                )
        last = self.segments[-1]
        return last.base_offset + last.committed

    def _id(self, base_offset: int) -> SegmentId:
        return SegmentId(self.topic, self.queue_id, self.type, base_offset)

    @property
    def min_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else self.commit_offset

    def reconcile(self, report: ResumeReport) -> None:
        """Make the backend hold exactly the committed segments (module docstring)."""
        known = {s.base_offset for s in self.segments}
        for base in self.backend.list_segments(self.topic, self.queue_id, self.type):
            if base not in known:
                self.backend.delete(self._id(base))
                report.deleted_segments.append(self._id(base))
        for seg in self.segments:
            segment_id = self._id(seg.base_offset)
            actual = self.backend.size(segment_id) if self.backend.exists(segment_id) else -1
            if actual < seg.committed:
                raise TieredStoreError(
                    f"{segment_id}: metadata says {seg.committed} bytes are committed, "
                    f"the backend holds {max(actual, 0)}{'' if actual >= 0 else ' (missing)'}"
                )
            if actual > seg.committed:
                self.backend.truncate(segment_id, seg.committed)
                report.truncated_bytes[self.type] = (
                    report.truncated_bytes.get(self.type, 0) + actual - seg.committed
                )
            if seg.sealed:
                self.backend.seal(segment_id)
            else:
                seg.sealed = self.backend.is_sealed(segment_id)

    def append(self, data: bytes, timestamp_ms: int, now_ms: int) -> int:
        """Buffer ``data`` (rolling first if it would overflow). Returns its byte offset."""
        last = self.segments[-1] if self.segments else None
        if last is None or (
            self.append_offset > last.base_offset
            and self.append_offset - last.base_offset + len(data) > self.max_segment_bytes
        ):
            last = _Segment(self.append_offset, create_timestamp=now_ms)
            self.segments.append(last)
        if self.append_offset == last.base_offset:
            last.begin_timestamp = timestamp_ms
        last.end_timestamp = timestamp_ms
        last.pending += data
        offset = self.append_offset
        self.append_offset += len(data)
        return offset

    def commit(self, now_ms: int) -> None:
        """Upload every pending chunk in order, then seal the segments that rolled.

        Raises:
            TieredStoreError: the backend refused (``SegmentPositionError`` among others);
                the log's committed state stays as it was for the chunks not uploaded.
        """
        for seg in self.segments:
            if not seg.pending:
                continue
            segment_id = self._id(seg.base_offset)
            if not seg.created:
                self.backend.create(segment_id)
                seg.created = True
            self.backend.append(segment_id, bytes(seg.pending), seg.committed)
            seg.committed += len(seg.pending)
            self.commit_offset = seg.base_offset + seg.committed
            seg.pending.clear()
        for seg in self.segments[:-1]:
            if not seg.sealed:
                self.backend.seal(self._id(seg.base_offset))
                seg.sealed = True
                seg.seal_timestamp = now_ms

    def read(self, offset: int, length: int) -> bytes:
        """Committed bytes ``[offset, offset + length)``, across segments.

        Raises:
            CorruptIndexError: the backend returned fewer bytes than committed.
        """
        out = bytearray()
        bases = [s.base_offset for s in self.segments]
        index = bisect.bisect_right(bases, offset) - 1
        while len(out) < length and 0 <= index < len(self.segments):
            seg = self.segments[index]
            position = offset + len(out) - seg.base_offset
            want = min(length - len(out), seg.committed - position)
            if want <= 0:
                break
            chunk = self.backend.read(self._id(seg.base_offset), position, want)
            if len(chunk) != want:
                raise CorruptIndexError(
                    f"{self._id(seg.base_offset)}: read {len(chunk)} of {want} committed bytes"
                )
            out += chunk
            index += 1
        if len(out) != length:
            raise CorruptIndexError(
                f"{self.topic}/{self.queue_id} {self.type.name}: bytes [{offset}, "
                f"{offset + length}) are not all committed"
            )
        return bytes(out)

    def committed_metas(self) -> dict[int, SegmentMeta]:
        return {s.base_offset: s.meta() for s in self.segments if s.committed > 0}


class FlatFile:
    """One queue's flat CommitLog + flat ConsumeQueue, resumed from the metadata on creation.

    Args:
        backend: where the segments live.
        metadata: the progress store (loaded); ``commit`` saves it.
        topic, queue_id: the queue.
        config: segment sizes and group-commit thresholds.
        clock: time source for segment and progress timestamps.
        start_queue_offset: first queue offset of a queue the metadata does not know yet.
        readonly: a reader beside another process's writer (Celery mode): the backend is
            not reconciled (the writer owns it) and appends raise.

    Raises:
        TieredStoreError: the backend holds less than the metadata says was committed, or
            the metadata's segment tables are inconsistent.
    """

    def __init__(
        self,
        backend: SegmentBackend,
        metadata: TieredMetadataStore,
        topic: str,
        queue_id: int,
        config: TieredConfig | None = None,
        *,
        clock: Clock | None = None,
        start_queue_offset: int = 0,
        readonly: bool = False,
    ) -> None:
        self.readonly = readonly
        self.backend = backend
        self.metadata = metadata
        self.topic = topic
        self.queue_id = queue_id
        self.config = config or TieredConfig()
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._pending_count = 0
        self._pending_bytes = 0
        self._oldest_pending_ms = 0
        self.resume_report = self._resume(start_queue_offset)

    def _resume(self, start_queue_offset: int) -> ResumeReport:
        progress = self.metadata.get(self.topic, self.queue_id) or QueueProgress(
            self.topic, self.queue_id, start_queue_offset, start_queue_offset, start_queue_offset
        )
        self._min_offset = progress.min_offset
        self._commit_offset = progress.commit_offset
        self._dispatch_offset = progress.commit_offset  # the uncommitted tail died with us
        self._commit_log = _FlatLog(
            self.backend,
            self.topic,
            self.queue_id,
            SegmentType.COMMIT_LOG,
            self.config.commit_log_segment_size_bytes,
            0,
            progress.commit_log_segments,
        )
        self._consume_queue = _FlatLog(
            self.backend,
            self.topic,
            self.queue_id,
            SegmentType.CONSUME_QUEUE,
            self.config.consume_queue_segment_size_bytes,
            progress.min_offset * CQ_UNIT_SIZE,
            progress.consume_queue_segments,
        )
        self._check_queue_end()
        report = ResumeReport()
        if not self.readonly:
            self._commit_log.reconcile(report)
            self._consume_queue.reconcile(report)
        self._check_commit_log_end()
        if not report.clean:
            log.warning(
                "tiered %s/%s resumed at offset %d: truncated %s, deleted %s",
                self.topic,
                self.queue_id,
                self._commit_offset,
                {t.name: n for t, n in report.truncated_bytes.items()},
                [str(s) for s in report.deleted_segments],
            )
        return report

    def _check_queue_end(self) -> None:
        cq_end = self._consume_queue.commit_offset
        if cq_end != self._commit_offset * CQ_UNIT_SIZE:
            raise TieredStoreError(
                f"tiered {self.topic}/{self.queue_id}: commit offset {self._commit_offset} "
                f"but the ConsumeQueue segments end at byte {cq_end}"
            )

    def _check_commit_log_end(self) -> None:
        last = self._last_record_unit_locked()
        if last is not None:
            if last.phys_offset + last.size != self._commit_log.commit_offset:
                raise TieredStoreError(
                    f"tiered {self.topic}/{self.queue_id}: last unit ends at "
                    f"{last.phys_offset + last.size}, the CommitLog at "
                    f"{self._commit_log.commit_offset}"
                )

    def _unit_locked_unchecked(self, queue_offset: int) -> Unit:
        raw = self._consume_queue.read(queue_offset * CQ_UNIT_SIZE, CQ_UNIT_SIZE)
        return Unit(queue_offset, *CQ_UNIT.unpack(raw))

    def _last_record_unit_locked(self) -> Unit | None:
        """The last committed unit that is not blank (None if there is none)."""
        end = self._commit_offset
        while end > self._min_offset:
            start = max(self._min_offset, end - _SCAN_UNITS)
            for unit in reversed(self._units_locked(start, end - start)):
                if not is_blank(unit):
                    return unit
            end = start
        return None

    def _next_record_phys_locked(self, queue_offset: int) -> int | None:
        """The phys offset of the first committed unit at or after ``queue_offset`` that is
        not blank (None if there is none)."""
        while queue_offset < self._commit_offset:
            units = self._units_locked(queue_offset, _SCAN_UNITS)
            for unit in units:
                if not is_blank(unit):
                    return unit.phys_offset
            queue_offset += len(units)
        return None

    # -- offsets ---------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """First queue offset the tier holds. Thread-safe."""
        with self._lock:
            return self._min_offset

    @property
    def commit_offset(self) -> int:
        """End of the durably uploaded queue offsets (readable below it). Thread-safe."""
        with self._lock:
            return self._commit_offset

    @property
    def dispatch_offset(self) -> int:
        """End of the appended queue offsets, committed or not. Thread-safe."""
        with self._lock:
            return self._dispatch_offset

    @property
    def max_offset(self) -> int:
        """RocketMQ's flat-file max offset for readers: the commit offset. Thread-safe."""
        return self.commit_offset

    @property
    def commit_log_offset(self) -> int:
        """End of the committed flat CommitLog, in bytes. Thread-safe."""
        with self._lock:
            return self._commit_log.commit_offset

    # -- writing ---------------------------------------------------------------------------

    def append(
        self, record: bytes, queue_offset: int, tags_code: int, store_timestamp: int | None = None
    ) -> bool:
        """Buffer one record and its CQ unit (uploaded by :meth:`commit`). Thread-safe.

        Args:
            record: the whole CommitLog record, as read from the local store.
            queue_offset: its queue offset; must be the dispatch offset.
            tags_code: the local CQ unit's tag code, copied as is.
            store_timestamp: the record's STORETIMESTAMP (group-commit timeout, segment
                times); None takes it from the record.

        Returns:
            True if appended, False if ``queue_offset`` was appended already (a re-dispatch
            after resume is idempotent).

        Raises:
            ValidationError: ``queue_offset`` is past the dispatch offset (a gap).
            CorruptRecordError: ``record`` is not exactly one well-framed record.
        """
        if self.readonly:
            raise TieredStoreError(f"tiered {self.topic}/{self.queue_id} was opened read-only")
        with self._lock:
            if queue_offset < self._dispatch_offset:
                return False
            if queue_offset > self._dispatch_offset:
                raise ValidationError(
                    "queue_offset",
                    "contiguous",
                    f"tiered {self.topic}/{self.queue_id}: append at {queue_offset}, "
                    f"expected {self._dispatch_offset}",
                )
            checked = check_record(record, 0, len(record), check_crc=False)
            if not isinstance(checked, Valid) or checked.size != len(record):
                raise CorruptRecordError(
                    f"tiered:{self.topic}/{self.queue_id}",
                    queue_offset,
                    f"not one record: {checked}",
                )
            if store_timestamp is None:
                store_timestamp = checked.store_timestamp
            now_ms = self.clock.now_ms()
            phys_offset = self._commit_log.append(record, store_timestamp, now_ms)
            unit = CQ_UNIT.pack(phys_offset, len(record), tags_code)
            self._consume_queue.append(unit, store_timestamp, now_ms)
            if not self._pending_count:
                self._oldest_pending_ms = store_timestamp
            self._pending_count += 1
            self._pending_bytes += len(record)
            self._dispatch_offset += 1
            return True

    def append_blank(self, queue_offset: int) -> bool:
        """Buffer a blank unit at ``queue_offset`` (module docstring: the local store has
        no record there), with no CommitLog bytes. Thread-safe.

        Returns:
            True if appended, False if ``queue_offset`` was appended already.

        Raises:
            ValidationError: ``queue_offset`` is past the dispatch offset (a gap).
        """
        if self.readonly:
            raise TieredStoreError(f"tiered {self.topic}/{self.queue_id} was opened read-only")
        with self._lock:
            if queue_offset < self._dispatch_offset:
                return False
            if queue_offset > self._dispatch_offset:
                raise ValidationError(
                    "queue_offset",
                    "contiguous",
                    f"tiered {self.topic}/{self.queue_id}: blank at {queue_offset}, "
                    f"expected {self._dispatch_offset}",
                )
            now_ms = self.clock.now_ms()
            self._consume_queue.append(BLANK_UNIT, now_ms, now_ms)
            if not self._pending_count:
                self._oldest_pending_ms = now_ms
            self._pending_count += 1
            self._dispatch_offset += 1
            return True

    def buffer_full(self) -> bool:
        """The count or size threshold is reached (the age one is not looked at). Thread-safe."""
        with self._lock:
            return (
                self._pending_count >= self.config.group_commit_count
                or self._pending_bytes >= self.config.group_commit_size_bytes
            )

    def should_commit(self, now_ms: int | None = None) -> bool:
        """Group commit: enough messages or bytes wait, or the oldest waits too long.
        Thread-safe."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            return self._pending_count > 0 and (
                self._pending_count >= self.config.group_commit_count
                or self._pending_bytes >= self.config.group_commit_size_bytes
                or now - self._oldest_pending_ms >= self.config.group_commit_timeout_ms
            )

    def commit(self) -> int:
        """Upload the buffer (CommitLog, then ConsumeQueue), then save the progress.
        Thread-safe.

        Returns:
            How many messages became committed (0 if nothing was pending).

        Raises:
            TieredStoreError, OSError: the upload or the metadata save failed. The commit
                offset has not moved; recreate the flat file (which resumes from the saved
                progress) and re-append from :attr:`commit_offset`.
        """
        with self._lock:
            if not self._pending_count:
                return 0
            now_ms = self.clock.now_ms()
            self._commit_log.commit(now_ms)
            self._consume_queue.commit(now_ms)
            self.metadata.put(self._progress_locked(self._dispatch_offset, now_ms))
            self.metadata.save()
            count = self._dispatch_offset - self._commit_offset
            self._commit_offset = self._dispatch_offset
            self._pending_count = self._pending_bytes = 0
            return count

    def _progress_locked(self, commit_offset: int, now_ms: int) -> QueueProgress:
        return QueueProgress(
            self.topic,
            self.queue_id,
            self._min_offset,
            self._dispatch_offset,
            commit_offset,
            now_ms,
            self._commit_log.committed_metas(),
            self._consume_queue.committed_metas(),
        )

    # -- reading ---------------------------------------------------------------------------

    def units(self, queue_offset: int, max_count: int) -> list[Unit]:
        """Committed CQ units from ``queue_offset`` (re-based phys offsets). Thread-safe.

        Returns:
            Up to ``max_count`` units; empty when ``queue_offset`` is outside
            [min_offset, commit_offset).
        """
        with self._lock:
            return self._units_locked(queue_offset, max_count)

    def _units_locked(self, queue_offset: int, max_count: int) -> list[Unit]:
        if max_count <= 0 or not self._min_offset <= queue_offset < self._commit_offset:
            return []
        end = min(self._commit_offset, queue_offset + max_count)
        raw = self._consume_queue.read(
            queue_offset * CQ_UNIT_SIZE, (end - queue_offset) * CQ_UNIT_SIZE
        )
        return [
            Unit(queue_offset + i, *CQ_UNIT.unpack_from(raw, i * CQ_UNIT_SIZE))
            for i in range(end - queue_offset)
        ]

    def entries(
        self, queue_offset: int, max_count: int, max_bytes: int | None = None
    ) -> list[tuple[Unit, bytes]]:
        """Committed (unit, record) pairs from ``queue_offset``, at most ``max_count`` and,
        past the first, at most ``max_bytes`` of records. A blank unit comes with ``b""``
        (no record: readers skip it, and go on after its offset). Thread-safe.

        Raises:
            CorruptIndexError: the backend lost committed bytes.
        """
        with self._lock:
            units = self._units_locked(queue_offset, max_count)
            if max_bytes is not None and units:
                total, kept = 0, 0
                for unit in units:
                    size = 0 if is_blank(unit) else unit.size
                    if kept and total + size > max_bytes:
                        break
                    total += size
                    kept += 1
                units = units[:kept]
            return self._with_records_locked(units)

    def _with_records_locked(self, units: list[Unit]) -> list[tuple[Unit, bytes]]:
        """Each unit with its record, read in one span (``b""`` for a blank unit)."""
        real = [u for u in units if not is_blank(u)]
        if not real:
            return [(u, b"") for u in units]
        start = real[0].phys_offset
        span = self._commit_log.read(start, real[-1].phys_offset + real[-1].size - start)
        return [
            (
                u,
                b""
                if is_blank(u)
                else span[u.phys_offset - start : u.phys_offset - start + u.size],
            )
            for u in units
        ]

    def size_bytes(self) -> int:
        """Committed bytes in the tier (flat CommitLog + flat ConsumeQueue). Thread-safe."""
        with self._lock:
            return sum(
                s.committed for log in (self._commit_log, self._consume_queue) for s in log.segments
            )

    def expire(self, before_ms: int) -> list[SegmentId]:
        """Retention: drop the sealed CommitLog segments whose newest message was stored
        before ``before_ms`` (oldest first, stopping at the first that stays; never the
        last segment), move ``min_offset`` to the first unit pointing into what is left,
        and drop the ConsumeQueue segments wholly below it. The metadata is saved before
        the backend deletes, so a crash leaves only orphans that resume deletes.
        Thread-safe.

        Returns:
            The deleted segments.
        """
        if self.readonly:
            raise TieredStoreError(f"tiered {self.topic}/{self.queue_id} was opened read-only")
        with self._lock:
            logs = self._commit_log.segments
            drop = 0
            while (
                drop < len(logs) - 1
                and logs[drop].sealed
                and not logs[drop].pending
                and logs[drop].end_timestamp < before_ms
            ):
                drop += 1
            if not drop:
                return []
            first_kept = logs[drop].base_offset
            new_min = self._first_offset_at_or_after_locked(first_kept)
            cq = self._consume_queue.segments
            cq_drop = 0
            while (
                cq_drop < len(cq) - 1
                and not cq[cq_drop].pending
                and cq[cq_drop].base_offset + cq[cq_drop].committed <= new_min * CQ_UNIT_SIZE
            ):
                cq_drop += 1
            gone = [self._commit_log._id(s.base_offset) for s in logs[:drop]]
            gone += [self._consume_queue._id(s.base_offset) for s in cq[:cq_drop]]
            del logs[:drop]
            del cq[:cq_drop]
            self._min_offset = new_min
            self.metadata.put(self._progress_locked(self._commit_offset, self.clock.now_ms()))
            self.metadata.save()
            for segment_id in gone:
                self.backend.delete(segment_id)
            return gone

    def _first_offset_at_or_after_locked(self, phys_offset: int) -> int:
        """The first queue offset in [min, commit) whose unit points at or past
        ``phys_offset`` (binary search over the flat ConsumeQueue)."""
        low, high = self._min_offset, self._commit_offset
        while low < high:
            mid = (low + high) // 2
            found = self._next_record_phys_locked(mid)  # a blank unit: the next record's
            if found is None or found >= phys_offset:
                high = mid
            else:
                low = mid + 1
        return low

    def read(self, queue_offset: int, max_count: int) -> list[bytes]:
        """Committed records from ``queue_offset``, byte for byte as stored locally; blank
        units are skipped. Thread-safe.

        Returns:
            The records of up to ``max_count`` offsets; empty when ``queue_offset`` is
            outside [min_offset, commit_offset) (callers compare with those to tell why).

        Raises:
            CorruptIndexError: the backend lost committed bytes.
        """
        with self._lock:
            pairs = self._with_records_locked(self._units_locked(queue_offset, max_count))
        return [raw for unit, raw in pairs if not is_blank(unit)]
