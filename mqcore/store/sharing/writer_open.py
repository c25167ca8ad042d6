"""The broker role's start: recover the CommitLog only, publish a new generation, follow.

A broker-role store appends to the CommitLog while a Celery worker writes the derived files.
Its start recovers the CommitLog (spec 5.6, 5.7: the scan, which quarantines mid-log
corruption as ``recovery.recover`` does, then the torn tail copied to the quarantine, cut
and zeroed) without touching a derived file: the worker recovers those when it attaches to
the new generation (``reput_holder.py``). Crash behaviour: a crash during this start leaves
``abort`` in place, and the next start recovers again from the same files.
"""

from __future__ import annotations

import logging

from mqcore.format.record import DispatchRequest
from mqcore.store.commit_log import CommitLog
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.recovery.recovery import (
    RecoveryReport,
    choose_start_segment,
    keep_torn_tail,
    report_truncated_segments,
    scan_commit_log,
)
from mqcore.store.sharing.follower import Follower
from mqcore.store.sharing.progress import Progress, Slot
from mqcore.store.sharing.publisher import Publisher

log = logging.getLogger(__name__)


def _ignore(_request: DispatchRequest) -> None:
    return None


def recover_commit_log(
    progress: Progress,
    commit_log: CommitLog,
    checkpoint: Checkpoint,
    *,
    last_exit_ok: bool,
    check_crc: bool,
) -> RecoveryReport:
    """CommitLog recovery without touching derived files: the scan from the segment the
    last dispatch (REPUT_OFFSET) and the checkpoint allow, then the torn tail kept and cut.

    Args:
        progress: the shared slots (REPUT_OFFSET: where the worker's dispatch stood).
        commit_log: the loaded CommitLog, cut here to the recovered end.
        checkpoint: the last checkpoint (its oldest timestamp bounds the scan).
        last_exit_ok: whether the previous writer closed cleanly.
        check_crc: verify each record's body CRC during the scan.

    Returns:
        What the scan found (``end_offset``: the recovered end).
    """
    report = RecoveryReport(last_exit_ok=last_exit_ok)
    segments = commit_log.segments.files
    if not segments:
        report.stop_reason = "empty CommitLog"
        return report
    dispatched = progress.get(Slot.REPUT_OFFSET) - 1  # a record starting here was dispatched
    start = choose_start_segment(
        segments,
        last_exit_ok=last_exit_ok,
        dispatched_offset=dispatched,
        checkpoint_min_timestamp=checkpoint.min_timestamp(),
        check_crc=check_crc,
        file_size=commit_log.file_size,
    )
    truncated = report_truncated_segments(commit_log, report)
    if truncated is not None:
        start = min(start, truncated)
    end = scan_commit_log(
        commit_log,
        start,
        dispatch_from=dispatched,
        dispatch_all=False,
        dispatch=_ignore,
        report=report,
    )
    report.end_offset = end
    keep_torn_tail(commit_log, end, report, report_problem=last_exit_ok)
    commit_log.segments.truncate_dirty(end)
    if report.eventful:
        log.warning("%s", report.summary())
    else:
        log.info("%s", report.summary())
    return report


def open_writer(
    follower: Follower,
    publisher: Publisher,
    *,
    last_exit_ok: bool,
    check_crc: bool,
) -> tuple[RecoveryReport, int]:
    """Load and recover as the CommitLog writer of a store whose services run elsewhere:
    recover the CommitLog, publish its end and a new generation, load the derived views as
    a follower.

    Returns:
        The recovery report, and the offset the broker's :meth:`Follower.follow_dispatch`
        starts from (what the worker had dispatched, within the recovered log).
    """
    commit_log = follower.commit_log
    commit_log.load()
    checkpoint = follower.views.load_checkpoint()
    report = recover_commit_log(
        follower.progress, commit_log, checkpoint, last_exit_ok=last_exit_ok, check_crc=check_crc
    )
    end = report.end_offset
    publisher.writer_opened(end, last_exit_ok, reput_offset=None)
    follower.load_views()
    reput_offset = max(min(follower.limit(), end), commit_log.min_offset)
    follower.note(Slot.CLEANUP_GENERATION, Slot.ATTACH_COUNT, Slot.INDEX_GENERATION, keep=True)
    return report, reput_offset
