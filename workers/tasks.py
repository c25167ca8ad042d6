"""Celery tasks: thin wrappers that open the store and call mqcore's service steps.

Every task takes only a store path (default: ``CAIRN_STORE_DIR``), never a store object, and
acknowledges late: the steps are idempotent, so a task whose worker died is simply run again
(``reject_on_worker_lost`` re-queues it at once; beat schedules the next run anyway).
A run that cannot take its service's lock returns ``status: skipped`` (STYLE 7).

* ``cairn.reput``: long-lived. Holds the reput lock for ``CAIRN_REPUT_LEASE_S`` (30 s),
  dispatching as messages arrive (1 ms polls while busy), then queues its successor and
  ends, so that a warm shutdown never waits long. Beat sends one every 5 s; while one runs,
  those return ``skipped`` at once, and if the running one died, the next takes over.
* ``cairn.flush``: one pass, every ``CAIRN_FLUSH_INTERVAL_MS`` (500 ms).
* ``cairn.cleanup``: one pass, every ``CAIRN_CLEAN_INTERVAL_MS`` (10 s). What consumers still
  need comes from the persisted ``consumerOffset.json``/``delayOffset.json``; deletions are
  journaled in the store for the broker to move into its audit log (``deletions.py``).
* ``cairn.index_build``: the rebuild service (``mqcore.services.rebuild``): starts
  (``start=True``) or continues a side build of the index, and the rebuild of damaged
  ConsumeQueues and index the reput holder's start check asked for (the reput task sends
  one at once when its attach found damage), for up to 30 s, then queues its successor
  while there is work left; beat resumes a build left behind by a dead worker. Hands the
  build to the Spark pipeline when it is installed and the
  store is at least ``CAIRN_INDEX_SPARK_MIN_BYTES``.
* ``cairn.tiered_upload`` / ``cairn.tiered_retention``: with ``CAIRN_TIERED_BACKEND`` set
  (``posix``), one upload pass of the tier dispatcher every few seconds and one tier
  retention pass every hour (:mod:`mqcore.services.tiered`). Each holds
  ``<store>/locks/tiered`` for the run (``skipped`` while another run or an inline broker
  holds it); with tiered storage off they return ``skipped``.
* ``cairn.status``: every service's recorded status (for ``celery call``).
* ``cairn.pipeline_archive`` / ``cairn.pipeline_stats``: the data pipeline's incremental
  archive (into ``CAIRN_ARCHIVE_DIR``) and statistics (into ``$CAIRN_DATA_DIR/pipeline``) on
  Spark (``CAIRN_SPARK_MASTER``), every ``CAIRN_ARCHIVE_INTERVAL_S`` (3600 s) and
  ``CAIRN_STATS_INTERVAL_S`` (300 s). Each takes ``<store>/locks/pipeline-<job>`` for the
  run, so two runs never overlap (the second returns ``status: skipped``); the result is
  the job's report as a dict with ``status: ok``.

Errors: a step's exception is recorded in the service's status file and re-raised (Celery
logs it with its traceback); only Redis hiccups while publishing events are swallowed.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import time
from pathlib import Path
from typing import Any

from celery.worker import state as worker_state

from mqcore.clock import SystemClock
from mqcore.metadata.topics import TopicConfigManager
from mqcore.services import (
    cleanup,
    consumed,
    deletions,
    flush,
    index_build,
    locks,
    rebuild,
    reput,
    status,
    tiered,
)
from mqcore.services.cleanup import CleanupState
from mqcore.services.flush import FlushState
from mqcore.services.index_build import IndexBuilder
from mqcore.services.result import StepResult
from mqcore.services.runner import run_lease
from mqcore.store.files.service_lock import ServiceLock
from mqcore.store.store import MessageStore
from mqcore.tiered.config import tiered_config_from_env
from mqcore.tiered.storage import TieredStorage, make_backend
from workers import settings, stores
from workers.app import app
from workers.events import Publisher

log = logging.getLogger(__name__)

CLOCK = SystemClock()
#: An idle reput waits at most this long before looking at the CommitLog end again.
REPUT_MAX_IDLE_S = 0.01
INDEX_TASK_BUDGET_S = 30.0

_flush_states: dict[str, FlushState] = {}
_cleanup_states: dict[str, CleanupState] = {}
_publishers: dict[str, Publisher] = {}
#: The tier writer of each store, with the metadata file's (mtime, size) after its last run:
#: another process having saved since means our buffered state is stale (rebuilt).
_tiers: dict[str, tuple[TieredStorage, tuple[int, int]]] = {}


def _stopping() -> bool:
    """The worker was asked to shut down (visible to the thread and solo pools)."""
    return bool(worker_state.should_stop or worker_state.should_terminate)


def _publisher(store: MessageStore) -> Publisher:
    key = str(store.root)
    publisher = _publishers.get(key)
    if publisher is None:
        publisher = _publishers[key] = Publisher(settings.redis_url(), store.root)
    return publisher


def _run_recorded(store: MessageStore, service: str, fn: Any) -> dict[str, Any]:
    """Run one step, record it in the service's status file, return it as a dict."""
    try:
        result: StepResult = fn()
    except Exception as exc:
        status.record(store.root, service, CLOCK.now_ms(), error=f"{type(exc).__name__}: {exc}")
        raise
    status.record(store.root, service, CLOCK.now_ms(), result=result)
    return result.as_dict()


