"""Recovery: from whatever the last run left on disk to a consistent store (spec 5.4–5.8).

The passes, in order (as Kafka's ``LogLoader.load`` comments them):

1. Decide how the last run ended: ``<root>/abort`` present means it crashed.
2. Load: map the CommitLog segments and every ConsumeQueue; load the checkpoint and the
   index files (after a crash, index files newer than the checkpoint's index time are
   dropped, since they may hold entries that were never flushed).
3. Recover each ConsumeQueue (first invalid unit ends it) and take the highest physical
   offset they reach: everything below it was dispatched already.
4. Scan the CommitLog with CRC checks from a safe segment: after a clean exit, the newest
   segment whose first record is already dispatched; after a crash, the newest whose first
   record is older than the checkpoint. Records past the dispatched offset (every record,
   after a crash) are dispatched again; the ConsumeQueue and IndexFile writes skip what
   they already hold, so that is idempotent.
5. Truncate the torn tail: the CommitLog ends after the last valid record; ConsumeQueue
   units and index files that point at or past it are cut and rebuilt from the log. The cut
   bytes are zeroed, so that no later scan can read them back.
6. The caller rebuilds the in-memory queue offset table and corrects queue min offsets.

Crash behaviour: recovery itself only truncates what it found invalid and rewrites derived
files; killed halfway, the next start simply recovers again from the same inputs.
"""

from __future__ import annotations

import logging
import mmap
from collections.abc import Callable
from dataclasses import dataclass, field

from mqcore.store.checkpoint import Checkpoint
from mqcore.store.commit_log import CommitLog
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.format import (
    Blank,
    Corrupt,
    DispatchRequest,
    NeedMore,
    Valid,
    check_record,
    decode_dispatch,
)
from mqcore.store.index_service import IndexService
from mqcore.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

Dispatch = Callable[[DispatchRequest], None]


@dataclass
class RecoveryReport:
    """What recovery found and what it dropped. ``dropped_bytes`` counts the non-zero bytes
    cut from the CommitLog tail: 0 after a clean exit or a crash between records."""

    last_exit_ok: bool
    scan_from: int = 0
    end_offset: int = 0
    records_scanned: int = 0
    records_dispatched: int = 0
    stop_reason: str = ""
    dropped_bytes: int = 0
    deleted_segments: list[str] = field(default_factory=list)
    index_files_dropped: list[str] = field(default_factory=list)
    index_rebuilt_from: int | None = None

    def summary(self) -> str:
        how = "clean" if self.last_exit_ok else "after a crash"
        text = (
            f"recovered {how}: CommitLog ends at {self.end_offset} "
            f"({self.records_scanned} records checked from {self.scan_from}, "
            f"{self.records_dispatched} dispatched)"
        )
        if self.dropped_bytes or self.deleted_segments:
            text += (
                f"; dropped {self.dropped_bytes} bytes of torn tail ({self.stop_reason})"
                f", deleted segments {self.deleted_segments or 'none'}"
            )
        if self.index_files_dropped:
            text += f"; index files rebuilt: {self.index_files_dropped}"
        return text


def _first_record(segment: MappedFile, check_crc: bool) -> Valid | None:
    result = check_record(segment.buffer, 0, segment.file_size, check_crc=check_crc)
    return result if isinstance(result, Valid) and result.store_timestamp != 0 else None


def choose_start_segment(
    segments: tuple[MappedFile, ...],
    *,
    last_exit_ok: bool,
    dispatched_offset: int,
    checkpoint_min_timestamp: int,
    check_crc: bool,
) -> int:
    """Index of the segment the scan starts from (spec 5.6 HEAD rule, 5.7)."""
    for i in range(len(segments) - 1, 0, -1):
        first = _first_record(segments[i], check_crc)
        if first is None:
            continue
        if last_exit_ok and first.phys_offset <= dispatched_offset:
            return i
        if not last_exit_ok and first.store_timestamp <= checkpoint_min_timestamp:
            return i
    return 0


def _nonzero_tail(segment: MappedFile, pos: int) -> int:
    """How many bytes from ``pos`` to the last non-zero byte of the segment (read from the
    file's data ranges only: ``MappedFile.nonzero_end``)."""
    return segment.nonzero_end(pos) - pos


