"""Index building: rebuild the IndexFile (and, offline, the ConsumeQueues) from the CommitLog.

For stores whose derived files were lost or corrupted. The CommitLog is the source of truth
and the IndexFile is derived from it by the same dispatch code as live reput (STYLE 4), so a
rebuild is a replay. Two ways:

* :func:`rebuild_queues` (offline, the store opened ``standalone`` by
  ``manage.py rebuildindex --queues``): destroy every ConsumeQueue and index file and
  re-dispatch the whole CommitLog.
* The index alone, online or offline: a *side build* that never blocks reput.

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
named and ordered as :mod:`mqcore.store.index_service` names them, and calls
``request.progress(offset)`` now and then. ``workers.tasks`` passes the pipeline's builder
when the ``pipeline`` package is installed and the store is big.

Crash behaviour: the side directory is scratch; a crash during the build resumes at the
saved cursor (index puts at or below a file's end offset are skipped). The swap is two
directory renames; a crash between them leaves ``<root>/rebuild/index.old``, which the next
:func:`start` removes, and no ``<root>/index``, which the broker's recovery treats as an
index lost: the next rebuild (or an abnormal recovery) restores it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from mqcore.clock import Clock
from mqcore.errors import StoreError
from mqcore.services import locks
from mqcore.services.result import StepResult
from mqcore.store import roles
from mqcore.store.format import DispatchRequest
from mqcore.store.index_service import IndexService
from mqcore.store.mapped_file import fsync_directory
from mqcore.store.progress import Slot
from mqcore.store.record_layout import TRANSACTION_TYPE_MASK
from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

DEFAULT_STEP_BYTES = 16 * 1024 * 1024

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
    return Path(root) / "rebuild"


def load_job(root: str | os.PathLike[str]) -> IndexBuildJob | None:
    """The current or last side build, or None."""
    try:
        raw = json.loads((rebuild_dir(root) / "job.json").read_text())
    except FileNotFoundError:
        return None
    return IndexBuildJob(**raw)


def _save_job(root: Path, job: IndexBuildJob) -> None:
    directory = rebuild_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / "job.json.tmp"
    tmp.write_text(json.dumps(asdict(job), indent=2) + "\n")
    os.replace(tmp, directory / "job.json")


def _log_end(store: MessageStore) -> int:
    """How far the CommitLog may be read for indexing (the reput bound)."""
    if store.role == "services":
        roles.follow_commit_log(store)
        return roles.confirm_offset(store)
    return store.commit_log.confirm_offset


def _reput_position(store: MessageStore) -> int:
    progress = store.progress
    if store.role == "standalone" or progress is None:
        return store.reput_offset
    return progress.get(Slot.REPUT_OFFSET)


def start(store: MessageStore, clock: Clock, *, from_offset: int | None = None) -> IndexBuildJob:
    """Begin a side build of the index from ``from_offset`` (default: the whole CommitLog).

    Raises:
        StoreError: another build holds the ``index`` lock, or a build is running.
    """
    with locks.exclusive(store, "index") as held:
        if not held:
            raise StoreError(f"an index build is running ({locks.holder(store, 'index')})")
        current = load_job(store.root)
        if current is not None and current.state in ("building", "ready"):
            raise StoreError(f"an index build is already {current.state}: {current.as_dict()}")
        directory = rebuild_dir(store.root)
        shutil.rmtree(directory, ignore_errors=True)
        (directory / "index").mkdir(parents=True)
        # Index files cover contiguous ranges: keep those wholly below ``from_offset`` and
        # rebuild from the record after the last one they hold (else from the log's start).
        begin = store.commit_log.min_offset
        kept: list[str] = []
        if store.follows_derived_files:
            roles.reload_index(store)
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
            begin, begin, _log_end(store), started_ms=now, updated_ms=now, kept_files=kept
        )
        _save_job(store.root, job)
        if store.progress is not None:
            store.progress.set(Slot.REBUILD_READY, 0)
        log.info("index build started for %s: from %d to %d", store.root, begin, job.target_end)
        return job


def _side_index(store: MessageStore) -> IndexService:
    side = roles.new_index(store, readonly=False, root=rebuild_dir(store.root))
    side.load(True, 0)
    return side


def _index_range(
    store: MessageStore, side: IndexService, start_at: int, end: int, max_bytes: int
) -> tuple[int, int]:
    """Index ``[start_at, end)`` (at most ``max_bytes``) into ``side``. Returns (reached, records)."""
    records = 0
    reached = start_at
    if not store.config.message_index_enable:
        return end, 0
    for item in store.commit_log.iter_dispatch(start_at, end, max_bytes, store.delay_levels_ms):
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
    live = Path(store.index.directory)
    side = rebuild_dir(store.root) / "index"
    old = rebuild_dir(store.root) / "index.old"
    store.index.flush()
    for name in job.kept_files:
        if (side / name).exists():
            raise StoreError(f"kept index file {name} collides with a rebuilt one")
        if (live / name).exists():
            os.replace(live / name, side / name)
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        os.replace(live, old)
    os.replace(side, live)
    fsync_directory(store.root)
    shutil.rmtree(old, ignore_errors=True)
    index = roles.new_index(store, readonly=False)
    index.load(True, 0)
    previous, store.index = store.index, index
    roles.retire(store, previous)  # queries running on it finish on the unlinked files
    files = index.files
    filled = files[-2].end_timestamp if len(files) >= 2 else 0
    store.checkpoint.index_msg_timestamp = filled
    if store.progress is not None:
        store.progress.set(Slot.INDEX_TIMESTAMP, filled)


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
    """Offline: destroy every ConsumeQueue and index file and re-dispatch the whole CommitLog.

    ``on_progress(done_bytes, total_bytes)`` is called after each pass.

    Returns:
        Records dispatched.

    Raises:
        StoreError: the store is not open standalone (a broker or worker may be using it).
    """
    if store.role != "standalone" or store.readonly:
        raise StoreError("rebuilding the ConsumeQueues needs the store to itself: stop the broker")
    with store.dispatch_paused():
        store.queues.destroy()
        store.index.destroy_all()
        store.checkpoint.index_msg_timestamp = 0
        store.reput_offset = store.commit_log.min_offset
    begin, end = store.commit_log.min_offset, store.commit_log.confirm_offset
    total = 0
    while True:
        before = store.reput_offset
        total += store.reput_once(max_bytes)
        if on_progress is not None:
            on_progress(store.reput_offset - begin, end - begin)
        if store.reput_offset == before:
            break
    store.queues.clean_expired(store.commit_log.min_offset)
    store.checkpoint.flush()
    return total
