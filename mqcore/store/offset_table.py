"""The writer's next queue offsets: restored at open, saved as the queue offset snapshot.

``CommitLog.queue_offsets`` gives every put its queue offset. At open it is rebuilt as
``max(ends of the healthy ConsumeQueues, the snapshot's next offsets, 1 + the queue offset of
every record after the snapshot)`` (:func:`set_queue_offsets`, :func:`scan_after`), so that a
lost or cut ConsumeQueue never makes its queue start again below what was acknowledged. The
scan reads what was written since the last snapshot (nothing after a clean close, a second of
writes after a crash), and never starts before the segment holding the last
``SCAN_LIMIT_BYTES``.
While the store runs the writer saves the table as the snapshot (``queue_snapshot.py``)
every second when it changed (the ``snapshot`` service) and at a clean close
(:func:`save_snapshot`). A deleted topic is marked in it (:func:`forget_topic`).

Thread-safety: the table is copied under the CommitLog's put lock; the snapshot file is
written under its own lock (``queue_snapshot.write_if_changed``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from mqcore.format.record import DispatchRequest
from mqcore.store import queue_snapshot
from mqcore.store.queue_snapshot import QueueEntry, QueueOffsetSnapshot
from mqcore.store.recovery.verify_derived import takes_unit

if TYPE_CHECKING:
    from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

type QueueKey = tuple[str, int]


def usable_snapshot(store: MessageStore, end: int) -> QueueOffsetSnapshot | None:
    """The queue offset snapshot, unless it was taken past the recovered end ``end``."""
    snapshot = queue_snapshot.read(store.root)
    if snapshot is not None and snapshot.log_offset > end:
        log.warning(
            "queue offset snapshot taken at CommitLog offset %d, past the recovered end %d "
            "(the tail was lost): not used",
            snapshot.log_offset,
            end,
        )
        return None
    return snapshot


class Scan(NamedTuple):
    """Each queue's records in a range of the CommitLog: one past the highest queue offset,
    and the lowest."""

    next_offsets: dict[QueueKey, int]
    first_offsets: dict[QueueKey, int]


#: The scan after the snapshot starts no earlier than the segment holding this many bytes
#: before the end: a snapshot that stopped being written (a disk full for hours) must not
#: make a start read the whole log. Offsets it misses are restored when the damaged queue
#: is rebuilt (puts to it are refused until then).
SCAN_LIMIT_BYTES = 64 * 1024 * 1024


def scan_after(store: MessageStore, begin: int, end: int) -> Scan:
    """The queues' records in ``[begin, end)`` (:class:`Scan`), ``begin`` raised to the
    segment holding ``end - SCAN_LIMIT_BYTES`` if it is further back."""
    segment = store.commit_log.segments.find(end - SCAN_LIMIT_BYTES)
    if segment is not None and begin < segment.base_offset:
        log.warning(
            "the queue offset snapshot is %d bytes behind the CommitLog end: only the records "
            "from %d are scanned",
            end - begin,
            segment.base_offset,
        )
        begin = segment.base_offset
    scan = Scan({}, {})
    for item in store.commit_log.iter_dispatch(begin, end, 1 << 62, store.delay_levels_ms):
        if isinstance(item, DispatchRequest) and takes_unit(item.sys_flag):
            key = (item.topic, item.queue_id)
            scan.next_offsets[key] = max(scan.next_offsets.get(key, 0), item.queue_offset + 1)
            scan.first_offsets.setdefault(key, item.queue_offset)
    return scan


def set_queue_offsets(
    store: MessageStore,
    snapshot: QueueOffsetSnapshot | None,
    scan: Scan,
    damaged: dict[QueueKey, str],
) -> None:
    """The next queue offset table (module docstring, step 3). Offsets never go back: a
    damaged queue's own end counts only where no snapshot entry speaks for it."""
    table = store.commit_log.queue_offsets
    table.clear()
    known = snapshot.entries if snapshot is not None else {}
    for topic in store.queues.topics():
        for queue_id, queue in store.queues.queues(topic).items():
            key = (topic, queue_id)
            if key not in damaged or key not in known:
                table[key] = queue.max_offset
    for key, entry in known.items():
        table[key] = max(table.get(key, 0), entry.next_offset)
    for key, next_offset in scan.next_offsets.items():
        table[key] = max(table.get(key, 0), next_offset)
    store.quarantine.next_queue_offsets(table)  # offsets quarantined records still show


