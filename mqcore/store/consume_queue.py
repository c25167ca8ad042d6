"""ConsumeQueue: the per-(topic, queue) index of CommitLog records, 20 bytes per message.

Files live in ``<root>/consumequeue/<topic>/<queueId>/<20-digit byte offset>`` and have no
header (spec 2.1, 3.1). Unit ``n`` of the queue (its ``queue_offset``) sits at byte offset
``n * 20`` of the queue's byte space::

    offset  width  field
    ------  -----  ----------------------------------------------------------------
         0      8  phys_offset  CommitLog offset of the record (its PHYSICALOFFSET)
         8      4  size         the record's TOTALSIZE
        12      8  tags_code    String.hashCode of TAGS (sign-extended), or the deliver
                                time for SCHEDULE_TOPIC_XXXX, 0 without tags

    blank pre-fill unit: (0, 2147483647, 0)

Invariants:
    * A unit is valid iff ``phys_offset >= 0 and size > 0``; readers and recovery stop at
      the first invalid one (a zero-filled tail reads as (0, 0, 0)).
    * ``phys_offset`` grows strictly along the queue (units follow CommitLog order), which
      is what makes the idempotence rule, truncation and the binary searches correct.
    * ``min_logic_offset <= max byte offset``; units below it are gone or blanks.
    * ``max_phys_offset`` is the end (offset + size) of the last real unit, -1 if none
      (RocketMQ's initial value: dispatch then restarts at CommitLog offset 0).

Crash behaviour: derived data, no CRC. Recovery (spec 3.2) keeps the longest valid prefix
starting at the third-to-last file and truncates the rest; re-dispatching the CommitLog
rebuilds anything lost, and ``put`` skips units already present.

Thread-safety: one writer (the reput thread: ``put``; ``recover``/``truncate_dirty`` at
startup or with reput stopped), one flusher, one cleaner (``delete_expired_files``,
``correct_min_offset``) and any number of readers. ``put`` writes the 20 bytes before it
advances the file's wrote position, so readers, who bound themselves by that position, never
see a half-written unit. Readers hold the file they read and treat a failed hold as "gone".
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Buffer, Callable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from mqcore.clock import Clock
from mqcore.errors import StoreClosedError
from mqcore.store.files.mapped_file import MappedFile
from mqcore.store.files.segments import MappedFileQueue

log = logging.getLogger(__name__)

CQ_UNIT = struct.Struct(
    ">"
    "q"  # phys_offset: CommitLog offset of the record
    "i"  # size: the record's TOTALSIZE
    "q"  # tags_code: tag hash, deliver time (delay topic) or ext address
)
CQ_UNIT_SIZE = CQ_UNIT.size  # 20 (CQ_STORE_UNIT_SIZE)
#: CQ_UNIT for numpy (put_run): the same big-endian fields, packed.
_UNIT_DTYPE = np.dtype(
    {
        "names": ["phys_offset", "size", "tags_code"],
        "formats": [">i8", ">i4", ">i8"],
        "offsets": [0, 8, 12],
        "itemsize": CQ_UNIT_SIZE,
    }
)
assert CQ_UNIT.format == ">qiq"

type _Ints = npt.NDArray[np.int64]


BLANK_SIZE = 2**31 - 1  # Integer.MAX_VALUE
BLANK_UNIT = CQ_UNIT.pack(0, BLANK_SIZE, 0)
#: RocketMQ default ``mappedFileSizeConsumeQueue``: 300,000 units = 6,000,000 bytes.
DEFAULT_FILE_SIZE_BYTES = 300_000 * CQ_UNIT_SIZE
#: ``deleteExpiredFileByOffset`` destroys with a 60 s force interval.
CLEANUP_FORCE_AFTER_MS = 60_000
#: Recovery reads 4096 units (80 KiB) at a time and stops at the first invalid one.
_SCAN_CHUNK_BYTES = 4096 * CQ_UNIT_SIZE

Boundary = Literal["lower", "upper"]


class Unit(NamedTuple):
    """One ConsumeQueue entry and the queue offset it sits at."""

    queue_offset: int
    phys_offset: int
    size: int
    tags_code: int


def round_file_size(file_size_bytes: int) -> int:
    """Round up to a whole number of units, as RocketMQ's getter does (spec 2.2)."""
    if file_size_bytes <= 0:
        raise ValueError(f"file size must be > 0, got {file_size_bytes}")
    return -(-file_size_bytes // CQ_UNIT_SIZE) * CQ_UNIT_SIZE


def _is_blank(phys_offset: int, size: int) -> bool:
    return phys_offset == 0 and size == BLANK_SIZE


class ConsumeQueue:
    """The files of one (topic, queue_id). See the module docstring for thread-safety."""

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        topic: str,
        queue_id: int,
        file_size_bytes: int = DEFAULT_FILE_SIZE_BYTES,
        *,
        readonly: bool = False,
        clock: Clock | None = None,
    ) -> None:
        """Describe the queue; nothing is read until ``load``.

        Args:
            root_dir: the consume-queue root, ``<store root>/consumequeue``.
            topic, queue_id: files go to ``root_dir/topic/queue_id``.
            file_size_bytes: rounded up to a multiple of 20.
            readonly: map read-only (tools); writes raise ``StoreNotWritableError``.
            clock: times forced unmaps.
        """
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = round_file_size(file_size_bytes)
        self.directory = Path(root_dir) / topic / str(queue_id)
        self.segments = MappedFileQueue(
            self.directory, self.file_size, readonly=readonly, clock=clock
        )
        self._max_phys_offset = -1
        self._min_logic_offset = 0  # bytes, as RocketMQ keeps it
        # base_offset -> [start, stop] store times of the file's first/last unit (7.2).
        self._file_times: dict[int, list[int]] = {}

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic}-{self.queue_id}, {self.min_offset}..{self.max_offset})"

    # -- offsets (any thread) ---------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """First consumable queue offset (``minLogicOffset / 20``). Thread-safe."""
        return self._min_logic_offset // CQ_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """One past the last unit: (last file base + wrote position) / 20. Thread-safe."""
        return self.segments.max_offset // CQ_UNIT_SIZE

    @property
    def max_phys_offset(self) -> int:
        """End of the last real unit's record in the CommitLog; -1 if none. Thread-safe."""
        return self._max_phys_offset

    def roll_next_file(self, queue_offset: int) -> int:
        """The first queue offset of the file after ``queue_offset``'s. Thread-safe."""
        per_file = self.file_size // CQ_UNIT_SIZE
        return queue_offset + per_file - queue_offset % per_file

    # -- startup ----------------------------------------------------------------------------

    def load(self) -> None:
        """Map the queue's files (spec 2.2). Startup only.

        Raises:
            StoreError: as ``MappedFileQueue.load``.
        """
        self.segments.load()

    def _scan(self, mapped: MappedFile, below: int | None) -> tuple[int, int | None]:
        """Count the leading valid units (with ``phys_offset < below`` if given).

        Returns:
            (units counted, end of the last real unit counted or None).
        """
        limit = mapped.wrote_position - mapped.wrote_position % CQ_UNIT_SIZE
        count, last_end, pos = 0, None, 0
        while pos < limit:
            chunk = mapped.read(pos, min(_SCAN_CHUNK_BYTES, limit - pos))
            for phys, size, _tags in CQ_UNIT.iter_unpack(chunk):
                if phys < 0 or size <= 0 or (below is not None and phys >= below):
                    return count, last_end
                count += 1
                if not _is_blank(phys, size):
                    last_end = phys + size
            pos += len(chunk)
        return count, last_end

    def recover(self) -> None:
        """Find the valid end of the queue and truncate after it (spec 3.2).

        Scans from the third-to-last file to the first invalid unit; that unit's position
        becomes the write and flush position and later files are deleted. Blank pre-fill
        units do not count towards ``max_phys_offset``. Writer thread, before reput starts.
        """
        files = self.segments.files
        if not files:
            return
        start = max(0, len(files) - 3)
        end = files[start].base_offset
        max_phys = self._last_end_before(files, start)
        for mapped in files[start:]:
            count, last_end = self._scan(mapped, None)
            end = mapped.base_offset + count * CQ_UNIT_SIZE
            if last_end is not None:
                max_phys = last_end
            if count * CQ_UNIT_SIZE < self.file_size:
                break
        dropped = sum(1 for mapped in files if mapped.base_offset > end)
        self.segments.truncate_dirty(end)
        self._max_phys_offset = max_phys
        self._min_logic_offset = max(self._min_logic_offset, files[0].base_offset)
        self._file_times.clear()
        log.info(
            "recovered consume queue %s-%d: end queue offset %d, %d later file(s) deleted",
            self.topic, self.queue_id, end // CQ_UNIT_SIZE, dropped,
        )  # fmt: skip

    def _last_end_before(self, files: tuple[MappedFile, ...], index: int) -> int:
        """``max_phys_offset`` implied by the last unit of ``files[index - 1]`` (or -1)."""
        if index == 0:
            return -1
        phys, size, _ = CQ_UNIT.unpack(
            files[index - 1].read(self.file_size - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
        )
        return phys + size if phys >= 0 and size > 0 and not _is_blank(phys, size) else -1

    # -- writer -----------------------------------------------------------------------------

    def put(self, phys_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Append the unit for a dispatched record (``putMessagePositionInfo``, spec 3.1).

        * ``phys_offset + size <= max_phys_offset``: already indexed, skipped silently.
        * The first file of an empty queue starting at a non-zero ``queue_offset`` is
          pre-filled with blank units up to it, and ``min_offset`` set to it.
        * ``queue_offset * 20`` below the write position: a duplicate, skipped.
        * Above it (a gap): logged as an error; blank units fill the gap and the unit goes
          at its own queue offset (a queue never renumbers).

        Writer thread only.

        Returns:
            True if a unit was written, False if it was skipped as already present.

        Raises:
            StoreNotWritableError: the queue is read-only.
            StoreError, OSError: a file could not be created.
        """
        if phys_offset + size <= self._max_phys_offset:
            return False
        expected = queue_offset * CQ_UNIT_SIZE
        was_empty = self.segments.last() is None
        mapped = self.segments.last_or_create(expected)
        if was_empty and queue_offset != 0 and mapped.wrote_position == 0:
            self._min_logic_offset = expected
            blanks = (expected - mapped.base_offset) // CQ_UNIT_SIZE
            mapped.append(BLANK_UNIT * blanks)
            log.info("%s-%d: pre-filled %d blank units", self.topic, self.queue_id, blanks)
        current = mapped.base_offset + mapped.wrote_position
        if expected < current:
            log.warning(
                "%s-%d: unit for queue offset %d already written (write offset %d)",
                self.topic, self.queue_id, queue_offset, current // CQ_UNIT_SIZE,
            )  # fmt: skip
            return False
        if expected != current:
            log.error(
                "%s-%d: queue offset gap: the queue ends at %d but the record's queue offset "
                "is %d; %d blank unit(s) fill the gap (those records are missing from the "
                "CommitLog) and every later message keeps its own offset",
                self.topic, self.queue_id, current // CQ_UNIT_SIZE, queue_offset,
                (expected - current) // CQ_UNIT_SIZE,
            )  # fmt: skip
            mapped = self._fill_blanks(current, expected)
        mapped.append(CQ_UNIT.pack(phys_offset, size, tags_code))
        self._max_phys_offset = phys_offset + size
        return True

    def _fill_blanks(self, current: int, expected: int) -> MappedFile:
        """Write blank units from byte offset ``current`` up to ``expected`` (rolling files
        as needed) and return the file that takes the unit at ``expected``.

        A queue never renumbers: a record's queue offset is in the CommitLog, acknowledged
        to its producer, so a unit whose records are missing (quarantined or lost) becomes a
        blank, which readers skip, instead of the next record sliding into its place."""
        while current < expected:
            mapped = self.segments.last_or_create(current)
            room = (mapped.file_size - mapped.wrote_position) // CQ_UNIT_SIZE
            count = min(room, (expected - current) // CQ_UNIT_SIZE)
            mapped.append(BLANK_UNIT * count)
            current += count * CQ_UNIT_SIZE
        return self.segments.last_or_create(expected)

    def put_many(self, units: Sequence[tuple[int, int, int, int]]) -> int:
        """:meth:`put` for each ``(phys_offset, size, tags_code, queue_offset)``, in order.

        A run of units that land exactly at the write position of the last file (the normal
        case: reput hands over consecutive queue offsets) is packed and appended with one
        copy, about 4x cheaper per unit than :meth:`put`; anything else (an empty queue, a
        full file, a duplicate, a gap) goes through :meth:`put` itself. Same bytes, same
        skips, same log lines; readers see a run's units when its copy lands.

        Writer thread only.

        Returns:
            How many units were written.

        Raises:
            StoreNotWritableError, StoreError, OSError: as :meth:`put`.
        """
        written = 0
        i = 0
        count = len(units)
        pack = CQ_UNIT.pack
        segments = self.segments
        while i < count:
            mapped = segments.last()
            if mapped is None or mapped.is_full:
                written += self.put(*units[i])
                i += 1
                continue
            position = mapped.wrote_position
            current = mapped.base_offset + position
            stop = min(count, i + (mapped.file_size - position) // CQ_UNIT_SIZE)
            max_phys = self._max_phys_offset
            run: list[bytes] = []
            j = i
            while j < stop:
                phys_offset, size, tags_code, queue_offset = units[j]
                # put's conditions for a plain append at the write position
                if phys_offset + size <= max_phys or queue_offset * CQ_UNIT_SIZE != current:
                    break
                run.append(pack(phys_offset, size, tags_code))
                max_phys = phys_offset + size
                current += CQ_UNIT_SIZE
                j += 1
            if not run:
                written += self.put(*units[i])
                i += 1
                continue
            mapped.append(b"".join(run))
            self._max_phys_offset = max_phys
            written += len(run)
            i = j
        return written

    def put_run(
        self,
        phys_offsets: Sequence[int] | _Ints,
        sizes: Sequence[int] | _Ints,
        tags_codes: Sequence[int] | _Ints,
        queue_offsets: Sequence[int] | _Ints,
    ) -> int:
        """:meth:`put_many` given as columns (lists, or reput's int64 arrays): a run of
        consecutive queue offsets at the write position, all new, is laid out as one
        big-endian numpy record array per file and appended with one copy (~0.02 us a unit
        from arrays, against ~0.13 us for the ``pack(*flat)`` of lists it replaced); as soon
        as anything else shows up, the rest goes through :meth:`put_many`. Same bytes, same
        skips. Writer thread only.

        Returns:
            How many units were written.
        """
        phys = np.asarray(phys_offsets, np.int64)
        lengths = np.asarray(sizes, np.int64)
        tags = np.asarray(tags_codes, np.int64)
        offsets = np.asarray(queue_offsets, np.int64)
        count = len(phys)
        written = i = 0
        while i < count:
            mapped = self.segments.last()
            if mapped is None or mapped.is_full:  # put() creates the file (and pre-fills it)
                written += self.put(int(phys[i]), int(lengths[i]), int(tags[i]), int(offsets[i]))
                i += 1
                continue
            position = mapped.wrote_position
            first = int(offsets[i])
            stop = min(count, i + (mapped.file_size - position) // CQ_UNIT_SIZE)
            if (
                first * CQ_UNIT_SIZE != mapped.base_offset + position
                or int(phys[i]) + int(lengths[i]) <= self._max_phys_offset  # phys offsets grow
                or not (offsets[i:stop] == np.arange(first, first + stop - i)).all()
            ):
                units = zip(
                    phys[i:].tolist(), lengths[i:].tolist(), tags[i:].tolist(),
                    offsets[i:].tolist(), strict=True,
                )  # fmt: skip
                return written + self.put_many(list(units))
            run = np.empty(stop - i, _UNIT_DTYPE)
            run["phys_offset"] = phys[i:stop]
            run["size"] = lengths[i:stop]
            run["tags_code"] = tags[i:stop]
            mapped.append(run.view(np.uint8))
            self._max_phys_offset = int(phys[stop - 1]) + int(lengths[stop - 1])
            written += stop - i
            i = stop
        return written

    def truncate_dirty(self, phys_offset: int) -> None:
        """Drop units pointing at or beyond ``phys_offset`` (spec 5.8).

        From the last file backwards: a file whose first unit already points at or beyond
        ``phys_offset`` (or that holds no valid unit) is deleted and the previous one
        examined; otherwise the write position goes just after the last unit below it.
        Writer thread, reput stopped.
        """
        max_phys = phys_offset  # RocketMQ's value when every unit goes
        while (last := self.segments.last()) is not None:
            count, last_end = self._scan(last, phys_offset)
            if count == 0:
                self.segments.delete_last()
                continue
            self.segments.truncate_dirty(last.base_offset + count * CQ_UNIT_SIZE)
            if last_end is not None:
                max_phys = last_end
            break
        self._max_phys_offset = max_phys
        self._file_times.clear()

    # -- follower (another process writes this queue) ----------------------------------------

    def follow(self, limit_phys: int, *, front: bool = False) -> int:
        """Extend this view over units another process wrote (Celery mode, spec 3.1).

        The writer publishes how far it has dispatched (``limit_phys``) only after the units
        below it are in place, so a valid unit pointing below it is complete; a unit at or
        beyond it may be half written and ends the scan. New files are picked up when the
        last one fills; with ``front``, files deleted at the front by a cleanup elsewhere
        are dropped and ``min_offset`` moves past them. Follower only (one thread).

        Returns:
            How many units were added.
        """
        segments = self.segments
        if front or segments.last() is None:
            segments.sync_files(front=front, end=True)
            first = segments.first()
            if first is not None and self._min_logic_offset < first.base_offset:
                self._min_logic_offset = first.base_offset
                self._file_times = {
                    b: t for b, t in self._file_times.items() if b >= first.base_offset
                }
        added = 0
        while True:
            last = segments.last()
            if last is None:
                return added
            added += self._follow_file(last, limit_phys)
            if not last.is_full or not segments.sync_files(front=False, end=True):
                return added

    def _follow_file(self, mapped: MappedFile, limit_phys: int) -> int:
        if not mapped.hold():
            return 0
        try:
            buf = mapped.buffer
            start = pos = mapped.wrote_position - mapped.wrote_position % CQ_UNIT_SIZE
            last_end: int | None = None
            stop = pos >= self.file_size
            if not stop:  # the common case, nothing new: one unit read, no chunk copied
                phys, size, _tags = CQ_UNIT.unpack_from(buf, pos)
                stop = phys < 0 or size <= 0 or phys >= limit_phys
            while not stop and pos < self.file_size:
                chunk = buf[pos : min(pos + _SCAN_CHUNK_BYTES, self.file_size)]
                for phys, size, _tags in CQ_UNIT.iter_unpack(chunk):
                    if phys < 0 or size <= 0 or phys >= limit_phys:
                        stop = True
                        break
                    if not _is_blank(phys, size):
                        last_end = phys + size
                    pos += CQ_UNIT_SIZE
            if pos > start:
                mapped.wrote_position = pos
        finally:
            mapped.release()
        if last_end is not None:
            self._max_phys_offset = last_end
        return (pos - start) // CQ_UNIT_SIZE

    # -- readers ----------------------------------------------------------------------------

    def units(self, from_offset: int, max_count: int) -> list[Unit]:
        """Up to ``max_count`` units from ``from_offset``, never crossing a file end.

        Returns an empty list below ``min_offset``, at or beyond ``max_offset``, or when the
        file has just been deleted. Thread-safe.
        """
        if max_count <= 0 or from_offset < self.min_offset:
            return []
        data = self._read_units(from_offset * CQ_UNIT_SIZE, max_count)
        return [Unit(from_offset + i, *fields) for i, fields in enumerate(data)]

    def unit_at(self, queue_offset: int) -> Unit | None:
        """The unit at ``queue_offset``, or None outside [min_offset, max_offset). Thread-safe."""
        found = self.units(queue_offset, 1)
        return found[0] if found else None

    def last_unit(self) -> Unit | None:
        """The last unit written, whatever ``min_offset`` says. Thread-safe."""
        end = self.segments.max_offset - CQ_UNIT_SIZE
        found = self._read_units(end, 1) if end >= 0 else []
        return Unit(end // CQ_UNIT_SIZE, *found[0]) if found else None

    def _read_units(self, byte_offset: int, max_count: int) -> list[tuple[int, int, int]]:
        mapped = self.segments.find(byte_offset)
        if mapped is None or not mapped.hold():
            return []
        try:
            pos = byte_offset - mapped.base_offset
            end = min(mapped.wrote_position, pos + max_count * CQ_UNIT_SIZE)
            end -= (end - pos) % CQ_UNIT_SIZE
            data = mapped.read(pos, end - pos) if end > pos else b""
        except StoreClosedError:
            return []
        finally:
            mapped.release()
        return list(CQ_UNIT.iter_unpack(data))

    # -- cleaner ----------------------------------------------------------------------------

    def delete_expired_files(self, min_commitlog_offset: int) -> int:
        """Delete front files whose last unit points below the CommitLog min (spec 6.5).

        Never the last file; stops at the first file that must stay. Cleaner thread.

        Returns:
            How many files were deleted.
        """

        def expired(mapped: MappedFile) -> bool:
            if not mapped.hold():
                return True  # a hanged file destroyed earlier: finish it
            try:
                if mapped.wrote_position < self.file_size:
                    return False
                last = mapped.read(self.file_size - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
            finally:
                mapped.release()
            phys_offset: int = CQ_UNIT.unpack(last)[0]
            return phys_offset < min_commitlog_offset

        deleted = self.segments.delete_first_files_while(
            expired, force_after_ms=CLEANUP_FORCE_AFTER_MS
        )
        if deleted:
            first = self.segments.first()
            self._file_times = {
                base: times
                for base, times in self._file_times.items()
                if first is not None and base >= first.base_offset
            }
        return deleted

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Move ``min_offset`` to the first unit at or above the CommitLog min (spec 6.5).

        If even the last unit points below it the queue is empty and ``min_offset`` becomes
        ``max_offset``. Otherwise the first file is binary-searched from the old minimum.
        Blank pre-fill units count as below. Cleaner thread (or startup).
        """
        max_bytes = self.segments.max_offset
        if self._min_logic_offset >= max_bytes:
            return
        last = self.last_unit()
        if last is not None and last.phys_offset < min_commitlog_offset:
            self._min_logic_offset = max_bytes
            return
        first = self.segments.first()
        if first is None or not first.hold():
            return
        try:
            found = self._first_unit_at_or_above(first, min_commitlog_offset)
        finally:
            first.release()
        if found is not None:
            self._min_logic_offset = first.base_offset + found

    def _first_unit_at_or_above(self, mapped: MappedFile, min_phys: int) -> int | None:
        """Position in ``mapped`` of the first unit (from the old min) pointing ≥ ``min_phys``."""
        buf = mapped.buffer
        readable = mapped.wrote_position - mapped.wrote_position % CQ_UNIT_SIZE
        start = self._min_logic_offset - mapped.base_offset
        intact = start >= 0
        start = max(start, 0)
        if start >= readable:
            return None

        def key(pos: int) -> int:
            phys, size, _ = CQ_UNIT.unpack_from(buf, pos)
            return -1 if _is_blank(phys, size) else phys

        if intact and key(start) >= min_phys:
            return None  # the old minimum still holds
        low, high = start // CQ_UNIT_SIZE, readable // CQ_UNIT_SIZE
        while low < high:
            mid = (low + high) // 2
            if key(mid * CQ_UNIT_SIZE) < min_phys:
                low = mid + 1
            else:
                high = mid
        return low * CQ_UNIT_SIZE if low < readable // CQ_UNIT_SIZE else None

    # -- time lookup (spec 7.2) ---------------------------------------------------------------

    def offset_for_time(
        self,
        timestamp_ms: int,
        store_time_of: Callable[[int, int], int],
        min_commitlog_offset: int,
        boundary: Boundary = "lower",
    ) -> int:
        """The queue offset for a store time (``getOffsetInQueueByTime``, spec 7.2).

        ``lower``: the first unit stored at or after ``timestamp_ms`` (one past the end if
        none); ``upper``: the last unit stored at or before it (0 if none). Thread-safe.

        Args:
            timestamp_ms: the store time looked for.
            store_time_of: ``(phys_offset, size) -> store time``, -1 if not in the CommitLog.
            min_commitlog_offset: units pointing below it count as too old.
            boundary: "lower" or "upper".
        """
        if boundary not in ("lower", "upper"):
            raise ValueError(f"boundary must be 'lower' or 'upper', got {boundary!r}")
        mapped = self._file_by_time(timestamp_ms, store_time_of, boundary)
        if mapped is None or not mapped.hold():
            return 0
        try:
            found = self._search_file(
                mapped, timestamp_ms, store_time_of, min_commitlog_offset, boundary
            )
        except StoreClosedError:
            return 0
        finally:
            mapped.release()
        return found

    def _time_at(self, buf: Buffer, pos: int, store_time_of: Callable[[int, int], int]) -> int:
        phys, size, _ = CQ_UNIT.unpack_from(buf, pos)
        return -1 if _is_blank(phys, size) else store_time_of(phys, size)

    def _file_by_time(
        self, timestamp_ms: int, store_time_of: Callable[[int, int], int], boundary: Boundary
    ) -> MappedFile | None:
        """Step 1 of 7.2: lower = first non-last file whose last unit is stored at or after
        the time, else the last file; upper = newest file whose first unit is at or before.
        Start/stop times are cached per file once known (> 0)."""
        files = self.segments.files
        times: list[list[int]] = []
        for i, mapped in enumerate(files):
            cached = self._file_times.setdefault(mapped.base_offset, [-1, -1])
            for slot, pos in ((0, 0), (1, self.file_size - CQ_UNIT_SIZE)):
                if cached[slot] > 0 or (slot == 1 and i == len(files) - 1):
                    continue
                if mapped.wrote_position >= pos + CQ_UNIT_SIZE and mapped.hold():
                    try:
                        when = self._time_at(mapped.buffer, pos, store_time_of)
                    finally:
                        mapped.release()
                    if when > 0:
                        cached[slot] = when
            times.append(cached)
        if boundary == "lower":
            for i, mapped in enumerate(files[:-1]):
                if times[i][1] >= timestamp_ms:
                    return mapped
            return files[-1] if files else None
        for i in range(len(files) - 1, -1, -1):
            if times[i][0] <= timestamp_ms:
                return files[i]
        return None

    def _search_file(
        self,
        mapped: MappedFile,
        timestamp_ms: int,
        store_time_of: Callable[[int, int], int],
        min_commitlog_offset: int,
        boundary: Boundary,
    ) -> int:
        """Step 2 of 7.2, RocketMQ's ``binarySearchInQueueByTime`` over one file."""
        unit = CQ_UNIT_SIZE
        lower = boundary == "lower"
        base = mapped.base_offset
        readable = mapped.wrote_position - mapped.wrote_position % unit
        if readable < unit:
            return 0
        buf = mapped.buffer
        ceiling = readable - unit
        floor = low = min(max(self._min_logic_offset - base, 0), ceiling)
        high = ceiling
        if self._time_at(buf, ceiling, store_time_of) < timestamp_ms:
            return (base + ceiling + (unit if lower else 0)) // unit
        if self._time_at(buf, floor, store_time_of) > timestamp_ms:
            return base // unit if lower else 0
        left = right = target = -1
        while high >= low:
            mid = (low + high) // (2 * unit) * unit
            phys, size, _ = CQ_UNIT.unpack_from(buf, mid)
            if phys < min_commitlog_offset:
                low, left = mid + unit, mid
                continue
            when = self._time_at(buf, mid, store_time_of)
            if when < 0:
                return 0
            if when == timestamp_ms:
                target = mid
                break
            if when > timestamp_ms:
                high, right = mid - unit, mid
            else:
                low, left = mid + unit, mid
        if target >= 0:
            step = -unit if lower else unit
            while floor <= target + step <= ceiling:
                if self._time_at(buf, target + step, store_time_of) != timestamp_ms:
                    break
                target += step
            offset = target
        else:
            offset = right if lower else left
        return max(0, (base + offset) // unit)

    # -- flusher and teardown -----------------------------------------------------------------

    def flush(self, least_pages: int) -> bool:
        """Flush per spec 6.3 (one file per call). Flusher thread.

        Returns:
            Whether progress was made.
        """
        return self.segments.flush(least_pages)

    def close(self) -> None:
        """Unmap the files (shutdown, after the other threads stopped)."""
        self.segments.close()

    def destroy(self) -> None:
        """Delete every file and the queue directory; the queue is empty afterwards.

        Cleaner thread, or with the writer stopped.
        """
        self.segments.destroy()
        self._max_phys_offset = -1
        self._min_logic_offset = 0
        self._file_times.clear()
