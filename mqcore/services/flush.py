"""Flush: the asynchronous flush of the CommitLog and the ConsumeQueues, and the checkpoint
(spec 5.1, 6.2, 6.3).

Under sync flush the producer's own thread flushes the CommitLog (group commit, in
``CommitLog.flush_until``), in the broker process whatever ``CAIRN_SERVICES`` says; this
service then flushes only what puts that did not wait left (:func:`flush_unwaited`, in the
broker process), the ConsumeQueues and the checkpoint.

Each call is one pass of RocketMQ's ``FlushRealTimeService`` and ``FlushConsumeQueueService``:
flush when at least ``least_pages`` dirty pages wait, or everything ("thorough") when the
thorough interval has passed since the last thorough flush; ConsumeQueues every
``flush_interval_consume_queue_ms``. When each last ran is kept in :class:`FlushState`.

In a Celery worker (services role) the CommitLog is mapped read-only: the pages the broker
dirtied live in the shared page cache and ``fdatasync`` on the segment files writes them
out; how far is published as SERVICES_FLUSHED_OFFSET. The worker owns the checkpoint file
then, with the ConsumeQueue and index times the reput holder publishes.

On a full disk the checkpoint cannot be written: the pass goes on without it (the previous
checkpoint stays, which only makes a recovery rescan from earlier), logged once when it
starts failing and once when it works again.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from mqcore.clock import Clock
from mqcore.services import locks
from mqcore.services.result import StepResult
from mqcore.store.files.mapped_file import FLUSH_PAGE_BYTES
from mqcore.store.files.space import is_disk_full
from mqcore.store.sharing.progress import Progress, Slot
from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)


@dataclass
class FlushState:
    """When the last thorough flushes ran (monotonic seconds; None = never)."""

    commitlog_thorough_at: float | None = None
    consume_queue_thorough_at: float | None = None
    consume_queue_at: float | None = None
    #: The last checkpoint write found the disk full.
    checkpoint_failing: bool = False


def _flush_checkpoint(store: MessageStore, state: FlushState) -> None:
    """Write the checkpoint; a full disk skips it (module docstring)."""
    try:
        store.checkpoint.flush()
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        if not state.checkpoint_failing:
            log.warning("store %s: checkpoint not written, disk full (%s)", store.root, exc)
        state.checkpoint_failing = True
        return
    if state.checkpoint_failing:
        log.warning("store %s: checkpoint written again", store.root)
    state.checkpoint_failing = False


def _due(last: float | None, now: float, interval_ms: int) -> bool:
    return last is None or (now - last) * 1000 >= interval_ms


def step(store: MessageStore, state: FlushState, clock: Clock) -> StepResult:
    """One flush pass over the CommitLog, the ConsumeQueues and the checkpoint.

    Returns:
        ``skipped`` if another runner holds the flush lock (or the store is a broker whose
        workers flush).

    Raises:
        OSError: msync or fdatasync failed.
    """
    if store.role == "broker" or store.readonly:
        return locks.skipped(store, "flush")
    with locks.exclusive(store, "flush") as held:
        if not held:
            return locks.skipped(store, "flush")
        if store.role == "services":
            return _services_step(store, state, clock)
        return _standalone_step(store, state, clock)


def flush_unwaited(store: MessageStore) -> bool:
    """Sync flush: put on disk what puts that did not wait left behind, and let reput on.

    A put with ``WAIT=false`` (the delay and retry deliveries, producers that ask for it)
    returns without flushing, RocketMQ's ``handleDiskFlush`` waking its GroupCommitService
    without waiting for it. Under sync flush the confirm offset is the flushed offset, so
    until something flushes, reput cannot dispatch those records and nobody can read them:
    on an idle broker, never. This pass is that wake-up, once per flush interval. Returns
    whether it flushed anything.
    """
    if store.config.flush != "sync" or store.role == "services":
        return False
    commit_log = store.commit_log
    end = commit_log.max_offset
    if commit_log.flushed_offset >= end:
        return False
    commit_log.flush_until(end)
    store.publisher.append()
    store.appended.set()  # reput may now dispatch up to the new flushed offset
    return True


def _flush_queues(store: MessageStore, state: FlushState, now: float) -> tuple[bool, bool]:
    """Spec 6.3. Returns (ran, thorough)."""
    cfg = store.config
    if not _due(state.consume_queue_at, now, cfg.flush_interval_consume_queue_ms):
        return False, False
    state.consume_queue_at = now
    thorough = _due(
        state.consume_queue_thorough_at, now, cfg.flush_consume_queue_thorough_interval_ms
    )
    least_pages = 0 if thorough else cfg.flush_consume_queue_least_pages
    if store.follows_derived_files:
        _fdatasync_followed_queues(store, least_pages)
    else:
        store.queues.flush_all(least_pages)
    if thorough:
        state.consume_queue_thorough_at = now
    return True, thorough


def _fdatasync_followed_queues(store: MessageStore, least_pages: int) -> None:
    """A worker's flush sees the ConsumeQueues through read-only mappings (another process
    writes them): each file with enough unsynced units, by spec 6.2's page rule, is
    fdatasync'ed and its flushed position moved to what this view has seen written."""
    for topic in store.queues.topics():
        for queue in store.queues.queues(topic).values():
            for mapped in queue.segments.files:
                if (
                    not mapped.is_flushable(least_pages)
                    or mapped.wrote_position <= mapped.flushed_position
                ):
                    continue
                try:
                    fd = os.open(mapped.path, os.O_RDONLY)
                except FileNotFoundError:
                    continue  # cleaned up meanwhile
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
                mapped.flushed_position = mapped.wrote_position


