"""The CommitLog walks of the derived-file rebuilds: reput's walks, strict about corruption.

Reput's walk (``CommitLog.iter_dispatch``, ``dispatch_scan.dispatch_columns``) skips a
corrupt record by the size it states, as RocketMQ does, and stops at one that states none,
leaving it to recovery: it walks records just written, which recovery scanned at the start.
A rebuild walks the whole log, down to segments no recovery scans: there the stated size may
be the damaged field (skipping by it would skip good records, whose queue offsets the
rebuilt queue would then hold as blanks), and no recovery is coming. So these walks stop at
any corrupt record, quarantine it (``recovery.quarantine_stall``: found by ``rebuild``, the
bytes up to where valid records resume, kept in place, reported) and go on after it, as
recovery's scan does. The records of a quarantined range get no unit; their queue offsets
stay theirs (the rebuilt queue puts blank units there, ``ConsumeQueue.put``'s gap rule).

A stop at a valid record (this process's view of the log lags behind the file) is no
damage: the walk returns there and goes on at its next call. A walk that cannot get past a
corrupt record below ``end`` (the quarantine rules do not take it: nothing valid after it)
raises ``StoreError``. Either way a rebuild is never installed short of the records it was
meant to hold: the callers install only a walk that reached its end.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mqcore.errors import StoreError
from mqcore.format.record import DispatchRequest
from mqcore.store.commit_log import CommitLog
from mqcore.store.recovery import recovery
from mqcore.store.recovery.record_search import SegmentFile
from mqcore.store.reput.dispatch_scan import Columns, dispatch_columns


def columns(
    commit_log: CommitLog, start: int, end: int, max_bytes: int, delay_levels_ms: Sequence[int]
) -> tuple[Columns, int]:
    """The records of ``[start, end)`` (about ``max_bytes`` of log) as columns, and the
    offset reached: at least ``min(end, start + max_bytes)``; or, when the walk met a
    corrupt record, where records resume after the range it quarantined; or where it
    stopped at a valid record it cannot read yet (module docstring).

    Raises:
        StoreError: the walk stopped below ``end`` at something it cannot quarantine.
    """
    found, reached = dispatch_columns(
        commit_log, start, end, max_bytes, delay_levels_ms, skip_corrupt=False
    )
    if reached < min(end, start + max_bytes):
        reached = _past_stop(commit_log, reached)
    return found, reached


def requests(
    commit_log: CommitLog, start: int, end: int, max_bytes: int, delay_levels_ms: Sequence[int]
) -> Iterator[DispatchRequest | int]:
    """:meth:`CommitLog.iter_dispatch` from ``start`` towards ``end`` (about ``max_bytes``
    of log), every corrupt record met quarantined and walked past; the last item is the
    offset reached: at least ``min(end, start + max_bytes)`` unless the walk stopped at a
    valid record it cannot read yet.

    Raises:
        StoreError: as :func:`columns`.
    """
    offset, budget_end = start, start + max_bytes
    while True:
        reached = offset
        for item in commit_log.iter_dispatch(
            offset, end, budget_end - offset, delay_levels_ms, skip_corrupt=False
        ):
            if isinstance(item, int):
                reached = item
            else:
                yield item
        if reached >= min(end, budget_end):
            break
        offset = _past_stop(commit_log, reached)
        if offset == reached:
            break
    yield reached


def _past_stop(commit_log: CommitLog, reached: int) -> int:
    """Where the walk goes on after stopping at ``reached`` below its end (``reached``
    itself: at its next call)."""
    if reached < commit_log.min_offset:  # the segment was cleaned up under the walk
        return commit_log.min_offset
    segment = commit_log.segments.find(reached)
    if segment is not None:
        with SegmentFile(segment.path, commit_log.file_size) as f:
            if f.valid_at(reached - segment.base_offset, segment.base_offset) is not None:
                return reached
    resume = recovery.quarantine_stall(commit_log, reached, found_by="rebuild")
    if resume is None:
        raise StoreError(
            f"the CommitLog cannot be walked past {reached}: the record there is not valid "
            "and no valid record follows it (the next start's recovery decides what it is)"
        )
    return resume
