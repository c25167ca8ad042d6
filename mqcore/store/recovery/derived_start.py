"""A writer's open and the derived files: which are damaged, and the next queue offsets.

Around recovery (``MessageStore._load_and_recover``)::

    before_load   finish a swap of rebuilt files a crash interrupted (rebuild_dir.py)
    (load)        ConsumeQueueStore/IndexService.load note files they cannot load or that
                  were cut short, and keep going
    (recover)     recovery.py: the CommitLog end, torn tails, re-dispatch
    settle        1. the queue offset snapshot (queue_snapshot.py), if it is not past the
                     recovered end, and a scan of the records after it (offset_table.py)
                  2. damaged queues: noted by load; left by an interrupted rebuild; missing or
                     ending below the snapshot or below a record of the scan; failing the
                     sampled check (derived_check.py)
                  3. the next queue offsets (offset_table.py): max(ConsumeQueue ends of
                     healthy queues, snapshot, scan), so a lost queue never restarts at 0
                  4. a damaged index: files that did not load, an interrupted rebuild, a gap
                     in its coverage of the CommitLog, the sampled check
                  5. recorded: puts to damaged queues refused (``rebuilding_queues``), the
                     queue rebuild job written (``rebuild/queues.json``), ``index_damage``
                     set, and the "rebuild" health condition; the rebuild services
                     (``mqcore.services.queue_build``, ``index_build``) take it from there.

A full disk at start (recovery's dispatch stopped short, ``full_disk.DispatchStall``):
steps 2, 4 and 5 wait until reput has dispatched the rest (:func:`check_when_dispatched`),
since derived files that stop where dispatch stopped are short, not damaged. Job files that
cannot be written (no space) are kept in memory and written by the rebuild service's next
steps (:func:`schedule_pending`); the damaged queues refuse puts meanwhile.

Cost: the scan covers what was written after the last snapshot (nothing after a clean
close; about a second of writes after a crash); the sampled check has fixed budgets.

While a queue is rebuilt, :func:`refused_puts` answers the puts to it (the put path calls it
only while ``rebuilding_queues`` is not empty: one dict test per batch otherwise).

Crash behaviour: nothing here changes a file but the job files and the snapshot, each
written atomically; killed during the open, the next open finds the same damage again (and
the job files).
"""

from __future__ import annotations

import logging
import shutil
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mqcore.format.layout import TRANSACTION_ROLLBACK_TYPE
from mqcore.format.record import DispatchRequest
from mqcore.message import Message
from mqcore.store import offset_table
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.queue_snapshot import QueueOffsetSnapshot
from mqcore.store.recovery import derived_check, rebuild_dir
from mqcore.store.recovery.verify_derived import RecordReader
from mqcore.store.results import PutResult, PutStatus, RefusedPutResult

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


def _redispatched_whole(store: MessageStore) -> bool:
    """Whether recovery dispatches every record of the log again (after a crash, its scan
    started at the log's first segment): a queue lost before the start is then re-created
    whole by dispatch (by reput, from where a full disk stopped recovery's dispatch)."""
    report = store.recovery
    return (
        report is not None
        and not report.last_exit_ok
        and report.scan_from <= store.commit_log.min_offset
    )


def _missing_at_start(
    store: MessageStore, snapshot: QueueOffsetSnapshot | None, scan: offset_table.Scan
) -> dict[QueueKey, str]:
    """Queues with records but no files when the store was loaded. Recovery may have
    dispatched some of their records since (after a crash) into a queue pre-filled with
    blanks up to them: only a queue born after the snapshot whose files start at its first
    record of the scan is whole, or every queue when recovery dispatched the whole log."""
    if _redispatched_whole(store):
        return {}
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
    scan: offset_table.Scan,
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
        store.index, store.commit_log, end, store.queues
    )


@dataclass
class _Deferred:
    """A start check that waits for dispatch to reach the recovered ``end``."""

    snapshot: QueueOffsetSnapshot | None
    scan: offset_table.Scan
    end: int


#: Stores whose start check waits (:func:`settle` with ``dispatch_stalled_at``).
_deferred: weakref.WeakKeyDictionary[MessageStore, _Deferred] = weakref.WeakKeyDictionary()


