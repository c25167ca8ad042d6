"""A writer's open and the derived files: which are damaged, and the next queue offsets.

Around recovery (``MessageStore._load_and_recover``)::

    before_load   finish a swap of rebuilt files a crash interrupted (rebuild_dir.py)
    (load)        ConsumeQueueStore/IndexService.load note files they cannot load or that
                  were cut short, and keep going
    (recover)     recovery.py: the CommitLog end, torn tails, re-dispatch
    settle        1. the queue offset snapshot (queue_snapshot.py), if it is not past the
                     recovered end, and a scan of the records after it
                  2. damaged queues: noted by load; left by an interrupted rebuild; missing or
                     ending below the snapshot or below a record of the scan; failing the
                     sampled check (derived_check.py)
                  3. the next queue offsets: max(ConsumeQueue ends of healthy queues,
                     snapshot, scan), so a lost queue never restarts at 0
                  4. a damaged index: files that did not load, an interrupted rebuild, a gap
                     in its coverage of the CommitLog, the sampled check
                  5. recorded: puts to damaged queues refused (``rebuilding_queues``), the
                     queue rebuild job written (``rebuild/queues.json``), ``index_damage``
                     set, and the "rebuild" health condition; the rebuild services
                     (``mqcore.services.queue_build``, ``index_build``) take it from there.

Cost: the scan covers what was written after the last snapshot (nothing after a clean
close; about a second of writes after a crash); the sampled check has fixed budgets.

Crash behaviour: nothing here changes a file but the job file, written atomically; killed
during the open, the next open finds the same damage again (and the job file).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from mqcore.store import derived_check, queue_snapshot, rebuild_dir
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.format import DispatchRequest
from mqcore.store.queue_snapshot import QueueEntry, QueueOffsetSnapshot
from mqcore.store.record_layout import TRANSACTION_ROLLBACK_TYPE
from mqcore.store.verify_derived import RecordReader, takes_unit

if TYPE_CHECKING:
    from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

type QueueKey = tuple[str, int]

#: The health condition of a running rebuild (kind and id).
CONDITION = "rebuild"


def before_load(store: MessageStore) -> None:
    """Before anything is loaded: complete an interrupted swap of rebuilt files; discard the
    side files of an offline rebuild killed before its swap (the live files are untouched)."""
    rebuild_dir.finish_swap(store.root)
    job = rebuild_dir.load_queue_job(store.root)
    if job is not None and job.get("scope") == "all":
        log.warning(
            "%s: an offline rebuild of every ConsumeQueue was interrupted before its swap; "
            "the files it left are removed, the live ones were not touched",
            store.root,
        )
        side = rebuild_dir.rebuild_dir(store.root)
        for name in (rebuild_dir.SIDE_QUEUES, rebuild_dir.SIDE_INDEX):
            shutil.rmtree(side / name, ignore_errors=True)
        (side / rebuild_dir.QUEUES_JOB).unlink(missing_ok=True)


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


def scan_after(store: MessageStore, begin: int, end: int) -> Scan:
    """The queues' records in ``[begin, end)`` (:class:`Scan`)."""
    scan = Scan({}, {})
    for item in store.commit_log.iter_dispatch(begin, end, 1 << 62, store.delay_levels_ms):
        if isinstance(item, DispatchRequest) and takes_unit(item.sys_flag):
            key = (item.topic, item.queue_id)
            scan.next_offsets[key] = max(scan.next_offsets.get(key, 0), item.queue_offset + 1)
            scan.first_offsets.setdefault(key, item.queue_offset)
    return scan


def _interrupted_queues(store: MessageStore) -> dict[QueueKey, str]:
    job = rebuild_dir.load_queue_job(store.root)
    if job is None or job.get("state") == "installed" or job.get("scope") == "all":
        return {}
    found: dict[QueueKey, str] = {}
    for q in job.get("queues", []):
        try:
            key = (str(q["topic"]), int(q["queue_id"]))
        except (KeyError, TypeError, ValueError):
            continue
        found[key] = f"{q.get('reason', 'damaged')}; its rebuild was interrupted"
    return found


