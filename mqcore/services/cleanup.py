"""Cleanup: delete expired CommitLog files, then the ConsumeQueue and index files below the
new minimum, and guard the disk (spec 6.4, 6.5).

One call is one run of RocketMQ's ``CleanCommitLogService`` followed by
``CleanConsumeQueueService`` (every ``clean_resource_interval_ms`` = 10 s, and every second
while the disk is over the warning ratio: the disk guard wakes the runner, ``disk.py``):

1. Measure the partitions of the CommitLog and the ConsumeQueues (``disk.check_disk``, the
   probe injected). Above the warning ratio (90 %) the store is *disk full*: puts are
   refused with ``SERVICE_NOT_AVAILABLE`` and a reason. Above the force ratio (85 %) cleanup
   may delete files before their time (forced cleanup), above ``disk_max_used_space_ratio``
   (75 %) deletion runs outside ``delete_when``. Once usage is back under the warning ratio
   (measured again right after this run deleted something) puts are accepted again. The
   measurement runs from the first call; only deletion waits ``clean_first_delay_ms``
   (60 s) after the start.
2. Deletion runs in the ``delete_when`` hours (default 04 local time), when the disk check
   asks for it, or while a manual delete is armed (:func:`request_manual_delete`, 20 runs).
3. CommitLog files go oldest first as ``deletion_policy.py`` allows: expired ones (older
   than ``file_reserved_time_hours``, 72 h), under disk pressure only those no consumer
   still needs (the ``needed`` callable, ``consumed.py``), and younger ones under forced
   cleanup only if the operator opted in (``CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED``). Never
   the last file, at most ``delete_file_batch_max`` (10) per run, stopping at the first
   file that must stay (no holes). RocketMQ pauses 100 ms between two deletions to spread
   the I/O; a step does no sleeping, the interval between runs spaces the batches instead.
   Every file deleted is logged at WARNING (file, offset range, why) and handed to the
   ``on_delete`` hook (the audit log, ``deletions.py``); a forced one is also a health
   problem. A forced cleanup held back is logged when its reason changes and shown as the
   health condition ``cleanup-held-back`` while the disk is full.
4. If the CommitLog min offset moved since the last run: ConsumeQueue files whose last unit
   points below it go, queue min offsets are corrected, index files wholly below it go.

In Celery mode the worker's store maps the CommitLog read-only: it unlinks the files and the
broker, told through the progress file's CLEANUP_GENERATION, drops its mappings; the
disk-full flag travels the same way (DISK_FLAGS). State between runs (:class:`CleanupState`)
is per runner; losing it costs one extra ConsumeQueue pass.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

from mqcore.clock import Clock
from mqcore.services import locks
from mqcore.services.consumed import NeededOffset
from mqcore.services.deletion_policy import SegmentPolicy
from mqcore.services.deletions import Deletion, DeletionHook
from mqcore.services.disk import (
    DiskCheck,
    DiskProbe,
    Thresholds,
    check_disk,
    publish_disk,
    usage_ratio,
)
from mqcore.services.result import StepResult
from mqcore.store.consume_queue import CQ_UNIT, CQ_UNIT_SIZE
from mqcore.store.files.mapped_file import fsync_directory
from mqcore.store.sharing.progress import Slot
from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

#: RocketMQ arms this many runs for an admin "delete expired files now".
MANUAL_DELETE_RUNS = 20
#: Health condition while forced cleanup keeps segments and the disk is full.
HELD_BACK_CONDITION = "cleanup-held-back"


@dataclass
class CleanupState:
    """What one cleanup runner remembers between runs."""

    started_at: float | None = None  # monotonic time of the first call
    last_min_offset: int = -1
    manual_runs: int = 0
    files_deleted_total: int = 0
    last_deleted: list[str] = field(default_factory=list)
    held_back: str = ""  # which segment forced cleanup kept last time, and by which rule


def request_manual_delete(state: CleanupState) -> None:
    """Delete expired files on the next runs whatever the hour (admin command)."""
    state.manual_runs = MANUAL_DELETE_RUNS


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
    needed: NeededOffset | None = None,
    on_delete: DeletionHook | None = None,
) -> StepResult:
    """One cleanup run (module docstring). Takes the ``cleanup`` lock for the run.

    Args:
        needed: what consumers still need (``consumed.py``); None: no consumer is known.
        on_delete: called for every CommitLog file deleted (the audit log).

    Returns:
        ``skipped`` if another runner holds the lock; otherwise the disk figures and what
        was deleted, in ``detail`` (``first_run_in_ms`` while deletion still waits).

    Raises:
        OSError: a file could not be deleted or the disk could not be measured.
    """
    now = clock.monotonic()
    if state.started_at is None:
        state.started_at = now
    waited_ms = (now - state.started_at) * 1000
    with locks.exclusive(store, "cleanup") as held:
        if not held:
            return locks.skipped(store, "cleanup")
        if waited_ms < first_delay_ms:  # measure from the start; delete only later
            thresholds = Thresholds.of(store.config)
            disk = check_disk(store, probe, thresholds)
            publish_disk(store, disk, thresholds)
            detail = _disk_detail(disk) | {"first_run_in_ms": int(first_delay_ms - waited_ms)}
            return StepResult("cleanup", False, detail=detail)
        return _run(store, state, clock, probe, needed, on_delete)


def _disk_detail(disk: DiskCheck) -> dict[str, object]:
    return {
        "commit_log_usage": disk.commit_log_usage,
        "queue_usage": disk.queue_usage,
        "disk_full": disk.full,
    }


def _run(
    store: MessageStore,
    state: CleanupState,
    clock: Clock,
    probe: DiskProbe,
    needed: NeededOffset | None,
    on_delete: DeletionHook | None,
) -> StepResult:
    cfg = store.config
    thresholds = Thresholds.of(cfg)
    follower = store.follows_derived_files
    if follower:
        store.follow_others()
        store.follower.reload_index()
    disk = check_disk(store, probe, thresholds)
    publish_disk(store, disk, thresholds)
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
    deleted: list[Deletion] = []
    policy: SegmentPolicy | None = None
    if why:
        policy = SegmentPolicy(
            now_ms=now_ms,
            retention_ms=int(cfg.file_reserved_time_hours * 3_600_000),
            pressure=why == "disk",
            clean_immediately=disk.clean_immediately,
            opt_in=cfg.disk_clean_forcibly_unconsumed,
            needed=needed,
            usage=max(disk.commit_log_usage, disk.queue_usage),
        )
        deleted = _delete_commit_log(store, policy, max_count=cfg.delete_file_batch_max)
        _record(store, deleted, on_delete)
    _show_held_back(store, state, policy, disk)
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
        if queue_files or index_files:
            log.warning(
                "cleanup: deleted %d ConsumeQueue and %d index files wholly below CommitLog "
                "offset %d (their messages went with the CommitLog)",
                queue_files, index_files, min_offset,
            )  # fmt: skip
    if deleted:
        disk = check_disk(store, probe, thresholds)  # resume puts as soon as space is back
        publish_disk(store, disk, thresholds)
    names = [d.file for d in deleted]
    if deleted or queue_files or index_files:
        state.files_deleted_total += len(deleted) + queue_files + index_files
        state.last_deleted = names
        if store.progress is not None:
            store.progress.set(Slot.COMMITLOG_MIN_OFFSET, min_offset)
            store.progress.increment(Slot.CLEANUP_GENERATION)
    return StepResult(
        "cleanup",
        progressed=False,
        detail=_disk_detail(disk)
        | {
            "why": why,
            "deleted_commit_log_files": names,
            "forced_deletions": [d.file for d in deleted if d.forced],
            "held_back": policy.held_back if policy is not None else "",
            "deleted_queue_files": queue_files,
            "deleted_index_files": index_files,
            "files_deleted_total": state.files_deleted_total,
            "commit_log_min_offset": min_offset,
        },
    )


def _delete_commit_log(
    store: MessageStore, policy: SegmentPolicy, *, max_count: int
) -> list[Deletion]:
    """Spec 6.4 step 3 by ``policy``. Returns what was deleted, oldest first."""
    segments = store.commit_log.segments
    if not segments.readonly:
        before = segments.files
        count = segments.delete_first_files_while(
            policy.may_delete,
            force_after_ms=store.config.destroy_mapped_file_interval_forcibly_ms,
            max_count=max_count,
        )
        return [policy.deletion_of(mapped) for mapped in before[:count]]
    # A worker maps the CommitLog read-only: unlink, then forget the mappings. The broker
    # drops its own on the CLEANUP_GENERATION bump; its reads of those files fail softly.
    deleted: list[Deletion] = []
    for mapped in segments.files[:-1]:
        if len(deleted) >= max_count or not policy.may_delete(mapped):
            break
        try:
            os.unlink(mapped.path)
        except FileNotFoundError:
            pass
        deleted.append(policy.deletion_of(mapped))
    if deleted:
        fsync_directory(segments.directory)
        segments.sync_files(front=True, end=False)
    return deleted


def _record(store: MessageStore, deleted: list[Deletion], on_delete: DeletionHook | None) -> None:
    """Log every deletion, report the forced ones, hand each to the audit hook."""
    for deletion in deleted:
        log.warning("cleanup %s %s", deletion.describe(), deletion.detail)
        if deletion.forced:
            summary = (
                f"forced cleanup deleted CommitLog segment {deletion.file} (offsets "
                f"{deletion.first_offset}..{deletion.end_offset}) before the retention, at "
                f"{deletion.detail['disk_usage']:.0%} disk use"
            )
            try:
                store.health.report(
                    "forced_cleanup", f"forced-cleanup:{deletion.file}", summary,
                    deletion.as_dict(),
                )  # fmt: skip
            except OSError as exc:  # the log line above keeps the facts
                log.error("cleanup: forced deletion of %s not reported: %s", deletion.file, exc)
        if on_delete is not None:
            try:
                on_delete(deletion)
            except Exception:  # noqa: BLE001 - the deletion is done and logged; carry on
                log.exception("cleanup: audit of %s failed", deletion.file)


def _show_held_back(
    store: MessageStore, state: CleanupState, policy: SegmentPolicy | None, disk: DiskCheck
) -> None:
    """Log why forced cleanup keeps segments when that changes; show it while the disk is
    full (the operator's next step is in the message)."""
    held = policy.held_back if policy is not None else ""
    key = policy.held_back_key if policy is not None else ""
    if key != state.held_back:
        state.held_back = key
        if held:
            log.warning("cleanup: %s", held)
    if held and disk.full:
        store.health.set_condition("disk_full", HELD_BACK_CONDITION, held)
    else:
        store.health.clear_condition(HELD_BACK_CONDITION)


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
    limit = store.follower.limit()
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
        store.follower.reload_index()
    return removed
