"""Recovery: from whatever the last run left on disk to a consistent store (spec 5.4-5.8).

The passes, in order (as Kafka's ``LogLoader.load`` comments them):

1. Decide how the last run ended: ``<root>/abort`` present means it crashed.
2. Load: map the CommitLog segments and every ConsumeQueue; load the checkpoint and the
   index files (after a crash, index files newer than the checkpoint's index time are
   dropped, since they may hold entries that were never flushed).
3. Recover each ConsumeQueue (first invalid unit ends it) and take the highest physical
   offset they reach: everything below it was dispatched already.
4. Scan the CommitLog with CRC checks from a safe segment: after a clean exit, the newest
   segment whose first record is already dispatched; after a crash, the newest whose first
   record is older than the checkpoint; in either case no later than a segment that was
   found cut short. Records past the dispatched offset (every record, after a crash) are
   dispatched again; the ConsumeQueue and IndexFile writes skip what they already hold, so
   that is idempotent.
5. A record that fails its checks is not the end of the log unless nothing valid follows
   it. Valid records are looked for after it (``record_search``: at ``pos + TOTALSIZE``
   when that size is plausible, else by the magic code, in this segment and then in later
   ones). If one is found, the bytes in between are *mid-log corruption*: quarantined
   (``quarantine.py``: copied aside, reported, skipped by reput and readers, kept in
   place) and the scan carries on with the records after them. Only bytes after the last
   valid record that no valid record follows are a *torn tail*: their non-zero bytes are
   copied to the quarantine, then zeroed (so that no later scan can read them back), and
   later segments (which hold no valid record) are deleted.
6. ConsumeQueue units and index files that point at or past the end are cut and rebuilt
   from the log; the cut units are zeroed too.
7. The caller rebuilds the in-memory queue offset table (raised past the offsets that
   quarantined records had) and corrects queue min offsets.

The bytes a segment holds beyond its last record are read with ``os.pread`` and
``lseek(SEEK_DATA/SEEK_HOLE)`` (``record_search``), never through the mapping: the cost of a
start does not grow with the segment size, and a sparse segment on a full tmpfs cannot
raise SIGBUS.

Crash behaviour: recovery only cuts a tail it has copied first, and only rewrites derived
files; killed halfway, the next start recovers again from the same inputs (a corrupt range
quarantined before the kill is found again and recognised by its offset).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from mqcore.format.record import (
    Blank,
    Corrupt,
    DispatchRequest,
    NeedMore,
    RecordCheck,
    Valid,
    check_record,
    decode_dispatch,
)
from mqcore.store.commit_log import CommitLog
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.files.mapped_file import MappedFile
from mqcore.store.index.index_service import IndexService
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.recovery.quarantine import FoundBy, QuarantineEntry
from mqcore.store.recovery.record_search import SegmentFile

log = logging.getLogger(__name__)

Dispatch = Callable[[DispatchRequest], None]

#: Store health problem kind of a CommitLog segment found cut short.
TRUNCATED_KIND = "commitlog_truncated"


@dataclass
class RecoveryReport:
    """What recovery found and what it cut. ``dropped_bytes`` counts the non-zero bytes
    cut from the CommitLog tail (copied to the quarantine first): 0 after a clean exit or a
    crash between records. ``quarantined`` lists the corrupt ranges met by the scan (kept in
    place and skipped), ``tail_copies`` the copies of what was cut."""

    last_exit_ok: bool
    scan_from: int = 0
    end_offset: int = 0
    records_scanned: int = 0
    records_dispatched: int = 0
    stop_reason: str = ""
    dropped_bytes: int = 0
    deleted_segments: list[str] = field(default_factory=list)
    quarantined: list[QuarantineEntry] = field(default_factory=list)
    tail_copies: list[QuarantineEntry] = field(default_factory=list)
    #: Where a torn tail starts (None when the scan ended at a blank record).
    tail_from: int | None = None
    #: Segments found cut short: (file name, length found).
    truncated_segments: list[tuple[str, int]] = field(default_factory=list)
    index_files_dropped: list[str] = field(default_factory=list)
    index_rebuilt_from: int | None = None

    def summary(self) -> str:
        how = "clean" if self.last_exit_ok else "after a crash"
        text = (
            f"recovered {how}: CommitLog ends at {self.end_offset} "
            f"({self.records_scanned} records checked from {self.scan_from}, "
            f"{self.records_dispatched} dispatched)"
        )
        if self.quarantined:
            ranges = ", ".join(f"{e.offset}..{e.end}" for e in self.quarantined)
            text += f"; quarantined corrupt ranges {ranges} (kept, skipped)"
        if self.dropped_bytes or self.deleted_segments:
            text += (
                f"; cut {self.dropped_bytes} bytes of torn tail ({self.stop_reason}), "
                f"copied to the quarantine first; deleted segments "
                f"{self.deleted_segments or 'none'}"
            )
        if self.truncated_segments:
            text += "; segments found cut short: " + ", ".join(
                f"{name} ({length} bytes)" for name, length in self.truncated_segments
            )
        if self.index_files_dropped:
            text += f"; index files rebuilt: {self.index_files_dropped}"
        return text

    @property
    def eventful(self) -> bool:
        """Whether anything was cut, quarantined or rebuilt (logged as a warning)."""
        return bool(
            self.dropped_bytes
            or self.deleted_segments
            or self.quarantined
            or self.truncated_segments
            or self.index_files_dropped
        )


class _Files:
    """The scan's :class:`SegmentFile` per segment, opened once each, closed together."""

    def __init__(self, segments: tuple[MappedFile, ...], file_size: int, stack: ExitStack):
        self._segments = segments
        self._file_size = file_size
        self._stack = stack
        self._open: dict[int, SegmentFile] = {}
        self._data_ends: dict[int, int] = {}

    def __getitem__(self, index: int) -> SegmentFile:
        opened = self._open.get(index)
        if opened is None:
            path = self._segments[index].path
            opened = self._stack.enter_context(SegmentFile(path, self._file_size))
            self._open[index] = opened
        return opened

    def data_end(self, index: int) -> int:
        """Where the segment's written data ends (a hole after it reads as zeros)."""
        end = self._data_ends.get(index)
        if end is None:
            end = self._data_ends[index] = self[index].data_end()
        return end


