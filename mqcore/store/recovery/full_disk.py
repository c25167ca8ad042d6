"""What the store does when the disk is full outside the put path: at start, at close, and
in its health.

A full disk must never stop a start or a close, nor lose a record (issue 17). Writes that
find no space fall in three kinds:

* **Derived files** (ConsumeQueue, IndexFile) that recovery dispatches to: the first
  dispatch that finds no space stops recovery's dispatching (:class:`DispatchStall`); the
  store starts, reput takes over from that record once space returns, and puts are refused
  until it has (:func:`pause_dispatch`). The queue offset table counts the records not
  dispatched yet, so a new record never takes a queue offset one of them holds.
* **Small files that only save work** (checkpoint, ``services/store.json``): skipped with a
  warning (:func:`~mqcore.store.files.space.quietly`); the next write or start makes up for them.
* **The ``abort`` marker**, whose absence means "the last run exited cleanly, skip the
  rescan": its existence is the mark, so a file created empty (an inode, no block) will do;
  if even that fails (no inode left), puts are refused (a crash now would lose the rescan)
  until a put's retry writes it (:func:`write_abort`).

While any of these (or the disk guard, or an append) refuses puts for lack of space, the
health shows the condition ``disk-full``: "disk full: puts refused (93% used)"
(:func:`show_condition`).

Crash behaviour: nothing here is persisted; a start on a full disk works it all out again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mqcore.errors import DiskFullError
from mqcore.format.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from mqcore.format.record import DispatchRequest
from mqcore.store.commit_log import CommitLog
from mqcore.store.files import space
from mqcore.store.health import StoreHealth
from mqcore.store.refusals import DISK_SOURCES, Refusals
from mqcore.store.sharing.progress import DISK_FULL, LOGIC_DISK_FULL, Slot

if TYPE_CHECKING:
    from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

#: The health condition's id while puts are refused for lack of space.
CONDITION_ID = "disk-full"

Dispatch = Callable[[DispatchRequest], None]
_QUEUED_TYPES = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


class DispatchStall:
    """Wraps recovery's dispatch callbacks: the first call that finds the disk full records
    where (``at``, a CommitLog offset) and why; it and every later call then do nothing, so
    the start goes on. Reput dispatches from ``at`` once space returns; the writes of
    derived files skip what they hold already, so nothing is dispatched twice."""

    def __init__(self) -> None:
        self.at: int | None = None
        self.reason = ""

    def wrap(self, dispatch: Dispatch) -> Dispatch:
        def call(request: DispatchRequest) -> None:
            if self.at is not None:
                return
            try:
                dispatch(request)
            except DiskFullError as exc:
                self.at, self.reason = request.phys_offset, str(exc)

        return call


def pause_dispatch(store: MessageStore, stall: DispatchStall) -> None:
    """After recovery: if ``stall`` stopped its dispatching, move the store's reput offset
    back to where it stopped, count the undispatched records in the queue offset table and
    refuse puts (source ``reput``, cleared by reput once it dispatches again)."""
    if stall.at is None:
        return
    log.error(
        "store %s: recovery stopped dispatching at CommitLog offset %d: %s; reput resumes "
        "when space returns, puts are refused until then",
        store.root, stall.at, stall.reason,
    )  # fmt: skip
    store.reput_offset = min(store.reput_offset, stall.at)
    count_undispatched(store.commit_log, stall.at)
    store.set_writable(False, f"disk full: reput paused ({stall.reason})", source="reput")


def follow_worker_flag(store: MessageStore) -> None:
    """A broker-role store: refuse puts while the Celery worker's disk check publishes a full
    disk (``progress.py`` DISK_FLAGS), and accept them again once it no longer does."""
    progress = store.progress
    if progress is None:
        return
    if progress.get(Slot.DISK_FLAGS) & (DISK_FULL | LOGIC_DISK_FULL):
        usage = progress.get(Slot.DISK_USAGE_PPM) / 10_000
        store.set_writable(
            False, f"disk full ({usage:.1f}% used): puts refused until cleanup frees space"
        )
    elif store.unwritable_reason.startswith("disk full"):
        store.set_writable(True, "")


def count_undispatched(commit_log: CommitLog, from_offset: int) -> None:
    """Raise ``commit_log.queue_offsets`` past every queue offset held by a record from
    ``from_offset`` to the end of the log (the table was built from the ConsumeQueues,
    which miss those records)."""
    table = commit_log.queue_offsets
    end = commit_log.max_offset
    offset = from_offset
    while offset < end:
        reached = offset
        for item in commit_log.iter_dispatch(offset, end, 1 << 30, commit_log.delay_levels_ms):
            if isinstance(item, int):
                reached = item
            elif item.sys_flag & TRANSACTION_TYPE_MASK in _QUEUED_TYPES:
                key = (item.topic, item.queue_id)
                table[key] = max(table.get(key, 0), item.queue_offset + 1)
        if reached <= offset:  # a record reput cannot pass either: recovery's business
            break
        offset = reached


def flush_checkpoint(store: MessageStore) -> None:
    """Write the checkpoint; it only shortens the next recovery, so a full disk skips it."""
    space.quietly(store.checkpoint.flush, f"store {store.root}: checkpoint not written")


def write_abort(store: MessageStore) -> bool:
    """Write ``<root>/abort`` with this process's pid (the previous one kept as
    ``abort.bak``): the mark of a store open for writing, which makes the next start
    rescan after a crash.

    On a full disk: an ``abort`` left by the last run still marks a crash, so the failure
    is only logged; with none in place, puts are refused (source ``abort``) until a put's
    retry writes it.

    Returns:
        Whether a marker is in place.

    Raises:
        OSError: a failure other than a full disk.
    """
    abort = store.root / "abort"
    try:
        old = abort.read_bytes() if abort.exists() else b""
        (store.root / "abort.bak").write_bytes(old)
        abort.write_text(str(os.getpid()))
    except OSError as exc:
        if not space.is_disk_full(exc):
            raise
        if abort.exists():  # its existence is the mark; an empty one (no block) will do
            log.warning("store %s: abort marker written without its pid: disk full", store.root)
            return True
        reason = f"disk full: cannot write the abort marker ({exc.strerror})"
        store.set_writable(False, reason, source="abort")
        return False
    return True


def show_condition(health: StoreHealth, refusals: Refusals, root: Path) -> None:
    """Set the ``disk-full`` condition while a disk source refuses puts, with the usage of
    the CommitLog's partition measured now and each source's reason; clear it when none
    does."""
    reasons = refusals.reasons(DISK_SOURCES)
    if not reasons:
        health.clear_condition(CONDITION_ID)
        return
    try:
        used: float | None = space.usage_ratio(str(root / "commitlog"))
    except OSError:
        used = None
    summary = "disk full: puts refused" + (f" ({used:.0%} used)" if used is not None else "")
    detail = {"reasons": reasons, "commit_log_usage": used}
    health.set_condition("disk_full", CONDITION_ID, summary, detail)