def _missing_at_start(
    store: MessageStore, snapshot: QueueOffsetSnapshot | None, scan: Scan
) -> dict[QueueKey, str]:
    """Queues with records but no files when the store was loaded. Recovery may have
    dispatched some of their records since (after a crash) into a queue pre-filled with
    blanks up to them: only a queue born after the snapshot whose files start at its first
    record of the scan is whole."""
    loaded = store.queues.loaded
    min_offset = store.commit_log.min_offset
    missing: dict[QueueKey, str] = {}
    known = snapshot.entries if snapshot is not None else {}
    for key, entry in known.items():
        if key not in loaded and not 0 <= entry.last_phys_end <= min_offset:
            missing[key] = (
                f"its ConsumeQueue is missing; the queue offset snapshot reaches "
                f"{entry.next_offset}"
            )
    for key, first in scan.first_offsets.items():
        queue = store.queues.get(*key)
        if key in loaded or key in known or (queue is not None and queue.min_offset <= first):
            continue
        missing[key] = f"its ConsumeQueue is missing; the CommitLog has it from {first}"
    return missing


def damaged_queues(
    store: MessageStore,
    snapshot: QueueOffsetSnapshot | None,
    scan: Scan,
    end: int,
    *,
    compare_ends: bool = True,
) -> dict[QueueKey, str]:
    """Every damaged queue and why (module docstring, step 2). ``compare_ends``: whether
    every record the snapshot counts is dispatched (each queue must then reach it)."""
    damaged = dict(store.queues.damaged)
    found = {**_missing_at_start(store, snapshot, scan), **_interrupted_queues(store)}
    for key, why in found.items():
        damaged.setdefault(key, why)
    min_offset = store.commit_log.min_offset
    expected: dict[QueueKey, tuple[int, str]] = {}
    if snapshot is not None and compare_ends:
        for key, entry in snapshot.entries.items():
            if not 0 <= entry.last_phys_end <= min_offset:  # else every record expired
                expected[key] = (entry.next_offset, "the queue offset snapshot")
    gone = {k for k, e in (snapshot.entries.items() if snapshot else ()) if e.last_phys_end == 0}
    for key, next_offset in scan.next_offsets.items():
        if key not in gone and next_offset > expected.get(key, (0, ""))[0]:
            expected[key] = (next_offset, "the CommitLog")
    for key, (next_offset, witness) in sorted(expected.items()):
        queue = store.queues.get(*key)
        if key in damaged or (queue is not None and queue.max_offset >= next_offset):
            continue
        have = queue.max_offset if queue is not None else 0
        damaged[key] = (
            f"its ConsumeQueue ends at queue offset {have}; {witness} reaches {next_offset}"
        )
    healthy = [
        queue
        for topic in store.queues.topics()
        for queue_id, queue in store.queues.queues(topic).items()
        if (topic, queue_id) not in damaged
    ]
    damaged.update(derived_check.check_queues(healthy, store.commit_log, end))
    return damaged


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


def _keyed(record: DispatchRequest | str | None) -> bool:
    """Whether the index holds keys of ``record`` (a rolled-back transaction's it does not)."""
    return (
        isinstance(record, DispatchRequest)
        and bool(record.uniq_key or record.keys)
        and record.sys_flag & TRANSACTION_ROLLBACK_TYPE != TRANSACTION_ROLLBACK_TYPE
    )


