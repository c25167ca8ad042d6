"""Reput: dispatch new CommitLog records to the ConsumeQueues and the IndexFile (spec 6.1).

The step is idempotent: ConsumeQueue and index writes skip what they already hold, so a
runner that dies between the CommitLog and the ConsumeQueue loses and duplicates nothing.

Who runs it (``locks.py``): a standalone store (``CAIRN_SERVICES=inline``) on its own thread;
in Celery mode the one worker holding ``<root>/locks/reput``. The first step of a worker
takes the lock and *attaches* (recovers the derived files against the CommitLog end the
broker published, ``mqcore.store.roles.attach``), then keeps the lock until :func:`release`.
A rebuilt index or rebuilt ConsumeQueues waiting for their swap (``index_build``,
``queue_build``) are installed here, by the one process that writes the derived files.
"""

from __future__ import annotations

from mqcore.services import index_build, locks, queue_build
from mqcore.services.result import StepResult
from mqcore.store.store import MessageStore

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


def step(store: MessageStore, *, max_bytes: int = DEFAULT_MAX_BYTES) -> StepResult:
    """Dispatch at most ``max_bytes`` of new CommitLog. Thread-safe (one reput at a time).

    Returns:
        ``skipped`` when another runner holds reput, when the store is a broker whose
        workers run it, or while no broker has published the CommitLog end yet.
    """
    if store.role == "broker" or store.readonly:
        return locks.skipped(store, "reput")
    if store.role == "services" and not (store.attached and locks.holds(store, "reput")):
        store.attached = False  # a lock given up elsewhere means another runner may have it
        if not locks.runs_here(store, "reput"):
            return locks.skipped(store, "reput")
        if not store.attach():
            locks.release(store, "reput")
            return StepResult(
                "reput",
                False,
                status="skipped",
                detail={"reason": "no broker has published the CommitLog end yet"},
            )
    installed = index_build.apply_ready(store)
    installed = queue_build.apply_ready(store) or installed
    dispatched = store.reput_once(max_bytes)
    return StepResult(
        "reput",
        progressed=dispatched > 0 or installed,
        detail={
            "dispatched": dispatched,
            "reput_offset": store.reput_offset,
            "behind_bytes": store.dispatch_behind_bytes,
            "index_installed": installed,
        },
    )


def release(store: MessageStore) -> None:
    """Services role: flush the derived files and give reput up (end of a worker's lease)."""
    if store.role != "services":
        return
    try:
        if store.attached and store.is_open:
            store.detach()
    finally:
        locks.release(store, "reput")