def _stop_reason(result: object, offset: int, report: RecoveryReport) -> str:
    """Why the scan stopped at ``offset``. A bad CRC or magic is ``Corrupt`` with size 0,
    like a zero-filled tail: the non-zero bytes after ``offset`` tell them apart."""
    if not report.dropped_bytes:
        return f"end of written data at {offset}"
    if isinstance(result, NeedMore):
        return f"record at {offset} runs past its segment"
    detail = result.detail if isinstance(result, Corrupt) else "unreadable"
    return f"corrupt record at {offset}: {detail}"


def _zero(segment: MappedFile, pos: int, length: int) -> None:
    """Overwrite ``length`` bytes at ``pos`` with zeros and msync them."""
    if length <= 0:
        return
    chunk = 1 << 20
    for start in range(pos, pos + length, chunk):
        segment.write_at(start, bytes(min(chunk, pos + length - start)))
    aligned = pos - pos % mmap.PAGESIZE
    segment.buffer.flush(aligned, pos + length - aligned)


def zero_dropped_tails(
    commit_log: CommitLog, end_offset: int, queue_ends: dict[ConsumeQueue, int]
) -> None:
    """Zero what truncation dropped, in the CommitLog and in the ConsumeQueues.

    Truncation only moves positions; the dropped bytes would stay on disk behind them.
    Later writes overwrite them only partly, and the next recovery reads on to the first
    invalid record or unit: dropped ConsumeQueue units would come back (pointing at
    whatever the new records are), and a dropped record that happens to start where the
    new records end would be dispatched again. Zeros end both scans where they should.

    Args:
        end_offset: the new end of the CommitLog.
        queue_ends: each queue's end (byte offset) before it was truncated.
    """
    segment = commit_log.segments.find(end_offset)
    if segment is not None:
        pos = end_offset - segment.base_offset
        _zero(segment, pos, _nonzero_tail(segment, pos))
    for queue, old_end in queue_ends.items():
        last = queue.segments.last()
        if last is None:
            continue
        start = last.wrote_position
        stop = min(old_end - last.base_offset, last.file_size)
        _zero(last, start, stop - start)


def scan_commit_log(
    commit_log: CommitLog,
    start_index: int,
    *,
    dispatch_from: int,
    dispatch_all: bool,
    dispatch: Dispatch,
    report: RecoveryReport,
) -> int:
    """Check records from segment ``start_index`` on; return the end of the last valid one."""
    segments = commit_log.segments.files
    check_crc = commit_log.config.check_crc_on_recover
    levels = commit_log.delay_levels_ms
    index = start_index
    segment = segments[index]
    report.scan_from = segment.base_offset
    pos = 0
    while True:
        buf = segment.buffer
        result = check_record(buf, pos, segment.file_size, check_crc=check_crc)
        if isinstance(result, Valid):
            offset = segment.base_offset + pos
            report.records_scanned += 1
            if dispatch_all or offset > dispatch_from:
                request = decode_dispatch(buf, pos, segment.file_size, delay_levels_ms=levels)
                if isinstance(request, DispatchRequest):
                    dispatch(request)
                    report.records_dispatched += 1
            pos += result.size
        elif isinstance(result, Blank):
            if index + 1 >= len(segments):
                report.stop_reason = "end of the last segment"
                break
            index += 1
            segment = segments[index]
            pos = 0
        else:
            report.dropped_bytes = _nonzero_tail(segment, pos)
            report.stop_reason = _stop_reason(result, segment.base_offset + pos, report)
            break
    end_offset = segment.base_offset + pos
    for later in segments[index + 1 :]:
        report.dropped_bytes += _nonzero_tail(later, 0)
        report.deleted_segments.append(later.path.name)
    return end_offset


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
    )
    end = scan_commit_log(
        commit_log,
        start,
        dispatch_from=dispatched,
        dispatch_all=not last_exit_ok,
        dispatch=dispatch,
        report=report,
    )
    report.end_offset = end
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
    zero_dropped_tails(
        commit_log,
        end,
        {q: old for q, old in queue_ends.items() if q.segments.max_offset < old},
    )
    rebuild_from = rebuild_index_tail(commit_log, index, end, report)
    if rebuild_from is not None:
        report.index_rebuilt_from = rebuild_from
        for item in commit_log.iter_dispatch(
            rebuild_from, end, 1 << 62, commit_log.delay_levels_ms
        ):
            if isinstance(item, DispatchRequest):
                index_dispatch(item)
    checkpoint.confirm_phy_offset = end
    if report.dropped_bytes or report.deleted_segments or report.index_files_dropped:
        log.warning("%s", report.summary())
    else:
        log.info("%s", report.summary())
    return report