def _first_record(segment: MappedFile, file_size: int, check_crc: bool) -> Valid | None:
    """The segment's first record, read from the file (``_Files``' rule: no mapping)."""
    with SegmentFile(segment.path, file_size) as f:
        head = f.read(0, 8)
        total = int.from_bytes(head[:4], "big", signed=True)
        if not 0 < total <= file_size:
            return None
        result = check_record(f.read(0, total), 0, total, check_crc=check_crc)
    return result if isinstance(result, Valid) and result.store_timestamp != 0 else None


def choose_start_segment(
    segments: tuple[MappedFile, ...],
    *,
    last_exit_ok: bool,
    dispatched_offset: int,
    checkpoint_min_timestamp: int,
    check_crc: bool,
    file_size: int | None = None,
) -> int:
    """Index of the segment the scan starts from (spec 5.6 HEAD rule, 5.7)."""
    for i in range(len(segments) - 1, 0, -1):
        first = _first_record(segments[i], file_size or segments[i].file_size, check_crc)
        if first is None:
            continue
        if last_exit_ok and first.phys_offset <= dispatched_offset:
            return i
        if not last_exit_ok and first.store_timestamp <= checkpoint_min_timestamp:
            return i
    return 0


def _failure(result: RecordCheck, offset: int) -> str:
    if isinstance(result, NeedMore):
        return f"record at {offset} claims {result.needed} bytes, more than were written"
    if isinstance(result, Corrupt):
        return f"record at {offset}: {result.detail}"
    return f"no record at {offset}"


