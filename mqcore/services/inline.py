"""What the broker process runs, per ``CAIRN_SERVICES``, and what it reports about services.

``inline`` (default): the store opens ``standalone`` and every service runs on a
:class:`ServiceLoop` thread in the broker (reput woken by each append, flush, cleanup, the
rebuild of damaged derived files and index builds (``index``: :mod:`mqcore.services.rebuild`),
and the queue offset snapshot every second). ``celery``: the store opens ``broker``, the
workers run the services, and the broker runs the *follow* loop, which catches its view of
the derived files up with the workers' (``follow.py``), and the snapshot loop (the broker
holds the queue offset table); a Redis subscriber (``workers.events``) calls
:meth:`ServiceLoop.wake` on the follow loop when a worker reports progress. Never both for
one store: a standalone store holds the services' locks while it is open.

In both modes the broker also runs the *disk guard* (``disk.guard_step``): every second,
from the start, it refuses or accepts puts by the disk's usage; inline, it wakes the cleanup
loop while the disk is over the warning ratio, so deletion (when allowed) runs every second
then. The cleanup loop is given what consumers still need (``needed``, ``consumed.py``) and
where to record its deletions (``on_delete``, the audit log): both come from the runtime.

The runtime's part (``cairn/runtime.py``)::

    store = MessageStore(root, config, role=inline.store_role(mode))
    store.open()
    loops = inline.build_service_loops(store, services=services_config)
    for loop in loops: loop.start()
    health["services"] = inline.services_status(store, loops)

With tiered storage on (``tier`` given) an inline store also gets ``tiered_upload`` (woken
by :meth:`ServiceLoop.wake`, else every few seconds) and ``tiered_retention`` (hourly),
see :mod:`mqcore.services.tiered`; in Celery mode the workers run them.
"""

from __future__ import annotations

from typing import Any

from mqcore.clock import Clock, SystemClock
from mqcore.services import (
    cleanup,
    disk,
    flush,
    follow,
    index_build,
    rebuild,
    reput,
    status,
    tiered,
)
from mqcore.services.cleanup import CleanupState
from mqcore.services.config import Mode, ServicesConfig
from mqcore.services.consumed import NeededOffset
from mqcore.services.deletions import DeletionHook
from mqcore.services.disk import DiskProbe, usage_ratio
from mqcore.services.flush import FlushState
from mqcore.services.result import StepResult
from mqcore.services.runner import ServiceLoop
from mqcore.store import offset_table
from mqcore.store.sharing.process_role import ProcessRole
from mqcore.store.sharing.progress import Slot
from mqcore.store.store import MessageStore
from mqcore.tiered.retention import TopicAttributes
from mqcore.tiered.storage import TieredStorage


def store_role(mode: Mode | str) -> ProcessRole:
    """The ``MessageStore`` process role for a ``CAIRN_SERVICES`` value.

    Raises:
        ValueError: not ``inline`` or ``celery``.
    """
    if mode == "inline":
        return "standalone"
    if mode == "celery":
        return "broker"
    raise ValueError(f"CAIRN_SERVICES must be inline or celery, got {mode!r}")