def index_coverage_problem(store: MessageStore, end: int) -> str:
    """Whether the index misses the CommitLog's oldest or newest keyed records ("" if not)."""
    commit_log, files = store.commit_log, [f for f in store.index.files if f.index_count > 1]
    min_offset = commit_log.min_offset
    if end <= min_offset:
        return ""
    reader = RecordReader(commit_log, end, set())
    oldest = reader.at(min_offset)
    if not files:
        return "no index file, but the CommitLog holds keyed records" if _keyed(oldest) else ""
    if files[0].begin_phys_offset > min_offset and _keyed(oldest):
        return f"the index begins at phys {files[0].begin_phys_offset}, after keyed records"
    newest = max(
        (unit.phys_offset for q in _all_queues(store) if (unit := q.last_unit()) is not None),
        default=-1,
    )
    for older, newer in zip(files, files[1:], strict=False):
        gap = _first_keyed_between(store, older.end_phys_offset, newer.begin_phys_offset)
        if gap is not None:
            return (
                f"no index file holds the keyed record at phys {gap}, between "
                f"{older.name} and {newer.name}"
            )
    dispatched = newest < store.reput_offset  # a worker's reput may not have indexed it yet
    if dispatched and newest > files[-1].end_phys_offset and _keyed(reader.at(newest)):
        return (
            f"the index ends at phys {files[-1].end_phys_offset}, before the keyed record "
            f"at {newest}"
        )
    return ""


def _first_keyed_between(store: MessageStore, after: int, before: int) -> int | None:
    """The record following the one at ``after``, if it lies before ``before`` and has keys
    (an index file ends at its last record and the next file begins at the next keyed one:
    one in between means a file is missing)."""
    walk = store.commit_log.iter_dispatch(after, before, 64 * 1024, store.delay_levels_ms)
    for item in walk:
        if isinstance(item, DispatchRequest) and item.phys_offset > after:
            return item.phys_offset if _keyed(item) else None
    return None


def _all_queues(store: MessageStore) -> list[ConsumeQueue]:
    return [q for t in store.queues.topics() for q in store.queues.queues(t).values()]


def index_damage(store: MessageStore, end: int) -> str:
    """Why the index is damaged (module docstring, step 4), "" when it is not."""
    if not store.config.message_index_enable:
        return ""
    if store.index.damaged_files:
        names = ", ".join(f"{name} ({why})" for name, why in store.index.damaged_files)
        return f"index file(s) could not be opened: {names}"
    directory = rebuild_dir.rebuild_dir(store.root)
    request = rebuild_dir.read_json(directory / rebuild_dir.INDEX_REQUEST)
    if isinstance(request, dict):
        return f"{request.get('reason', 'damaged')}; its rebuild was not started"
    job = rebuild_dir.read_json(directory / rebuild_dir.INDEX_JOB)
    if isinstance(job, dict) and job.get("state") in ("building", "ready"):
        return f"{job.get('reason') or 'an index rebuild'}; it was interrupted"
    return index_coverage_problem(store, end) or derived_check.check_index(
        store.index, store.commit_log, end
    )


def settle(store: MessageStore) -> None:
    """Steps 1 to 5 of the module docstring, after recovery (``store.reput_offset`` is the
    recovered end). Standalone writer only."""
    end = store.reput_offset
    snapshot = usable_snapshot(store, end)
    begin = snapshot.log_offset if snapshot is not None else end
    scan = scan_after(store, max(begin, store.commit_log.min_offset), end)
    damaged = damaged_queues(store, snapshot, scan, end)
    set_queue_offsets(store, snapshot, scan, damaged)
    record_damage(store, damaged, index_damage(store, end))
    store.queue_snapshot = snapshot
    save_snapshot(store)


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


def settle_attached(store: MessageStore, end: int) -> None:
    """:func:`settle` for a Celery worker that has just attached as the reput holder (the
    broker owns the offset table): the damage only. The snapshot is compared when every
    record it counts is dispatched already (``store.reput_offset`` is where dispatch
    restarts); the records after are dispatched by the worker's reput."""
    snapshot = usable_snapshot(store, end)
    dispatched = snapshot is not None and snapshot.log_offset <= store.reput_offset
    damaged = damaged_queues(store, snapshot, Scan({}, {}), end, compare_ends=dispatched)
    record_damage(store, damaged, index_damage(store, end))