def _resume(
    files: _Files, segments: tuple[MappedFile, ...], index: int, pos: int
) -> tuple[int, int] | None:
    """Segment index and position of the first valid record (or end-of-file blank record)
    after the bad one at ``pos`` of ``segments[index]``, in it or in a later segment."""
    found = files[index].resume_after(pos, segments[index].base_offset)
    if found is not None:
        return index, found[0]
    for j in range(index + 1, len(segments)):
        base = segments[j].base_offset
        if files[j].valid_at(0, base) is not None:
            return j, 0
        found = files[j].find_valid(1, files[j].file_size, base)
        if found is not None:
            return j, found[0]
    return None


def _locate(segments: tuple[MappedFile, ...], index: int, offset: int) -> tuple[int, int] | None:
    """Segment index and position of ``offset`` in ``segments[index:]``, if there."""
    for j in range(index, len(segments)):
        base = segments[j].base_offset
        if base <= offset < base + segments[j].file_size:
            return j, offset - base
    return None


def _quarantine_between(
    commit_log: CommitLog,
    files: _Files,
    start: tuple[int, int],
    resume: tuple[int, int],
    reason: str,
    found_by: FoundBy = "recovery",
) -> list[QuarantineEntry]:
    """Quarantine the bytes from ``start`` up to ``resume`` (segment index, position), one
    range per segment they cover; returns the ranges."""
    segments = commit_log.segments.files
    file_size = commit_log.file_size
    (index, pos), (resume_index, resume_pos) = start, resume
    pieces = []
    if resume_index == index:
        pieces.append((index, pos, resume_pos))
    else:
        pieces.append((index, pos, file_size))
        pieces += [(j, 0, file_size) for j in range(index + 1, resume_index)]
        if resume_pos > 0:
            pieces.append((resume_index, 0, resume_pos))
    first = segments[index].base_offset + pos
    entries = []
    for j, a, b in pieces:
        why = reason if j == index else f"no valid record here (after the corruption at {first})"
        entries.append(
            commit_log.quarantine.quarantine(
                files[j], segments[j].base_offset, a, b, reason=why, found_by=found_by
            )
        )
    return entries


def quarantine_stall(commit_log: CommitLog, offset: int, *, found_by: FoundBy) -> int | None:
    """A walk over records that were whole when they were dispatched (a rebuild's, below
    the reput position) stopped at ``offset``, a record boundary: if the record there fails
    its checks and valid records resume after it, quarantine the bytes in between, as the
    scan does (pass 5). Returns where valid records resume (the walk goes on there), or
    None when nothing was quarantined.

    Recovery scans only the newest segments, so a record gone bad in an older one is first
    met by such a walk (or by a read). Nothing is quarantined when the record is valid, or
    when no valid record follows (the log's end is recovery's business)."""
    segments = commit_log.segments.files
    located = _locate(segments, 0, offset)
    if located is None:
        return None
    index, pos = located
    with ExitStack() as stack:
        files = _Files(segments, commit_log.file_size, stack)
        try:
            found = _stalled_on_corruption(files, segments, index, pos)
            if found is None:
                return None
            resume, reason = found
            entries = _quarantine_between(commit_log, files, (index, pos), resume, reason, found_by)
        except OSError as exc:  # the segment was cleaned up meanwhile
            log.warning("CommitLog at %d could not be read (%s): nothing quarantined", offset, exc)
            return None
    return entries[-1].end if entries else None