@app.task(name="cairn.reput", bind=True, acks_late=True, reject_on_worker_lost=True)
def reput_task(self: Any, store_dir: str | None = None) -> dict[str, Any]:
    """Hold reput for one lease, then queue the successor (see the module docstring)."""
    cfg = settings.services()
    store = stores.open_store(store_dir, "reput")
    publisher = _publisher(store)
    last_recorded = [0.0]
    unrecorded_runs = [0]
    rebuild_kicked = [False]

    def on_result(result: StepResult) -> None:
        unrecorded_runs[0] += 1
        if not rebuild_kicked[0] and (store.rebuilding_queues or store.index_damage):
            # The attach's start check found damage: start the rebuild now, not at the next
            # beat (a second task only returns "skipped" while one runs).
            rebuild_kicked[0] = True
            index_build_task.apply_async(kwargs={"store_dir": store_dir})
        if result.detail.get("dispatched") or result.detail.get("index_installed"):
            publisher.publish("reput", reput_offset=store.reput_offset)
        now = time.monotonic()
        if result.status != "skipped" and now - last_recorded[0] >= cfg.status_interval_ms / 1000:
            status.record(
                store.root, "reput", CLOCK.now_ms(), result=result, runs=unrecorded_runs[0]
            )
            last_recorded[0], unrecorded_runs[0] = now, 0

    with locks.runner_slot(store, "reput") as free:
        if not free:
            return locks.skipped(store, "reput").as_dict()
        try:
            last = run_lease(
                lambda: reput.step(store, max_bytes=cfg.reput_max_bytes),
                duration_s=cfg.reput_lease_s,
                poll_s=cfg.reput_poll_ms / 1000,
                max_idle_s=REPUT_MAX_IDLE_S,
                should_stop=_stopping,
                on_result=on_result,
            )
        except Exception as exc:
            status.record(store.root, "reput", CLOCK.now_ms(), error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            reput.release(store)
    if last is None:
        return {"service": "reput", "progressed": False, "status": "ok", "detail": {}}
    if last.status != "skipped" and not _stopping():
        reput_task.apply_async(kwargs={"store_dir": store_dir})  # the successor
    return last.as_dict()


@app.task(name="cairn.flush", acks_late=True, reject_on_worker_lost=True)
def flush_task(store_dir: str | None = None) -> dict[str, Any]:
    """One flush pass (spec 6.2, 6.3) and the checkpoint."""
    store = stores.open_store(store_dir, "flush")
    state = _flush_states.setdefault(str(store.root), FlushState())
    return _run_recorded(store, "flush", lambda: flush.step(store, state, CLOCK))


@app.task(name="cairn.cleanup", acks_late=True, reject_on_worker_lost=True)
def cleanup_task(store_dir: str | None = None, manual: bool = False) -> dict[str, Any]:
    """One cleanup run (spec 6.4, 6.5). ``manual``: delete expired files whatever the hour."""
    cfg = settings.services()
    store = stores.open_store(store_dir, "cleanup")
    state = _cleanup_states.setdefault(str(store.root), CleanupState())
    if manual:
        cleanup.request_manual_delete(state)
    result = _run_recorded(
        store,
        "cleanup",
        lambda: cleanup.step(
            store,
            state,
            CLOCK,
            first_delay_ms=cfg.clean_first_delay_ms,
            needed=consumed.from_config_dir(store, store.root / "config", CLOCK),
            on_delete=deletions.journal_hook(store.root),
        ),
    )
    detail = result["detail"]
    if detail.get("deleted_commit_log_files") or detail.get("deleted_queue_files"):
        _publisher(store).publish("cleanup", min_offset=detail.get("commit_log_min_offset"))
    elif "disk_full" in detail:
        _publisher(store).publish("disk", disk_full=detail["disk_full"])
    return result


def spark_index_builder(store: MessageStore) -> IndexBuilder | None:
    """The pipeline's index builder, when ``pipeline`` is installed and the store is big
    enough to be worth a Spark job (CAIRN_INDEX_SPARK_MIN_BYTES). The seam: the pipeline
    package provides ``pipeline.index_build.build_index_files(request) -> int``
    (``mqcore.services.index_build.BuildRequest``)."""
    size = store.commit_log.max_offset - store.commit_log.min_offset
    if size < settings.services().index_spark_min_bytes:
        return None
    if importlib.util.find_spec("pipeline") is None:
        return None
    try:
        module = importlib.import_module("pipeline.index_build")
    except ImportError:
        log.warning("pipeline is installed but has no index_build module; indexing here")
        return None
    builder = getattr(module, "build_index_files", None)
    return builder if callable(builder) else None


@app.task(name="cairn.index_build", bind=True, acks_late=True, reject_on_worker_lost=True)
def index_build_task(
    self: Any, store_dir: str | None = None, start: bool = False, from_offset: int | None = None
) -> dict[str, Any]:
    """Start or continue a side build of the index; the reput holder installs it when ready."""
    cfg = settings.services()
    store = stores.open_store(store_dir, "index")
    if start:
        index_build.start(store, CLOCK, from_offset=from_offset)
    builder = spark_index_builder(store)
    deadline = time.monotonic() + INDEX_TASK_BUDGET_S
    result: dict[str, Any] = {}
    while time.monotonic() < deadline and not _stopping():
        result = _run_recorded(
            store,
            "index",
            lambda: rebuild.step(store, CLOCK, max_bytes=cfg.index_step_bytes, builder=builder),
        )
        if not result["progressed"]:
            break
    else:
        if not _stopping():
            index_build_task.apply_async(kwargs={"store_dir": store_dir})
    return result


def _tier_path() -> Path:
    raw = os.environ.get("CAIRN_TIERED_PATH", "").strip()
    return Path(raw).resolve() if raw else settings.data_dir() / "tiered"


def _metadata_stamp(tier: TieredStorage) -> tuple[int, int]:
    try:
        st = tier.metadata.path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def _tier(store: MessageStore) -> TieredStorage | None:
    """This process's tier writer for ``store`` (None when tiered storage is off). The
    caller holds ``<store>/locks/tiered``."""
    kind = os.environ.get("CAIRN_TIERED_BACKEND", "").strip().lower() or "none"
    if kind == "memory":
        raise ValueError("CAIRN_TIERED_BACKEND=memory cannot be used by Celery workers")
    key = str(store.root)
    cached = _tiers.get(key)
    if cached is not None and _metadata_stamp(cached[0]) == cached[1]:
        return cached[0]
    cfg = store.config
    backend = make_backend(kind, _tier_path(), cfg.cluster_name, cfg.broker_name, os.environ)
    if backend is None:
        return None
    tier = TieredStorage(backend, store.root, tiered_config_from_env(os.environ), clock=CLOCK)
    _tiers[key] = (tier, _metadata_stamp(tier))
    return tier


def _run_tiered(store_dir: str | None, service: str, run: Any) -> dict[str, Any]:
    store = stores.open_store(store_dir, service)
    lock = ServiceLock(store.root, tiered.LOCK_NAME)
    if not lock.try_acquire():
        reason = f"lock held by {lock.holder() or 'another runner'}"
        return {"service": service, "progressed": False, "status": "skipped", "reason": reason}
    try:
        tier = _tier(store)
        if tier is None:
            return {"service": service, "progressed": False, "status": "skipped", "reason": "off"}
        store.follow_others()
        result = _run_recorded(store, service, lambda: run(store, tier))
        _tiers[str(store.root)] = (tier, _metadata_stamp(tier))
        return result
    finally:
        lock.release()


@app.task(name="cairn.tiered_upload", acks_late=True, reject_on_worker_lost=True)
def tiered_upload_task(store_dir: str | None = None, force: bool = False) -> dict[str, Any]:
    """One tier upload pass (``force``: upload what waits whatever the thresholds)."""
    return _run_tiered(
        store_dir, "tiered_upload", lambda store, tier: tiered.upload(store, tier, force=force)
    )


@app.task(name="cairn.tiered_retention", acks_late=True, reject_on_worker_lost=True)
def tiered_retention_task(store_dir: str | None = None) -> dict[str, Any]:
    """One tier retention pass; topics' ``reserve.time`` from ``<store>/config/topics.json``."""

    def run(store: MessageStore, tier: TieredStorage) -> StepResult:
        topics = TopicConfigManager(store.root / "config", CLOCK)
        topics.load()
        return tiered.retention(tier, tiered.topic_attributes_of(topics))

    return _run_tiered(store_dir, "tiered_retention", run)


@app.task(name="cairn.status")
def status_task(store_dir: str | None = None) -> dict[str, Any]:
    """Every service's recorded status and the current index build."""
    root = settings.store_dir(store_dir)
    job = index_build.load_job(root)
    return {"services": status.read_all(root), "index_build": job.as_dict() if job else None}


def _pipeline_run(job: str, store_dir: str | None, run: Any) -> dict[str, Any]:
    """Run one pipeline job under ``<store>/locks/pipeline-<job>``; ``skipped`` if held."""
    root = settings.store_dir(store_dir)
    lock = ServiceLock(root, f"pipeline-{job}")
    if not lock.try_acquire():
        return {"status": "skipped", "reason": f"lock held by {lock.holder() or 'another run'}"}
    try:
        report = run(root)
    finally:
        lock.release()
    result: dict[str, Any] = report.as_dict()
    return result | {"status": "ok"}


@app.task(name="cairn.pipeline_archive", acks_late=True, reject_on_worker_lost=True)
def pipeline_archive_task(
    store_dir: str | None = None, out_dir: str | None = None
) -> dict[str, Any]:
    """Archive what is new in the store (``pipeline.jobs.archive.run_archive``)."""
    from pipeline.jobs.archive import ArchiveBusyError, run_archive

    out = Path(out_dir) if out_dir else settings.archive_out_dir()
    try:
        return _pipeline_run("archive", store_dir, lambda root: run_archive(root, out))
    except ArchiveBusyError as exc:  # e.g. `manage.py pipeline archive` into the same dir
        return {"status": "skipped", "reason": str(exc)}


@app.task(name="cairn.pipeline_compact", acks_late=True, reject_on_worker_lost=True)
def pipeline_compact_task(
    store_dir: str | None = None, out_dir: str | None = None
) -> dict[str, Any]:
    """Merge the archive's small files per topic/date (``pipeline.jobs.compact.run_compact``)."""
    from pipeline.jobs.compact import ArchiveBusyError, run_compact

    out = Path(out_dir) if out_dir else settings.archive_out_dir()
    try:
        return _pipeline_run("compact", store_dir, lambda _root: run_compact(out))
    except ArchiveBusyError as exc:  # an archive run (or another compaction) holds the archive
        return {"status": "skipped", "reason": str(exc)}


@app.task(name="cairn.pipeline_stats", acks_late=True, reject_on_worker_lost=True)
def pipeline_stats_task(store_dir: str | None = None, out_dir: str | None = None) -> dict[str, Any]:
    """Recompute the store's statistics (``pipeline.jobs.stats.run_stats``)."""
    from pipeline.jobs.stats import run_stats

    out = Path(out_dir) if out_dir else settings.pipeline_dir()
    return _pipeline_run("stats", store_dir, lambda root: run_stats(root, out))
