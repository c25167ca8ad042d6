"""Index building: rebuild the IndexFile (and, offline, the ConsumeQueues) from the CommitLog.

For stores whose derived files were lost or corrupted. The CommitLog is the source of truth
and the IndexFile is derived from it by the same dispatch code as live reput (STYLE 4), so a
rebuild is a replay. Every rebuild is built *beside* the live files, under ``<root>/rebuild``,
and installed by the journaled swap of ``mqcore.store.recovery.rebuild_dir``: killed at any moment, a
rebuild leaves the old files or the new ones, never a mix.

* :func:`rebuild_queues` (offline, the store opened ``standalone`` by
  ``manage.py rebuildindex --queues``): every ConsumeQueue and index file is rebuilt from the
  whole CommitLog into ``rebuild/consumequeue`` and ``rebuild/index``, then both are swapped
  in. Its job file (``rebuild/queues.json``, scope ``all``) marks the side files as
  unfinished until the swap.
* The index alone, online or offline: a *side build* that never blocks reput. The start check
  (``mqcore.store.recovery.derived_start``) starts one by itself when it finds the index damaged.

Side build, in three phases, its progress kept in the store (``<root>/rebuild/job.json``)::

    start()        job.json {from_offset, cursor, target_end}; <root>/rebuild/index/ empty
    step() ...     CommitLog [cursor, cursor + index_step_bytes) -> <root>/rebuild/index/
                   (lock ``index``; each step bounded, resumable after a crash)
    when the cursor is within one step of reput: state "ready", progress REBUILD_READY = 1
    apply_ready()  run by the reput holder between two reput passes: re-index the few records
                   reput dispatched since, then swap <root>/rebuild/index in for <root>/index
                   (index files wholly below ``from_offset`` are kept), reload, bump
                   INDEX_GENERATION so that followers (the broker) reload their view.

``from_offset`` rebuilds a range, from that offset to the end: index files hold contiguous
ranges and new entries only go to the newest file, so a rebuild starts at the first index
file that reaches ``from_offset`` and runs to the live end.

Spark hand-off (the seam for ``pipeline/``): :func:`step` accepts a ``builder``. Given one,
the first step hands the whole range ``[from_offset, target_end)`` to it as a
:class:`BuildRequest` and continues from the offset it returns; the remainder and the swap
go as above. The builder writes RocketMQ index files (spec 4) into ``request.index_dir``,
named and ordered as :mod:`mqcore.store.index.index_service` names them, and calls
``request.progress(offset)`` now and then. ``workers.tasks`` passes the pipeline's builder
when the ``pipeline`` package is installed and the store is big.

Crash behaviour: the side directory is scratch; a crash during the build resumes at the
saved cursor (index puts at or below a file's end offset are skipped), and a broker's next
open restarts a build the start check had started. The swap is journaled
(``rebuild/swap.json``): a crash during it is completed by the next open or run.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from mqcore.clock import Clock
from mqcore.errors import StoreError
from mqcore.format.layout import TRANSACTION_TYPE_MASK
from mqcore.format.record import DispatchRequest
from mqcore.services import locks
from mqcore.services.queue_build import pad_to
from mqcore.services.result import StepResult
from mqcore.store import offset_table
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.index.index_service import IndexService
from mqcore.store.recovery import derived_start, rebuild_walk
from mqcore.store.recovery import rebuild_dir as rebuild_dir_files
from mqcore.store.recovery.rebuild_dir import Move
from mqcore.store.sharing.progress import Slot
from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

DEFAULT_STEP_BYTES = 16 * 1024 * 1024
#: Records written per batch by the offline rebuild (reput's column batch).
_COLUMNS_BATCH = 4096

JobState = Literal["building", "ready", "installed", "failed"]


@dataclass
class IndexBuildJob:
    """A side build, as saved in ``<root>/rebuild/job.json``."""

    from_offset: int
    cursor: int
    target_end: int
    state: JobState = "building"
    records: int = 0
    started_ms: int = 0
    updated_ms: int = 0
    handed_off: bool = False
    error: str = ""
    kept_files: list[str] = field(default_factory=list)
    #: Why the start check asked for it (the index was damaged); "" for rebuildindex's.
    reason: str = ""

    @property
    def done_fraction(self) -> float:
        span = self.target_end - self.from_offset
        return 1.0 if span <= 0 else min(1.0, (self.cursor - self.from_offset) / span)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"done_fraction": round(self.done_fraction, 4)}


@dataclass(frozen=True)
class BuildRequest:
    """What a delegated (Spark) builder is asked to do: index ``[from_offset, to_offset)`` of
    the CommitLog under ``store_root`` into fresh index files in ``index_dir``."""

    store_root: str
    index_dir: str
    from_offset: int
    to_offset: int
    commitlog_file_size: int
    hash_slots: int
    max_entries: int
    progress: Callable[[int], None]


class IndexBuilder(Protocol):
    def __call__(self, request: BuildRequest) -> int:
        """Build the files; return the CommitLog offset indexed up to (``to_offset``)."""
        ...


def rebuild_dir(root: str | os.PathLike[str]) -> Path:
    return rebuild_dir_files.rebuild_dir(root)


def load_job(root: str | os.PathLike[str]) -> IndexBuildJob | None:
    """The current or last side build, or None (also for a damaged job file)."""
    raw = rebuild_dir_files.read_json(rebuild_dir(root) / rebuild_dir_files.INDEX_JOB)
    if not isinstance(raw, dict):
        return None
    try:
        return IndexBuildJob(**raw)
    except TypeError:
        log.error("%s: unreadable index build job %r; ignoring it", root, raw)
        return None


def _save_job(root: Path, job: IndexBuildJob) -> None:
    rebuild_dir_files.write_json_atomically(
        rebuild_dir(root) / rebuild_dir_files.INDEX_JOB, asdict(job)
    )


def _log_end(store: MessageStore) -> int:
    """How far the CommitLog may be read for indexing (the reput bound)."""
    if store.role == "services":
        store.follower.follow_commit_log()
        return store.follower.confirm_offset()
    return store.commit_log.confirm_offset


def _reput_position(store: MessageStore) -> int:
    progress = store.progress
    if store.role == "standalone" or progress is None:
        return store.reput_offset
    return progress.get(Slot.REPUT_OFFSET)


def start(
    store: MessageStore,
    clock: Clock,
    *,
    from_offset: int | None = None,
    restart: bool = False,
    reason: str = "",
) -> IndexBuildJob:
    """Begin a side build of the index from ``from_offset`` (default: the whole CommitLog).
    ``restart``: discard a build that is under way (the start check's, after a restart)
    instead of refusing. ``reason``: why the index is rebuilt (the start check's finding,
    reported as a problem once the build is installed).

    Raises:
        StoreError: another build holds the ``index`` lock, or a build is running.
    """
    with locks.exclusive(store, "index") as held:
        if not held:
            raise StoreError(f"an index build is running ({locks.holder(store, 'index')})")
        current = load_job(store.root)
        if current is not None and current.state in ("building", "ready") and not restart:
            raise StoreError(f"an index build is already {current.state}: {current.as_dict()}")
        directory = rebuild_dir(store.root)
        shutil.rmtree(directory / "index", ignore_errors=True)
        (directory / "index").mkdir(parents=True)
        # Index files cover contiguous ranges: keep those wholly below ``from_offset`` and
        # rebuild from the record after the last one they hold (else from the log's start).
        begin = store.commit_log.min_offset
        kept: list[str] = []
        if store.follows_derived_files:
            store.follower.reload_index()
        if from_offset is not None:
            for f in store.index.files:
                if f.index_count <= 1 or f.end_phys_offset >= from_offset:
                    break
                size = store.commit_log.record_size_at(f.end_phys_offset)
                if size is None:
                    break  # its last record was cleaned up: rebuild from the log's start
                kept.append(f.name)
                begin = max(begin, f.end_phys_offset + size)
            if not kept:
                begin = store.commit_log.min_offset
        now = clock.now_ms()
        job = IndexBuildJob(
            begin,
            begin,
            _log_end(store),
            started_ms=now,
            updated_ms=now,
            kept_files=kept,
            reason=reason,
        )
        _save_job(store.root, job)
        if store.progress is not None:
            store.progress.set(Slot.REBUILD_READY, 0)
        log.info("index build started for %s: from %d to %d", store.root, begin, job.target_end)
        return job


def _side_index(store: MessageStore) -> IndexService:
    side = store.views.new_index(readonly=False, root=rebuild_dir(store.root))
    side.load(True, 0)
    return side


def _index_range(
    store: MessageStore, side: IndexService, start_at: int, end: int, max_bytes: int
) -> tuple[int, int]:
    """Index ``[start_at, end)`` (about ``max_bytes``) into ``side``, corrupt records
    quarantined and walked past (``rebuild_walk.py``). Returns (reached, records).

    Raises:
        StoreError: the CommitLog cannot be walked to ``end``.
    """
    records = 0
    reached = start_at
    if not store.config.message_index_enable:
        return end, 0
    walk = rebuild_walk.requests(store.commit_log, start_at, end, max_bytes, store.delay_levels_ms)
    for item in walk:
        if isinstance(item, int):
            reached = item
            break
        _put(side, item)
        records += 1
    return reached, records


def _put(side: IndexService, r: DispatchRequest) -> None:
    side.build_index(
        r.topic,
        r.phys_offset,
        r.store_timestamp,
        r.uniq_key,
        r.keys,
        r.sys_flag & TRANSACTION_TYPE_MASK,
    )


def step(
    store: MessageStore,
    clock: Clock,
    *,
    max_bytes: int = DEFAULT_STEP_BYTES,
    builder: IndexBuilder | None = None,
) -> StepResult:
    """Advance the side build by at most ``max_bytes`` of CommitLog (or hand it to
    ``builder``). Idle when there is no build. Takes the ``index`` lock for the step."""
    job = load_job(store.root)
    if job is None or job.state != "building" or store.readonly or store.role == "broker":
        return StepResult("index", False, detail={"job": job.as_dict() if job else None})
    with locks.exclusive(store, "index") as held:
        if not held:
            return locks.skipped(store, "index")
        try:
            return _advance(store, clock, job, max_bytes, builder)
        except Exception as exc:
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
            _save_job(store.root, job)
            raise


def _advance(
    store: MessageStore,
    clock: Clock,
    job: IndexBuildJob,
    max_bytes: int,
    builder: IndexBuilder | None,
) -> StepResult:
    end = _log_end(store)
    records = 0
    if builder is not None and not job.handed_off:
        job.handed_off = True

        def report(offset: int) -> None:
            job.cursor, job.updated_ms = offset, clock.now_ms()
            _save_job(store.root, job)

        request = BuildRequest(
            str(store.root),
            str(rebuild_dir(store.root) / "index"),
            job.cursor,
            job.target_end,
            store.config.commitlog_file_size,
            store.config.index_hash_slots,
            store.config.index_max_entries,
            report,
        )
        job.cursor = builder(request)
    else:
        side = _side_index(store)
        try:
            job.cursor, records = _index_range(store, side, job.cursor, end, max_bytes)
        finally:
            side.close()
    job.records += records
    job.updated_ms = clock.now_ms()
    ready = job.cursor >= min(end, _reput_position(store)) - max_bytes
    if ready:
        job.state = "ready"
    _save_job(store.root, job)
    if ready and store.progress is not None:
        store.progress.set(Slot.REBUILD_CURSOR, job.cursor)
        store.progress.set(Slot.REBUILD_READY, 1)
    return StepResult("index", progressed=not ready, detail={"job": job.as_dict()})


def apply_ready(store: MessageStore) -> bool:
    """Install a side build that is ready; the reput holder calls it between two passes.

    Returns:
        Whether an index was installed.

    Raises:
        StoreError: a kept index file's name collides with a rebuilt one.
    """
    progress = store.progress
    if progress is None or not progress.get(Slot.REBUILD_READY):
        return False
    job = load_job(store.root)
    if job is None or job.state != "ready":
        progress.set(Slot.REBUILD_READY, 0)
        return False
    with store.dispatch_paused():
        side = _side_index(store)
        try:
            reached, records = _index_range(store, side, job.cursor, store.reput_offset, 1 << 62)
        finally:
            side.close()
        job.cursor, job.records = reached, job.records + records
        if reached < store.reput_offset:  # never short: the next pass tries again
            _save_job(store.root, job)
            return False
        _swap(store, job)
    job.state = "installed"
    _save_job(store.root, job)
    progress.set(Slot.REBUILD_READY, 0)
    progress.increment(Slot.INDEX_GENERATION)
    log.info(
        "rebuilt index installed in %s: %d records from %d",
        store.root,
        job.records,
        job.from_offset,
    )
    return True


def _swap(store: MessageStore, job: IndexBuildJob) -> None:
    """Install ``rebuild/index`` over ``index``, keeping the files wholly below the rebuilt
    range, through the journaled swap (``rebuild_dir.swap_in``: a crash completes it at the
    next open). Reput is paused."""
    store.index.flush()
    side = rebuild_dir(store.root) / "index"
    for name in job.kept_files:
        if (side / name).exists():
            raise StoreError(f"kept index file {name} collides with a rebuilt one")
    rebuild_dir_files.sync_tree(side)
    rebuild_dir_files.swap_in(
        store.root,
        [Move(f"{rebuild_dir_files.DIRECTORY}/index", "index", list(job.kept_files))],
    )
    index = store.views.new_index(readonly=False)
    index.load(True, 0)
    store.views.replace(index=index)  # queries running on it finish on the unlinked files
    files = index.files
    filled = files[-2].end_timestamp if len(files) >= 2 else 0
    store.checkpoint.index_msg_timestamp = filled
    if store.progress is not None:
        store.progress.set(Slot.INDEX_TIMESTAMP, filled)
    if job.reason:
        _report_rebuilt(store, job)


def _report_rebuilt(store: MessageStore, job: IndexBuildJob) -> None:
    """The start check found the index damaged; it is rebuilt now: say so, lift the state."""
    store.health.report(
        "derived_rebuilt",
        f"derived_rebuilt:index:{job.started_ms}",
        "the index was damaged and has been rebuilt from the CommitLog",
        {"reason": job.reason, "records": job.records, "from": job.from_offset},
    )
    log.info("index of %s rebuilt (it was damaged: %s)", store.root, job.reason)
    store.index_damage = ""
    derived_start.show_condition(store, 1.0)


def rebuild(
    store: MessageStore,
    clock: Clock,
    *,
    from_offset: int | None = None,
    max_bytes: int = DEFAULT_STEP_BYTES,
    builder: IndexBuilder | None = None,
    on_progress: Callable[[IndexBuildJob], None] | None = None,
) -> IndexBuildJob:
    """Run a whole side build in this process: start, steps until ready, and the swap when
    this store is the reput holder (standalone); otherwise the reput holder installs it.

    Raises:
        StoreError: see :func:`start`; or the store is read-only.
    """
    if store.readonly or store.role == "broker":
        raise StoreError("an index build needs a standalone store or a worker's (services) store")
    job = start(store, clock, from_offset=from_offset)
    while job.state == "building":
        result = step(store, clock, max_bytes=max_bytes, builder=builder)
        if result.status == "skipped":
            raise StoreError(f"index build lost its lock: {result.detail}")
        job = load_job(store.root) or job
        if on_progress is not None:
            on_progress(job)
    if store.role == "standalone" and apply_ready(store):
        job = load_job(store.root) or job
        if on_progress is not None:
            on_progress(job)
    return job


def rebuild_queues(
    store: MessageStore,
    *,
    on_progress: Callable[[int, int], None] | None = None,
    max_bytes: int = DEFAULT_STEP_BYTES,
) -> int:
    """Offline: rebuild every ConsumeQueue and index file from the whole CommitLog.

    Built beside the live files (``rebuild/consumequeue``, ``rebuild/index``) by the same
    dispatch as reput, then swapped in by the journaled swap (``rebuild_dir.swap_in``).
    Killed before the journal is written, the live files are untouched and the next open
    discards the side files; after, the next open completes the swap. ``on_progress(done_bytes,
    total_bytes)`` is called after each pass.

    Returns:
        Records dispatched.

    Raises:
        StoreError: the store is not open standalone (a broker or worker may be using it).
    """
    if store.role != "standalone" or store.readonly:
        raise StoreError("rebuilding the ConsumeQueues needs the store to itself: stop the broker")
    side_dir = rebuild_dir(store.root)
    rebuild_dir_files.save_queue_job(
        store.root,
        {"state": "building", "scope": "all", "queues": [], "started_ms": store.clock.now_ms()},
    )
    for name in (rebuild_dir_files.SIDE_QUEUES, rebuild_dir_files.SIDE_INDEX):
        shutil.rmtree(side_dir / name, ignore_errors=True)
    live_queues, live_index = store.queues, store.index
    with store.dispatch_paused():
        store.queues = ConsumeQueueStore(
            side_dir,
            file_size_bytes=store.config.consume_queue_file_size,
            clock=store.clock,
        )
        store.index = store.views.new_index(readonly=False, root=side_dir)
        store.index.load(True, 0)
        live_reput, store.reput_offset = store.reput_offset, store.commit_log.min_offset
    try:
        total = _dispatch_all(store, on_progress, max_bytes)
        side_queues, side_index = store.queues, store.index
        while side_queues.flush_all(0):
            pass
        side_queues.close()
        side_index.close()
    except BaseException:
        store.queues.close()
        store.index.close()
        store.queues, store.index, store.reput_offset = live_queues, live_index, live_reput
        raise
    rebuild_dir_files.sync_tree(side_dir)
    live_queues.close()
    live_index.close()
    rebuild_dir_files.swap_in(
        store.root,
        [
            Move(f"{rebuild_dir_files.DIRECTORY}/{rebuild_dir_files.SIDE_QUEUES}", "consumequeue"),
            Move(f"{rebuild_dir_files.DIRECTORY}/{rebuild_dir_files.SIDE_INDEX}", "index"),
        ],
    )
    _reload_rebuilt(store)
    return total


def _dispatch_all(
    store: MessageStore, on_progress: Callable[[int, int], None] | None, max_bytes: int
) -> int:
    """Reput's dispatch of the whole log into the side files, by the rebuilds' strict walk
    (``rebuild_walk.py``: a corrupt record in an old segment is quarantined and walked past,
    never skipped by a size it may have had flipped).

    Raises:
        StoreError: the log cannot be walked to its end (nothing is swapped in).
    """
    begin, end = store.commit_log.min_offset, store.commit_log.confirm_offset
    total = 0
    while store.reput_offset < end:
        columns, reached = rebuild_walk.columns(
            store.commit_log, store.reput_offset, end, max_bytes, store.delay_levels_ms
        )
        for at in range(0, len(columns), _COLUMNS_BATCH):
            store.dispatch.write_columns(columns.slice(at, at + _COLUMNS_BATCH))
        total += len(columns)
        if reached == store.reput_offset:
            raise StoreError(f"the CommitLog at {reached} cannot be read (the log changed?)")
        store.reput_offset = reached
        if on_progress is not None:
            on_progress(store.reput_offset - begin, end - begin)
    return total


def _reload_rebuilt(store: MessageStore) -> None:
    """After the offline swap: load the new files, keep every next queue offset, forget the
    damage, write the checkpoint and the offset snapshot."""
    queues = store.views.new_queues(readonly=False)
    queues.load()
    queues.recover_all()
    queues.on_topic_deleted = lambda topic: offset_table.forget_topic(store, topic)
    index = store.views.new_index(readonly=False)
    index.load(True, 0)
    store.queues, store.index = queues, index
    table = store.commit_log.queue_offsets
    for topic in queues.topics():
        for queue_id, queue in queues.queues(topic).items():
            table[(topic, queue_id)] = max(table.get((topic, queue_id), 0), queue.max_offset)
    for (topic, queue_id), next_offset in table.items():
        found = queues.get(topic, queue_id)
        if found is not None and found.max_offset < next_offset:
            pad_to(found, next_offset)
    queues.clean_expired(store.commit_log.min_offset)
    store.rebuilding_queues, store.index_damage = {}, ""
    for name in (
        rebuild_dir_files.QUEUES_JOB,
        rebuild_dir_files.INDEX_JOB,
        rebuild_dir_files.INDEX_REQUEST,
    ):
        (rebuild_dir(store.root) / name).unlink(missing_ok=True)
    rebuild_dir_files.empty_trash(store.root)
    files = index.files
    store.checkpoint.index_msg_timestamp = files[-2].end_timestamp if len(files) >= 2 else 0
    store.checkpoint.flush()
    offset_table.save_snapshot(store)
    derived_start.show_condition(store, 1.0)