def _stalled_on_corruption(
    files: _Files, segments: tuple[MappedFile, ...], index: int, pos: int
) -> tuple[tuple[int, int], str] | None:
    """Where valid records resume after a bad record at ``pos`` of ``segments[index]``, and
    what is wrong with it; None if the record is valid or nothing valid follows. Read from
    the file (``_Files``' rule: no mapping, so no page of a huge segment becomes resident)."""
    f = files[index]
    offset = segments[index].base_offset + pos
    if f.valid_at(pos, segments[index].base_offset) is not None:
        return None
    available = min(f.file_size, files.data_end(index)) - pos
    total = int.from_bytes(f.read(pos, 4), "big", signed=True)
    result: RecordCheck
    if available <= 0:
        result = Corrupt(0, "end of written data")
    elif total > available:
        result = NeedMore(total)
    else:
        data = f.read(pos, max(total, 8))
        result = check_record(data, 0, len(data), check_crc=True)
    resume = _resume(files, segments, index, pos)
    return None if resume is None else (resume, _failure(result, offset))


def scan_commit_log(
    commit_log: CommitLog,
    start_index: int,
    *,
    dispatch_from: int,
    dispatch_all: bool,
    dispatch: Dispatch,
    report: RecoveryReport,
) -> int:
    """Check records from segment ``start_index`` on; return the end of the last valid one.

    Mid-log corruption is quarantined on the way (module docstring, pass 5); where a torn
    tail starts is left in ``report.tail_from`` for :func:`keep_torn_tail`."""
    segments = commit_log.segments.files
    check_crc = commit_log.config.check_crc_on_recover
    levels = commit_log.delay_levels_ms
    quarantine = commit_log.quarantine
    index = start_index
    report.scan_from = segments[index].base_offset
    pos = 0
    with ExitStack() as stack:
        files = _Files(segments, commit_log.file_size, stack)
        while True:
            segment = segments[index]
            base = segment.base_offset
            if pos >= segment.file_size:  # a record ended at the very end (no blank record)
                if index + 1 >= len(segments):
                    report.stop_reason = "end of the last segment"
                    break
                index, pos = index + 1, 0
                continue
            limit = min(segment.file_size, files.data_end(index))
            result: RecordCheck
            if pos < limit:
                result = check_record(segment.buffer, pos, limit, check_crc=check_crc)
            else:  # a hole (or past the file): zeros, not read through the mapping
                result = Corrupt(0, "end of written data")
            if isinstance(result, Valid):
                report.records_scanned += 1
                if dispatch_all or base + pos > dispatch_from:
                    request = decode_dispatch(segment.buffer, pos, limit, delay_levels_ms=levels)
                    if isinstance(request, DispatchRequest):
                        dispatch(request)
                        report.records_dispatched += 1
                pos += result.size
                continue
            if isinstance(result, Blank):
                if index + 1 >= len(segments):
                    report.stop_reason = "end of the last segment"
                    break
                index += 1
                pos = 0
                continue
            known = quarantine.covering(base + pos)
            if known is not None and known.offset == base + pos:
                # Quarantined by an earlier start or a read: records resume at its end.
                target = _locate(segments, index, known.end)
                if target is not None:
                    report.quarantined.append(known)
                    index, pos = target
                    continue
            found = _resume(files, segments, index, pos)
            if found is None:
                report.tail_from = base + pos
                nonzero = files[index].nonzero_end(pos, commit_log.file_size) > pos or any(
                    files[j].nonzero_end(0, commit_log.file_size) > 0
                    for j in range(index + 1, len(segments))
                )
                report.stop_reason = (
                    _failure(result, base + pos)
                    if nonzero
                    else f"end of written data at {base + pos}"
                )
                break
            report.quarantined += _quarantine_between(
                commit_log, files, (index, pos), found, _failure(result, base + pos)
            )
            index, pos = found
    return segments[index].base_offset + pos