def restore_for_broker(store: MessageStore, end: int) -> None:
    """A broker-role start (its worker owns the ConsumeQueues): the next queue offsets from
    what the ConsumeQueues hold, the queue offset snapshot (a lost ConsumeQueue must not
    restart at 0), and the records of the recovered log (to ``end``) after the older of
    the snapshot and the worker's dispatch (``store.reput_offset``)."""
    snapshot = usable_snapshot(store, end)
    begin = store.reput_offset if snapshot is None else min(snapshot.log_offset, store.reput_offset)
    scan = scan_after(store, max(begin, store.commit_log.min_offset), end)
    set_queue_offsets(store, snapshot, scan, dict(store.queues.damaged))
    store.queue_snapshot = snapshot


def save_snapshot(store: MessageStore) -> None:
    """Write the queue offset snapshot if the table changed since the last one. The CommitLog
    writer calls it (standalone or broker role): now and then while it runs (the snapshot
    service, ``mqcore.services.inline``), after open and at a clean close.

    A failed write (a full disk) is logged: the previous snapshot stays, and is still
    true (offsets only grow).
    """
    previous = store.queue_snapshot
    try:
        store.queue_snapshot = queue_snapshot.write_if_changed(
            store.root, lambda: snapshot_of(store, previous), previous
        )
    except OSError as exc:  # a full disk: the previous snapshot stays, still true
        log.error("%s: the queue offset snapshot could not be written: %s", store.root, exc)


def snapshot_of(store: MessageStore, previous: QueueOffsetSnapshot | None) -> QueueOffsetSnapshot:
    """The writer's queue offset table as a snapshot, taken under the put lock. A queue's
    ``last_phys_end`` is its ConsumeQueue's (or an upper bound while the table is ahead of
    it, or the previous snapshot's while it is rebuilt)."""
    commit_log = store.commit_log
    with commit_log.put_lock:
        table = dict(commit_log.queue_offsets)
        log_offset = commit_log.max_offset
    rebuilding = store.rebuilding_queues
    entries: dict[QueueKey, QueueEntry] = {}
    for key, next_offset in table.items():
        queue = store.queues.get(*key)
        if queue is not None and key not in rebuilding:
            last = queue.max_phys_offset
            if next_offset > queue.max_offset:
                last = max(last, log_offset)
        elif previous is not None and key in previous.entries:
            last = previous.entries[key].last_phys_end
        else:
            last = -1
        entries[key] = QueueEntry(next_offset, last)
    return QueueOffsetSnapshot(log_offset, entries)


def forget_topic(store: MessageStore, topic: str) -> None:
    """A topic was deleted: it leaves the rebuild, and the snapshot marks it deleted
    (``queue_snapshot.mark_deleted``: its records stay in the CommitLog until cleanup and
    must not be rebuilt into a queue). Its next offsets stay: a topic created again under
    the name goes on from them, never handing out an offset twice."""
    store.rebuilding_queues = {k: v for k, v in store.rebuilding_queues.items() if k[0] != topic}
    with store.commit_log.put_lock:
        offsets = {k: n for k, n in store.commit_log.queue_offsets.items() if k[0] == topic}
    previous = store.queue_snapshot or QueueOffsetSnapshot(0)
    entries = {**previous.entries, **{key: QueueEntry(n) for key, n in offsets.items()}}
    # The next snapshots carry the mark (snapshot_of takes it from the previous one).
    store.queue_snapshot = queue_snapshot.deleted_topic(
        QueueOffsetSnapshot(previous.log_offset, entries), topic
    )
    if not store.readonly:
        try:
            queue_snapshot.mark_deleted(store.root, topic)
        except OSError as exc:
            log.error("%s: the queue offset snapshot could not be updated: %s", store.root, exc)