def follow_rebuild(store: MessageStore) -> None:
    """A broker whose workers rebuild (Celery mode): take the damaged queues (puts refused)
    and the progress from the rebuild job files when they changed."""
    directory = rebuild_dir.rebuild_dir(store.root)
    stamp = tuple(
        _mtime(directory / name) for name in (rebuild_dir.QUEUES_JOB, rebuild_dir.INDEX_JOB)
    )
    if stamp == store.seen_rebuild:
        return
    store.seen_rebuild = stamp
    job = rebuild_dir.load_queue_job(store.root)
    queues: dict[QueueKey, str] = {}
    if job is not None and job.get("state") in ("building", "ready") and job.get("scope") != "all":
        for q in job.get("queues", []):
            queues[(str(q["topic"]), int(q["queue_id"]))] = str(q.get("reason", "damaged"))
    store.rebuilding_queues = queues
    index_job = rebuild_dir.read_json(directory / rebuild_dir.INDEX_JOB)
    building = isinstance(index_job, dict) and index_job.get("state") in ("building", "ready")
    reason = str(index_job.get("reason", "")) if isinstance(index_job, dict) else ""
    store.index_damage = reason if building else ""
    fraction = 0.0
    if job is not None and "cursor" in job:
        span = max(job.get("target_end", 0) - job.get("from_offset", 0), 1)
        fraction = min(1.0, (job["cursor"] - job.get("from_offset", 0)) / span)
    show_condition(store, fraction)


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def record_damage(store: MessageStore, damaged: dict[QueueKey, str], index: str) -> None:
    """Step 5: refuse puts to the damaged queues, write the rebuild job, set the condition."""
    store.rebuilding_queues = dict(damaged)
    store.index_damage = index
    for (topic, queue_id), why in sorted(damaged.items()):
        log.error(
            "consume queue %s-%d is damaged: %s; rebuilding it from the CommitLog (puts to "
            "it are refused until then)",
            topic,
            queue_id,
            why,
        )
    if index:
        log.error("the index is damaged: %s; rebuilding it from the CommitLog", index)
    try:
        if index:
            rebuild_dir.write_json_atomically(
                rebuild_dir.rebuild_dir(store.root) / rebuild_dir.INDEX_REQUEST,
                {"reason": index, "requested_ms": store.clock.now_ms()},
            )
        if damaged:
            rebuild_dir.save_queue_job(
                store.root,
                {
                    "state": "building",
                    "scope": "queues",
                    "queues": [
                        {"topic": t, "queue_id": q, "reason": why}
                        for (t, q), why in sorted(damaged.items())
                    ],
                    "started_ms": store.clock.now_ms(),
                },
            )
    except OSError as exc:  # a full disk: the store opens; the next start finds it again
        log.error("%s: the rebuild could not be scheduled: %s", store.root, exc)
    show_condition(store, 0.0)


def show_condition(store: MessageStore, progress: float) -> None:
    """Set (or clear, when nothing is being rebuilt) the "rebuild" health condition."""
    queues, index = store.rebuilding_queues, store.index_damage
    if not queues and not index:
        store.health.clear_condition(CONDITION)
        return
    what = []
    if queues:
        what.append(f"{len(queues)} ConsumeQueue{'s' if len(queues) > 1 else ''}")
    if index:
        what.append("the index")
    store.health.set_condition(
        CONDITION,
        CONDITION,
        f"rebuilding {' and '.join(what)} from the CommitLog: {progress:.0%}"
        + ("; puts to those queues are refused until then" if queues else ""),
        {
            "queues": {f"{t}/{q}": why for (t, q), why in sorted(queues.items())},
            "index": index,
        },
        progress=progress,
    )


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