def keep_torn_tail(
    commit_log: CommitLog, end_offset: int, report: RecoveryReport, *, report_problem: bool
) -> None:
    """Copy the torn tail (``report.tail_from`` on: the rest of its segment and every later
    segment) to the quarantine, then zero it in its segment; the later segments are left
    for ``truncate_dirty`` to delete. Counts ``dropped_bytes`` and ``deleted_segments``.

    A tail whose copy cannot be written is not zeroed (an error is logged): new records
    overwrite it as they come, which is all a torn write ever deserved, but nothing is
    erased here that has no copy.

    Args:
        report_problem: also report the copy as a store health problem (after a clean
            exit, when a torn tail is not expected).
    """
    if report.tail_from is None:
        return
    file_size = commit_log.file_size
    for segment in commit_log.segments.files:
        if segment.base_offset + file_size <= end_offset:
            continue
        later = segment.base_offset > end_offset
        if later:
            report.deleted_segments.append(segment.path.name)
        start = max(0, report.tail_from - segment.base_offset)
        with SegmentFile(segment.path, file_size, writable=not commit_log.segments.readonly) as f:
            nonzero_end = f.nonzero_end(start, file_size)
            if nonzero_end <= start:
                continue
            report.dropped_bytes += nonzero_end - start
            if commit_log.segments.readonly:
                continue
            try:
                entry = commit_log.quarantine.quarantine(
                    f,
                    segment.base_offset,
                    start,
                    nonzero_end,
                    reason=report.stop_reason,
                    found_by="recovery",
                    kind="torn_tail",
                    report_problem=report_problem,
                )
            except OSError as exc:
                log.error(
                    "%s: could not copy the torn tail at %d to the quarantine (%s); it is "
                    "not zeroed", segment.path, start, exc,
                )  # fmt: skip
                continue
            report.tail_copies.append(entry)
            if not later:
                f.write_zeros(start, nonzero_end - start)


def zero_cut_units(queue_ends: dict[ConsumeQueue, int]) -> None:
    """Zero the ConsumeQueue units truncation cut (``queue_ends``: each queue's end before).

    Truncation only moves positions; the cut units would stay on disk behind them, and the
    next recovery, which reads on to the first invalid unit, would bring them back (pointing
    at whatever new records take those offsets). Zeros end that scan where it should."""
    for queue, old_end in queue_ends.items():
        last = queue.segments.last()
        if last is None:
            continue
        start = last.wrote_position
        stop = min(old_end - last.base_offset, last.file_size)
        if stop > start:
            last.write_at(start, bytes(stop - start))


def report_truncated_segments(commit_log: CommitLog, report: RecoveryReport) -> int | None:
    """Report each CommitLog segment ``load`` found cut short (and extended with zeros) as
    a store health problem, and return the index of the first, where the scan must start
    at the latest (None if none)."""
    extended = {path.name: length for path, length in commit_log.segments.extended_files}
    first: int | None = None
    health = commit_log.quarantine.health
    for i, segment in enumerate(commit_log.segments.files):
        length = extended.get(segment.path.name)
        if length is None:
            continue
        first = i if first is None else first
        report.truncated_segments.append((segment.path.name, length))
        missing = commit_log.file_size - length
        summary = (
            f"CommitLog segment commitlog/{segment.path.name} was cut short: {missing} bytes "
            f"missing at its end ({length} of {commit_log.file_size} found); extended with "
            "zeros, recovered up to its last valid record, later segments kept"
        )
        readonly = commit_log.segments.readonly
        log.log(logging.INFO if readonly else logging.ERROR, "%s", summary)
        if health is not None and not readonly:
            detail = {
                "segment": f"commitlog/{segment.path.name}",
                "length_found": length,
                "file_size": commit_log.file_size,
                "bytes_missing": missing,
            }
            try:
                health.report(
                    TRUNCATED_KIND, f"{TRUNCATED_KIND}:{segment.path.name}", summary, detail
                )
            except OSError as exc:
                log.error("could not record the health problem (%s)", exc)
    return first


