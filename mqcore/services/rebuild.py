"""The rebuild service: damaged derived files rebuilt in the background, with progress.

One step (the ``index`` loop of an inline broker, ``cairn.index_build`` on a Celery worker):

1. the ConsumeQueue rebuild the start check asked for (:mod:`mqcore.services.queue_build`);
2. the index side build (:mod:`mqcore.services.index_build`), started here when the start
   check found the index damaged (its request, ``rebuild/index.request``), and any build
   an operator started with ``rebuildindex``;
3. the "rebuild" health condition, with the mean progress of the rebuilds under way, and an
   INFO line for the index every 10%.

The swaps are the reput holder's (``reput.step`` calls both ``apply_ready``).
"""

from __future__ import annotations

import logging
import weakref

from mqcore.clock import Clock
from mqcore.errors import StoreError
from mqcore.services import index_build, locks, queue_build
from mqcore.services.index_build import IndexBuilder
from mqcore.services.result import StepResult
from mqcore.store.recovery import derived_start, rebuild_dir
from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)


def _start_requested_index_rebuild(store: MessageStore, clock: Clock) -> None:
    """Start the side build the start check asked for (``rebuild/index.request``)."""
    if store.readonly or store.role == "broker":
        return
    path = rebuild_dir.rebuild_dir(store.root) / rebuild_dir.INDEX_REQUEST
    request = rebuild_dir.read_json(path)
    if not isinstance(request, dict):
        return
    reason = str(request.get("reason", "damaged"))
    try:
        index_build.start(store, clock, restart=True, reason=reason)
    except StoreError as exc:
        log.warning("index rebuild of %s not started yet: %s", store.root, exc)
        return
    path.unlink(missing_ok=True)
    log.info("index rebuild of %s started: %s", store.root, reason)


def progress_of(store: MessageStore) -> float:
    """Mean progress of the rebuilds under way (1.0 when none)."""
    fractions: list[float] = []
    job = rebuild_dir.load_queue_job(store.root)
    if store.rebuilding_queues and job is not None:
        fractions.append(queue_build.fraction_of(job))
    index_job = index_build.load_job(store.root)
    if store.index_damage and index_job is not None:
        fractions.append(index_job.done_fraction)
    return sum(fractions) / len(fractions) if fractions else 1.0


def step(
    store: MessageStore,
    clock: Clock,
    *,
    max_bytes: int = index_build.DEFAULT_STEP_BYTES,
    builder: IndexBuilder | None = None,
) -> StepResult:
    """One step of each rebuild under way (module docstring)."""
    try:
        derived_start.schedule_pending(store)
        queues = queue_build.step(store, clock, max_bytes=max_bytes)
        _start_requested_index_rebuild(store, clock)
        index = index_build.step(store, clock, max_bytes=max_bytes, builder=builder)
    finally:
        if store.role == "standalone":
            # A standalone store keeps a lock it took (locks.exclusive); these two are given
            # back after each step, so that rebuildindex (or the next open of the store in
            # this process) can take them.
            locks.release(store, queue_build.LOCK)
            locks.release(store, "index")
    job = index.detail.get("job")
    if isinstance(job, dict) and job.get("state") == "ready":
        store.appended.set()  # wakes an inline reput loop, which swaps it in
    if store.rebuilding_queues or store.index_damage:
        fraction = progress_of(store)
        derived_start.show_condition(store, fraction)
        _log_index_progress(store, index)
    return StepResult(
        "index",
        progressed=queues.progressed or index.progressed,
        status="skipped" if "skipped" in (queues.status, index.status) else "ok",
        detail={**index.detail, "queues": queues.detail.get("job")},
    )


_logged_tenths: weakref.WeakKeyDictionary[MessageStore, int] = weakref.WeakKeyDictionary()


def _log_index_progress(store: MessageStore, index: StepResult) -> None:
    job = index.detail.get("job")
    if not store.index_damage or not isinstance(job, dict):
        return
    tenth = int(float(job.get("done_fraction", 0.0)) * 10)
    if tenth > _logged_tenths.get(store, -1):
        _logged_tenths[store] = tenth
        log.info(
            "index rebuild of %s: %d%% (%d records, CommitLog %d of %d)",
            store.root, tenth * 10, job.get("records", 0), job.get("cursor", 0),
            job.get("target_end", 0),
        )  # fmt: skip