def _standalone_step(store: MessageStore, state: FlushState, clock: Clock) -> StepResult:
    cfg = store.config
    now = clock.monotonic()
    commitlog_flushed = False
    if cfg.flush == "async":
        thorough = _due(state.commitlog_thorough_at, now, cfg.flush_commitlog_thorough_interval_ms)
        commitlog_flushed = store.commit_log.flush(
            0 if thorough else cfg.flush_commitlog_least_pages
        )
        if thorough:
            state.commitlog_thorough_at = now
            while store.commit_log.flush(0):
                commitlog_flushed = True
    else:
        commitlog_flushed = flush_unwaited(store)
    logics_snapshot = store.checkpoint.logics_msg_timestamp
    queues_flushed, _ = _flush_queues(store, state, now)
    physic = store.commit_log.segments.store_timestamp_ms
    if physic:
        store.checkpoint.physic_msg_timestamp = physic
    store.checkpoint.logics_msg_timestamp = logics_snapshot
    _flush_checkpoint(store, state)
    if store.progress is not None:
        store.progress.raise_to(Slot.FLUSHED_OFFSET, store.commit_log.flushed_offset)
    return StepResult(
        "flush",
        progressed=False,
        detail={
            "commitlog_flushed": commitlog_flushed,
            "consume_queues_flushed": queues_flushed,
            "flushed_offset": store.commit_log.flushed_offset,
            "max_offset": store.commit_log.max_offset,
        },
    )


def _services_step(store: MessageStore, state: FlushState, clock: Clock) -> StepResult:
    cfg = store.config
    progress = store.progress
    assert progress is not None  # every writable role maps it
    now = clock.monotonic()
    store.follow_others()  # the CommitLog end, new queues and their ends
    end = progress.get(Slot.MAX_OFFSET)
    flushed = min(
        end, max(progress.get(Slot.SERVICES_FLUSHED_OFFSET), progress.get(Slot.FLUSHED_OFFSET))
    )
    commitlog_flushed = False
    if cfg.flush == "async":
        thorough = _due(state.commitlog_thorough_at, now, cfg.flush_commitlog_thorough_interval_ms)
        if _commitlog_flushable(
            store, flushed, end, 0 if thorough else cfg.flush_commitlog_least_pages
        ):
            _fdatasync_range(store, flushed, end)
            flushed = end
            commitlog_flushed = True
        if thorough:
            state.commitlog_thorough_at = now
    progress.set(Slot.SERVICES_FLUSHED_OFFSET, flushed)
    logics_snapshot = progress.get(Slot.LOGICS_TIMESTAMP)
    queues_flushed, _ = _flush_queues(store, state, now)
    _write_checkpoint(store, state, progress, logics_snapshot, flushed)
    return StepResult(
        "flush",
        progressed=False,
        detail={
            "commitlog_flushed": commitlog_flushed,
            "consume_queues_flushed": queues_flushed,
            "flushed_offset": flushed,
            "max_offset": end,
        },
    )


def _commitlog_flushable(store: MessageStore, flushed: int, end: int, least_pages: int) -> bool:
    """Spec 6.2's rule on published offsets: a full file, enough dirty pages, or any."""
    if end <= flushed:
        return False
    size = store.config.commitlog_file_size
    if end >= flushed - flushed % size + size:
        return True  # the file holding ``flushed`` is full
    if least_pages == 0:
        return True
    return end // FLUSH_PAGE_BYTES - flushed // FLUSH_PAGE_BYTES >= least_pages


def _fdatasync_range(store: MessageStore, start: int, end: int) -> None:
    size = store.config.commitlog_file_size
    directory = store.commit_log.segments.directory
    base = start - start % size
    while base < end:
        try:
            fd = os.open(directory / f"{base:020d}", os.O_RDONLY)
        except FileNotFoundError:
            base += size  # cleaned up meanwhile: nothing left to keep durable
            continue
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        base += size


def _write_checkpoint(
    store: MessageStore, state: FlushState, progress: Progress, logics: int, flushed: int
) -> None:
    """The worker owns the checkpoint in Celery mode. physicMsgTimestamp is the store time of
    the last record flushed: known exactly when reput has dispatched no further than the
    flush reached, else the previous value stays (older is safe: recovery starts earlier)."""
    checkpoint = store.checkpoint
    if progress.get(Slot.REPUT_OFFSET) <= flushed and logics:
        checkpoint.physic_msg_timestamp = logics
    checkpoint.logics_msg_timestamp = max(checkpoint.logics_msg_timestamp, logics)
    checkpoint.index_msg_timestamp = progress.get(Slot.INDEX_TIMESTAMP)
    _flush_checkpoint(store, state)