def build_service_loops(
    store: MessageStore,
    *,
    services: ServicesConfig | None = None,
    clock: Clock | None = None,
    probe: DiskProbe = usage_ratio,
    tier: TieredStorage | None = None,
    topic_attributes: TopicAttributes | None = None,
    upload_interval_s: float = tiered.UPLOAD_INTERVAL_S,
    needed: NeededOffset | None = None,
    on_delete: DeletionHook | None = None,
) -> list[ServiceLoop]:
    """The service loops the broker process must start for ``store`` (not started yet).

    A ``standalone`` store gets reput, flush, cleanup (with ``needed`` and ``on_delete``),
    index and the disk guard, plus ``tiered_upload`` and ``tiered_retention`` when ``tier``
    is given (``topic_attributes`` supplies each topic's ``reserve.time``); a ``broker``
    store (Celery mode) gets ``follow`` and the disk guard.

    Raises:
        ValueError: the store is read-only or a worker's (services role).
    """
    services = services or ServicesConfig()
    clock = clock or SystemClock()
    cfg = store.config
    if store.role == "broker":
        return [
            ServiceLoop(
                "follow",
                lambda: _follow_step(store, services.reput_max_bytes),
                services.follow_interval_ms / 1000,
            ),
            ServiceLoop(
                "disk_guard", lambda: disk.guard_step(store, probe=probe), disk.GUARD_INTERVAL_S
            ),
            ServiceLoop("snapshot", lambda: snapshot_step(store), SNAPSHOT_INTERVAL_S),
        ]
    if store.role != "standalone" or store.readonly:
        raise ValueError("service loops run in a writable standalone or broker store")
    flush_state = FlushState()
    cleanup_state = CleanupState()
    tier_loops = (
        [
            ServiceLoop("tiered_upload", lambda: tiered.upload(store, tier), upload_interval_s),
            ServiceLoop(
                "tiered_retention",
                lambda: tiered.retention(tier, topic_attributes),
                tiered.RETENTION_INTERVAL_S,
            ),
        ]
        if tier is not None
        else []
    )
    cleanup_loop = ServiceLoop(
        "cleanup",
        lambda: cleanup.step(
            store,
            cleanup_state,
            clock,
            probe=probe,
            first_delay_ms=services.clean_first_delay_ms,
            needed=needed,
            on_delete=on_delete,
        ),
        cfg.clean_resource_interval_ms / 1000,
    )
    return [
        # Reput waits on the store's append event, so 1 s is only a safety net.
        ServiceLoop(
            "reput",
            lambda: reput.step(store, max_bytes=services.reput_max_bytes),
            1.0,
            wake=store.appended,
        ),
        ServiceLoop(
            "flush",
            lambda: flush.step(store, flush_state, clock),
            cfg.flush_interval_commitlog_ms / 1000,
        ),
        cleanup_loop,
        # Damaged ConsumeQueues and index (the start check's), and rebuildindex's builds.
        ServiceLoop(
            "index",
            lambda: rebuild.step(store, clock, max_bytes=services.index_step_bytes),
            1.0,
        ),
        ServiceLoop(
            "disk_guard",
            lambda: disk.guard_step(store, probe=probe, on_full=cleanup_loop.wake),
            disk.GUARD_INTERVAL_S,
        ),
        # The queue offset snapshot (``queue_snapshot.py``), when the table changed.
        ServiceLoop("snapshot", lambda: snapshot_step(store), SNAPSHOT_INTERVAL_S),
        *tier_loops,
    ]


#: How often the CommitLog writer saves the queue offset snapshot (when it changed): the
#: most a start after a crash scans beyond it is what was written in this time.
SNAPSHOT_INTERVAL_S = 1.0


def snapshot_step(store: MessageStore) -> StepResult:
    """Save the queue offset snapshot if the table changed (``offset_table.save_snapshot``)."""
    before = store.queue_snapshot
    offset_table.save_snapshot(store)
    after = store.queue_snapshot
    return StepResult(
        "snapshot",
        progressed=False,
        detail={"log_offset": after.log_offset if after else 0, "written": after != before},
    )


def services_status(store: MessageStore, loops: list[ServiceLoop]) -> dict[str, Any]:
    """Each service's state (last run, errors, last result) and the lags, for REST/console.

    In Celery mode the workers' services come from ``<root>/services/status``; the
    broker's own follow loop from its thread.
    """
    services: dict[str, dict[str, Any]] = {}
    if store.role == "broker":
        services.update(status.read_all(store.root))
    for loop in loops:
        services[loop.name] = loop.state.as_dict()
    commit_log = store.commit_log
    progress = store.progress
    max_offset = commit_log.max_offset
    flushed = commit_log.flushed_offset
    if progress is not None:
        flushed = max(flushed, progress.get(Slot.SERVICES_FLUSHED_OFFSET))
    lags = {
        "reput": store.dispatch_behind_bytes,
        "flush": max(0, max_offset - flushed) if store.config.flush == "async" else 0,
        "follow": max(0, max_offset - store.reput_offset) if store.role == "broker" else 0,
    }
    for name, lag in lags.items():
        if name in services:
            services[name]["lag_bytes"] = lag
    job = index_build.load_job(store.root)
    return {
        "mode": "celery" if store.role == "broker" else "inline",
        "services": services,
        "commit_log": {
            "min_offset": commit_log.min_offset,
            "max_offset": max_offset,
            "flushed_offset": flushed,
            "dispatched_offset": max_offset - store.dispatch_behind_bytes,
        },
        "lag_bytes": lags,
        "writable": store.writable,
        "unwritable_reason": store.unwritable_reason,
        "index_build": job.as_dict() if job is not None else None,
        "progress": progress.snapshot() if progress is not None else None,
    }


def _follow_step(store: MessageStore, max_bytes: int) -> StepResult:
    """The broker's follow step in Celery mode, after flushing what no put waited for under
    sync flush (``flush.flush_unwaited``: the workers cannot, the CommitLog is the broker's)."""
    flush.flush_unwaited(store)
    return follow.step(store, max_bytes=max_bytes)
