"""Reput: dispatch new CommitLog records to the ConsumeQueues and the IndexFile (spec 6.1).

The step is idempotent: ConsumeQueue and index writes skip what they already hold, so a
runner that dies between the CommitLog and the ConsumeQueue loses and duplicates nothing.

Who runs it (``locks.py``): a standalone store (``CAIRN_SERVICES=inline``) on its own thread;
in Celery mode the one worker holding ``<root>/locks/reput``. The first step of a worker
takes the lock and *attaches* (recovers the derived files against the CommitLog end the
broker published, ``mqcore.store.sharing.reput_holder``), then keeps the lock until :func:`release`.
A rebuilt index or rebuilt ConsumeQueues waiting for their swap (``index_build``,
``queue_build``) are installed here, by the one process that writes the derived files.

Full disk: a ConsumeQueue or IndexFile that cannot get its blocks raises ``DiskFullError``
before anything is written. The step then *pauses*: it logs once, refuses puts (source
``reput``: the CommitLog must not run on ahead of what consumers can see), shows the
health condition ``reput-paused`` and returns without progress, so its runner tries again a
second later; the first step that dispatches again lifts both. Nothing is lost or skipped:
the records are dispatched from where it stopped (the writes skip what they hold already).
A start check of the derived files that a full disk at start held back
(``derived_start.settle``) runs in the step that reaches the recovered end.
In a Celery worker only the pause and the log apply; the broker refuses puts through its
own disk guard, which sees the same full partition.
"""

from __future__ import annotations

import logging
import weakref

from mqcore.errors import DiskFullError
from mqcore.services import index_build, locks, queue_build
from mqcore.services.result import StepResult
from mqcore.store.recovery import derived_start
from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
#: The health condition shown while reput is paused for lack of space.
PAUSED_CONDITION = "reput-paused"
#: Stores whose reput is paused (checked once per step: a set lookup).
_paused: weakref.WeakSet[MessageStore] = weakref.WeakSet()


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
    try:
        installed = index_build.apply_ready(store)
        installed = queue_build.apply_ready(store) or installed
        dispatched = store.reput_once(max_bytes)
    except DiskFullError as exc:
        return _pause(store, exc)
    if store in _paused or (not store.writable and "reput" in store.refusal_sources):
        _resume(store)  # after a pause, or after recovery stopped dispatching for lack of space
    derived_start.check_when_dispatched(store)  # a start check a full disk held back
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


def _pause(store: MessageStore, exc: DiskFullError) -> StepResult:
    """Reput found no space for a derived file: refuse puts, show it, try again later."""
    reason = f"disk full: reput paused at CommitLog offset {store.reput_offset} ({exc})"
    if store in _paused:
        log.debug("%s", reason)
    else:
        _paused.add(store)
        log.error("%s; it resumes by itself once space is freed", reason)
    store.health.set_condition(
        "disk_full",
        PAUSED_CONDITION,
        "reput paused: no space for ConsumeQueue/index files; new messages wait",
        {"reput_offset": store.reput_offset, "error": str(exc)},
    )
    store.set_writable(False, reason, source="reput")
    return StepResult(
        "reput",
        progressed=False,
        detail={"paused": reason, "reput_offset": store.reput_offset},
    )


def _resume(store: MessageStore) -> None:
    _paused.discard(store)
    store.health.clear_condition(PAUSED_CONDITION)
    store.set_writable(True, "", source="reput")
    log.warning("reput resumed at CommitLog offset %d: space is back", store.reput_offset)
