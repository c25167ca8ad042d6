"""Cleanup: delete expired CommitLog files, then the ConsumeQueue and index files below the
new minimum, and guard the disk (spec 6.4, 6.5).

One call is one run of RocketMQ's ``CleanCommitLogService`` followed by
``CleanConsumeQueueService`` (every ``clean_resource_interval_ms`` = 10 s, the first run
``clean_first_delay_ms`` = 60 s after start):

1. Measure the partitions of the CommitLog and the ConsumeQueues (``disk.usage_ratio``,
   injected as ``probe``). Above the warning ratio (90 %) the store is *disk full*: puts are
   refused with ``SERVICE_NOT_AVAILABLE`` and a reason, and files go at once whatever their
   age. Above the force ratio (85 %) files go at once too; above ``disk_max_used_space_ratio``
   (75 %) deletion runs outside ``delete_when``. Once usage is back under the warning ratio
   (measured again right after this run deleted something) puts are accepted again.
2. Deletion runs in the ``delete_when`` hours (default 04 local time), when the disk check
   asks for it, or while a manual delete is armed (:func:`request_manual_delete`, 20 runs).
3. CommitLog files go oldest first while ``now >= mtime + file_reserved_time_hours`` (72 h),
   or all but the last when cleaning immediately; never the last file, at most
   ``delete_file_batch_max`` (10) per run, stopping at the first file that must stay (no
   holes). RocketMQ pauses 100 ms between two deletions to spread the I/O; a step does no
   sleeping, the interval between runs spaces the batches instead.
4. If the CommitLog min offset moved since the last run: ConsumeQueue files whose last unit
   points below it go, queue min offsets are corrected, index files wholly below it go.

In Celery mode the worker's store maps the CommitLog read-only: it unlinks the files and the
broker, told through the progress file's CLEANUP_GENERATION, drops its mappings; the
disk-full flag travels the same way (DISK_FLAGS). State between runs (:class:`CleanupState`)
is per runner; losing it costs one extra ConsumeQueue pass.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from mqcore.clock import Clock
from mqcore.services import locks
from mqcore.services.disk import DiskProbe, Thresholds, usage_ratio
from mqcore.services.result import StepResult
from mqcore.store import roles
from mqcore.store.consume_queue import CQ_UNIT, CQ_UNIT_SIZE
from mqcore.store.mapped_file import MappedFile, fsync_directory
from mqcore.store.progress import DISK_FULL, LOGIC_DISK_FULL, Slot
from mqcore.store.store import MessageStore

#: RocketMQ arms this many runs for an admin "delete expired files now".
MANUAL_DELETE_RUNS = 20


@dataclass
class CleanupState:
    """What one cleanup runner remembers between runs."""

    started_at: float | None = None  # monotonic time of the first call
    last_min_offset: int = -1
    manual_runs: int = 0
    files_deleted_total: int = 0
    last_deleted: list[str] = field(default_factory=list)


def request_manual_delete(state: CleanupState) -> None:
    """Delete expired files on the next runs whatever the hour (admin command)."""
    state.manual_runs = MANUAL_DELETE_RUNS


@dataclass(frozen=True, slots=True)
class DiskCheck:
    commit_log_usage: float
    queue_usage: float
    disk_full: bool
    logic_disk_full: bool
    clean_immediately: bool
    triggered: bool

    def reason(self, thresholds: Thresholds) -> str:
        if not (self.disk_full or self.logic_disk_full):
            return ""
        which, usage = (
            ("CommitLog", self.commit_log_usage)
            if self.disk_full
            else ("ConsumeQueue", self.queue_usage)
        )
        return (
            f"disk full: the {which} partition is {usage:.0%} used, over the warning ratio "
            f"{thresholds.warning:.0%}; puts are refused until cleanup frees space"
        )


def check_disk(store: MessageStore, probe: DiskProbe, thresholds: Thresholds) -> DiskCheck:
    """Spec 6.4 step 1 for both partitions."""
    log_usage = probe(str(store.root / "commitlog"))
    queue_usage = probe(str(store.root / "consumequeue"))
    full = log_usage > thresholds.warning
    logic_full = queue_usage > thresholds.warning
    immediately = max(log_usage, queue_usage) > thresholds.force
    triggered = immediately or max(log_usage, queue_usage) > thresholds.max_used
    return DiskCheck(log_usage, queue_usage, full, logic_full, immediately, triggered)


def _is_delete_hour(delete_when: str, now_ms: int) -> bool:
    hour = time.localtime(now_ms / 1000).tm_hour
    for part in delete_when.split(";"):
        part = part.strip()
        if part.isdigit() and int(part) == hour:
            return True
    return False


def step(
    store: MessageStore,
    state: CleanupState,
    clock: Clock,
    *,
    probe: DiskProbe = usage_ratio,
    first_delay_ms: int = 60_000,
) -> StepResult:
    """One cleanup run (module docstring). Takes the ``cleanup`` lock for the run.

    Returns:
        ``skipped`` if another runner holds the lock; otherwise the disk figures and what
        was deleted, in ``detail``.

    Raises:
        OSError: a file could not be deleted or the disk could not be measured.
    """
    now = clock.monotonic()
    if state.started_at is None:
        state.started_at = now
    waited_ms = (now - state.started_at) * 1000
    if waited_ms < first_delay_ms:
        return StepResult(
            "cleanup", False, detail={"first_run_in_ms": int(first_delay_ms - waited_ms)}
        )
    with locks.exclusive(store, "cleanup") as held:
        if not held:
            return locks.skipped(store, "cleanup")
        return _run(store, state, clock, probe)


def _run(store: MessageStore, state: CleanupState, clock: Clock, probe: DiskProbe) -> StepResult:
    cfg = store.config
    thresholds = Thresholds.of(cfg)
    follower = store.follows_derived_files
    if follower:
        store.follow_others()
        roles.reload_index(store)
    disk = check_disk(store, probe, thresholds)
    _publish_disk(store, disk, thresholds)
    now_ms = clock.now_ms()
    why = ""
    if _is_delete_hour(cfg.delete_when, now_ms):
        why = "delete_when"
    elif disk.triggered:
        why = "disk"
    elif state.manual_runs > 0:
        why = "manual"
    if state.manual_runs > 0:
        state.manual_runs -= 1
    deleted: list[str] = []
    if why:
        deleted = _delete_commit_log(
            store,
            expired_ms=int(cfg.file_reserved_time_hours * 3_600_000),
            now_ms=now_ms,
            clean_immediately=disk.clean_immediately,
            max_count=cfg.delete_file_batch_max,
        )
    _retry_hanged(store)
    min_offset = store.commit_log.min_offset
    queue_files = index_files = 0
    if min_offset > state.last_min_offset:
        state.last_min_offset = min_offset
        if follower:
            queue_files = _unlink_expired_queue_files(store, min_offset)
            index_files = _unlink_expired_index_files(store, min_offset)
        else:
            queue_files = store.queues.clean_expired(min_offset)
            index_files = store.index.delete_expired(min_offset)
    if deleted:
        disk = check_disk(store, probe, thresholds)  # resume puts as soon as space is back
        _publish_disk(store, disk, thresholds)
    if deleted or queue_files or index_files:
        state.files_deleted_total += len(deleted) + queue_files + index_files
        state.last_deleted = deleted
        if store.progress is not None:
            store.progress.set(Slot.COMMITLOG_MIN_OFFSET, min_offset)
            store.progress.increment(Slot.CLEANUP_GENERATION)
    return StepResult(
        "cleanup",
        progressed=False,
        detail={
            "commit_log_usage": disk.commit_log_usage,
            "queue_usage": disk.queue_usage,
            "disk_full": disk.disk_full or disk.logic_disk_full,
            "why": why,
            "deleted_commit_log_files": deleted,
            "deleted_queue_files": queue_files,
            "deleted_index_files": index_files,
            "files_deleted_total": state.files_deleted_total,
            "commit_log_min_offset": min_offset,
        },
    )


def _publish_disk(store: MessageStore, disk: DiskCheck, thresholds: Thresholds) -> None:
    full = disk.disk_full or disk.logic_disk_full
    store.set_writable(not full, disk.reason(thresholds))  # no-op in a worker's store
    progress = store.progress
    if progress is not None:
        flags = (DISK_FULL if disk.disk_full else 0) | (
            LOGIC_DISK_FULL if disk.logic_disk_full else 0
        )
        progress.set(Slot.DISK_USAGE_PPM, int(disk.commit_log_usage * 1_000_000))
        progress.set(Slot.DISK_FLAGS, flags)


def _delete_commit_log(
    store: MessageStore, *, expired_ms: int, now_ms: int, clean_immediately: bool, max_count: int
) -> list[str]:
    """Spec 6.4 step 3. Returns the names of the files deleted."""

    def expired(mapped: MappedFile) -> bool:
        return clean_immediately or now_ms >= mapped.last_modified_ms + expired_ms

    segments = store.commit_log.segments
    if not segments.readonly:
        before = [f.path.name for f in segments.files]
        count = segments.delete_first_files_while(
            expired,
            force_after_ms=store.config.destroy_mapped_file_interval_forcibly_ms,
            max_count=max_count,
        )
        return before[:count]
    # A worker maps the CommitLog read-only: unlink, then forget the mappings. The broker
    # drops its own on the CLEANUP_GENERATION bump; its reads of those files fail softly.
    deleted: list[str] = []
    for mapped in segments.files[:-1]:
        if len(deleted) >= max_count or not expired(mapped):
            break
        try:
            os.unlink(mapped.path)
        except FileNotFoundError:
            pass
        deleted.append(mapped.path.name)
    if deleted:
        fsync_directory(segments.directory)
        segments.sync_files(front=True, end=False)
    return deleted


def _retry_hanged(store: MessageStore) -> None:
    """Spec 6.4 step 4: a first file destroyed earlier but still held by readers is unmapped
    by force once ``destroy_mapped_file_interval_forcibly_ms`` has passed."""
    segments = store.commit_log.segments
    first = segments.first()
    if segments.readonly or first is None or first.is_available:
        return
    segments.delete_first_files_while(
        lambda mapped: not mapped.is_available,
        force_after_ms=store.config.destroy_mapped_file_interval_forcibly_ms,
    )


# -- a worker's cleanup: it sees the derived files through read-only mappings -------------


def _unlink(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink_expired_queue_files(store: MessageStore, min_offset: int) -> int:
    """Spec 6.5 for a follower: the same rule as ``ConsumeQueue.delete_expired_files`` (front
    files, never the last, whose last unit points below the CommitLog minimum), carried out
    by unlinking. The reput holder and the broker drop their mappings on the
    CLEANUP_GENERATION bump."""
    assert store.progress is not None
    limit = roles.dispatch_limit(store.progress)
    deleted = 0
    for topic in store.queues.topics():
        for queue in store.queues.queues(topic).values():
            removed = 0
            for mapped in queue.segments.files[:-1]:
                if mapped.wrote_position < mapped.file_size or not mapped.hold():
                    break
                try:
                    last = mapped.read(mapped.file_size - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
                finally:
                    mapped.release()
                if CQ_UNIT.unpack(last)[0] >= min_offset:
                    break
                _unlink(mapped.path)
                removed += 1
            if removed:
                fsync_directory(queue.directory)
                queue.follow(limit, front=True)
            queue.correct_min_offset(min_offset)
            deleted += removed
    return deleted


def _unlink_expired_index_files(store: MessageStore, min_offset: int) -> int:
    """Spec 6.5's index rule for a follower (never the newest file), by unlinking."""
    removed = 0
    for f in store.index.files[:-1]:
        if f.end_phys_offset >= min_offset:
            break
        _unlink(f.path)
        removed += 1
    if removed:
        roles.reload_index(store)
    return removed