def drop_headless_index_file(index: IndexService, report: RecoveryReport) -> None:
    """Drop an empty newest index file whose header was lost to a crash.

    A new file starts with the previous file's end values (spec 4.6); killed between sizing
    the file and writing that header, it holds zeros instead. Its end phys offset 0 would
    turn off ``build_index``'s dedupe, so the rescan would index every record again. It holds
    no entry: dropping it costs nothing, and the next put creates it properly.
    """
    files = index.files
    if len(files) >= 2 and files[-1].index_count <= 1:
        if files[-1].end_phys_offset < files[-2].end_phys_offset:
            report.index_files_dropped.extend(index.drop_newest(1))


def rebuild_index_tail(
    commit_log: CommitLog, index: IndexService, end_offset: int, report: RecoveryReport
) -> int | None:
    """Drop index files that reach ``end_offset`` or beyond; return where to re-index from.

    Index entries are deduplicated by physical offset (a put below the last file's end is
    skipped), so entries that point into a truncated tail would make new messages at those
    offsets unfindable. Such files are dropped and rebuilt from the CommitLog.
    """
    files = index.files
    rebuild_from: int | None = None
    keep = len(files)
    for i in range(len(files) - 1, -1, -1):
        f = files[i]
        if f.index_count <= 1:
            continue  # empty (the scan's first put may have just created it): goes if newer
        if f.end_phys_offset < end_offset:
            break
        rebuild_from = f.begin_phys_offset
        keep = i
    if rebuild_from is None:
        return None
    # Everything from the oldest file to rebuild on, empty newer files included.
    report.index_files_dropped.extend(index.drop_newest(len(files) - keep))
    return rebuild_from


def recover(
    commit_log: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService,
    checkpoint: Checkpoint,
    *,
    last_exit_ok: bool,
    dispatch: Dispatch,
    index_dispatch: Dispatch,
    readonly: bool = False,
) -> RecoveryReport:
    """Passes 3 to 5 (the caller has loaded everything). Not thread-safe: run it alone.

    With ``readonly`` (tools, Spark), nothing is dispatched, rebuilt or deleted: the scan only
    finds where valid data ends, and truncation sets the in-memory positions there.
    """
    report = RecoveryReport(last_exit_ok=last_exit_ok)
    queues.recover_all()
    if not readonly:
        drop_headless_index_file(index, report)
    dispatched = queues.max_phys_offset()
    segments = commit_log.segments.files
    if not segments:
        if not readonly:
            queues.destroy()
            index.destroy_all()
        report.stop_reason = "empty CommitLog"
        return report
    start = choose_start_segment(
        segments,
        last_exit_ok=last_exit_ok,
        dispatched_offset=dispatched,
        checkpoint_min_timestamp=checkpoint.min_timestamp(),
        check_crc=commit_log.config.check_crc_on_recover,
        file_size=commit_log.file_size,
    )
    truncated = report_truncated_segments(commit_log, report)
    if truncated is not None:
        start = min(start, truncated)
    end = scan_commit_log(
        commit_log,
        start,
        dispatch_from=dispatched,
        dispatch_all=not last_exit_ok,
        dispatch=dispatch,
        report=report,
    )
    report.end_offset = end
    keep_torn_tail(commit_log, end, report, report_problem=last_exit_ok and not readonly)
    commit_log.segments.truncate_dirty(end)
    if readonly:
        report.deleted_segments.clear()
        return report
    queue_ends = {
        queue: queue.segments.max_offset
        for topic in queues.topics()
        for queue in queues.queues(topic).values()
    }
    queues.truncate_dirty(end)
    zero_cut_units({q: old for q, old in queue_ends.items() if q.segments.max_offset < old})
    rebuild_from = rebuild_index_tail(commit_log, index, end, report)
    if rebuild_from is not None:
        report.index_rebuilt_from = rebuild_from
        for item in commit_log.iter_dispatch(
            rebuild_from, end, 1 << 62, commit_log.delay_levels_ms
        ):
            if isinstance(item, DispatchRequest):
                index_dispatch(item)
    checkpoint.confirm_phy_offset = end
    if report.eventful:
        log.warning("%s", report.summary())
    else:
        log.info("%s", report.summary())
    return report