def settle(store: MessageStore, dispatch_stalled_at: int | None = None) -> None:
    """Steps 1 to 5 of the module docstring, after recovery (``store.reput_offset`` is the
    recovered end). Standalone writer only.

    ``dispatch_stalled_at``: where a full disk stopped recovery's dispatch (``full_disk``).
    The derived files then end there, short of the log, until reput dispatches the rest once
    space returns: judged now, every queue with records after that point would look cut
    short and be rebuilt for nothing. So steps 2, 4 and 5 wait until dispatch reaches the
    recovered end (:func:`check_when_dispatched`, reput's step); the next queue offsets
    (step 3) are set now from the snapshot, the scan and the damage known at load (files
    that did not load, an interrupted rebuild), and the records not dispatched are counted
    in them by ``full_disk.pause_dispatch``. Puts are refused meanwhile (reput is paused).
    """
    end = store.reput_offset
    snapshot = offset_table.usable_snapshot(store, end)
    begin = snapshot.log_offset if snapshot is not None else end
    scan = offset_table.scan_after(store, max(begin, store.commit_log.min_offset), end)
    if dispatch_stalled_at is not None and dispatch_stalled_at < end:
        known = {**store.queues.damaged, **_interrupted_queues(store)}
        offset_table.set_queue_offsets(store, snapshot, scan, known)
        _deferred[store] = _Deferred(snapshot, scan, end)
        log.warning(
            "%s: the start check of the ConsumeQueues and the index waits until dispatch "
            "reaches %d (a full disk stopped it at %d)", store.root, end, dispatch_stalled_at,
        )  # fmt: skip
    else:
        damaged = damaged_queues(store, snapshot, scan, end)
        offset_table.set_queue_offsets(store, snapshot, scan, damaged)
        record_damage(store, damaged, index_damage(store, end))
    store.queue_snapshot = snapshot
    offset_table.save_snapshot(store)


def check_when_dispatched(store: MessageStore) -> None:
    """Run the start check :func:`settle` deferred, once dispatch has reached the recovered
    end (reput's step calls it after each pass: a dict lookup while nothing waits)."""
    waiting = _deferred.get(store)
    if waiting is None or store.reput_offset < waiting.end:
        return
    del _deferred[store]
    log.info("%s: dispatch reached %d: the start check runs now", store.root, waiting.end)
    damaged = damaged_queues(store, waiting.snapshot, waiting.scan, waiting.end)
    record_damage(store, damaged, index_damage(store, waiting.end))


def settle_attached(store: MessageStore, end: int) -> None:
    """:func:`settle` for a Celery worker that has just attached as the reput holder (the
    broker owns the offset table): the damage only. The snapshot is compared when every
    record it counts is dispatched already (``store.reput_offset`` is where dispatch
    restarts); the records after are dispatched by the worker's reput."""
    snapshot = offset_table.usable_snapshot(store, end)
    dispatched = snapshot is not None and snapshot.log_offset <= store.reput_offset
    damaged = damaged_queues(
        store, snapshot, offset_table.Scan({}, {}), end, compare_ends=dispatched
    )
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
        _schedule(store, damaged, index)
    except OSError as exc:  # a full disk: the store opens; the rebuild service retries
        _unscheduled[store] = (dict(damaged), index)
        log.error(
            "%s: the rebuild could not be scheduled: %s; retried until it can be",
            store.root, exc,
        )  # fmt: skip
    show_condition(store, 0.0)


#: Rebuilds :func:`record_damage` could not write the job files of (a full disk), retried by
#: :func:`schedule_pending`; meanwhile their puts are refused as for any damaged queue.
_unscheduled: weakref.WeakKeyDictionary[MessageStore, tuple[dict[QueueKey, str], str]] = (
    weakref.WeakKeyDictionary()
)


def _schedule(store: MessageStore, damaged: dict[QueueKey, str], index: str) -> None:
    """Write the index rebuild request and the queue rebuild job (step 5)."""
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


def schedule_pending(store: MessageStore) -> None:
    """Write the job files of a rebuild :func:`record_damage` could not schedule (the
    rebuild service's step calls it first: a dict lookup while nothing is pending). Queues
    that left the rebuild meanwhile (a deleted topic) are left out."""
    pending = _unscheduled.get(store)
    if pending is None:
        return
    damaged = {k: why for k, why in pending[0].items() if k in store.rebuilding_queues}
    index = pending[1] if store.index_damage else ""
    try:
        _schedule(store, damaged, index)
    except OSError as exc:
        log.debug("%s: the rebuild still cannot be scheduled: %s", store.root, exc)
        return
    del _unscheduled[store]
    log.warning("%s: the rebuild is scheduled now", store.root)


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


def refused_puts(store: MessageStore, msgs: Sequence[Message], queue_id: int) -> list[PutResult]:
    """Refusals (``SERVICE_NOT_AVAILABLE``, with the reason) when a message of ``msgs`` goes
    to a queue whose ConsumeQueue is being rebuilt; else empty. The put path calls it only
    while a rebuild runs (``MessageStore.rebuilding_queues`` is not empty)."""
    for topic in {m.topic for m in msgs}:
        why = store.rebuilding_queues.get((topic, queue_id))
        if why is not None:
            reason = (
                f"queue {topic}/{queue_id} is being rebuilt from the CommitLog ({why}): "
                "retry shortly"
            )
            status = PutStatus.SERVICE_NOT_AVAILABLE
            return [RefusedPutResult(status, m.topic, queue_id, reason=reason) for m in msgs]
    return []
