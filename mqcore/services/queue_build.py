"""Rebuild damaged ConsumeQueues from the CommitLog beside the live ones, then swap them in.

The start check (``mqcore.store.recovery.derived_start``) writes the job, ``<root>/rebuild/queues.json``,
with the damaged queues and why; puts to them are refused meanwhile and their reads serve what
the live files hold; every other queue is served as usual. Then::

    step() ...      (the ``index`` service loop, or the ``cairn.index_build`` task)
                    the first step of a job without a cursor empties rebuild/consumequeue;
                    each step walks CommitLog [cursor, cursor + max_bytes) and writes the
                    units of the damaged queues into rebuild/consumequeue/<topic>/<q>/;
                    the cursor is saved in the job after the units are written (a worker
                    that dies resumes there: the units above it are skipped as present)
    ready           the cursor is within one step of the reput position: state "ready"
    apply_ready()   the reput holder, between two reput passes (reput paused):
                    1. the records reput dispatched since are added; each rebuilt queue is
                       padded with blank units up to its next queue offset (records missing
                       from the CommitLog keep their offsets: a queue never renumbers)
                    2. the side files are synced and swapped in (``rebuild_dir.swap_in``:
                       journaled, so a crash completes it at the next open)
                    3. each swapped queue is loaded and put in the place of the damaged one
                       (which stays open a few seconds for the reads under way), puts are
                       accepted again, the job is removed, a ``derived_rebuilt`` problem
                       says what was rebuilt and why

Progress: the "rebuild" health condition (fraction of the CommitLog walked) and INFO lines
every 10%. A broker killed mid-rebuild finds the job at its next open, which starts it again
from the beginning (derived_start writes a fresh job); the side files are scratch until the
journal of the swap is written.
"""

from __future__ import annotations

import logging
import shutil
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqcore.clock import Clock
from mqcore.errors import StoreError
from mqcore.services import locks
from mqcore.services.result import StepResult
from mqcore.store import queue_snapshot
from mqcore.store.consume_queue import BLANK_UNIT, CQ_UNIT_SIZE, ConsumeQueue
from mqcore.store.recovery import derived_start, rebuild_dir, rebuild_walk
from mqcore.store.recovery.rebuild_dir import Move
from mqcore.store.recovery.verify_derived import takes_unit
from mqcore.store.reput.dispatch_scan import Columns
from mqcore.store.sharing.progress import Slot
from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

DEFAULT_STEP_BYTES = 16 * 1024 * 1024
LOCK = "queues"

type QueueKey = tuple[str, int]


@dataclass
class SideQueues:
    """This process's open side queues of one job (``started_ms`` names the job)."""

    started_ms: int
    queues: dict[QueueKey, ConsumeQueue] = field(default_factory=dict)
    logged_tenth: int = -1

    def close(self) -> None:
        for queue in self.queues.values():
            queue.close()
        self.queues.clear()


_open: weakref.WeakKeyDictionary[MessageStore, SideQueues] = weakref.WeakKeyDictionary()


def side_root(store: MessageStore) -> Path:
    return rebuild_dir.rebuild_dir(store.root) / rebuild_dir.SIDE_QUEUES


def wanted_of(job: dict[str, Any]) -> dict[QueueKey, str]:
    return {(str(q["topic"]), int(q["queue_id"])): str(q["reason"]) for q in job["queues"]}


def _side_queues(store: MessageStore, job: dict[str, Any]) -> SideQueues:
    """The side queues of ``job``, opened (from their files, if this process did not write
    them) in this process."""
    current = _open.get(store)
    if current is not None and current.started_ms == job["started_ms"]:
        return current
    if current is not None:
        current.close()
    side = SideQueues(job["started_ms"])
    for topic, queue_id in wanted_of(job):
        queue = ConsumeQueue(
            side_root(store), topic, queue_id, store.config.consume_queue_file_size,
            clock=store.clock,
        )  # fmt: skip
        queue.load()
        queue.recover()
        side.queues[(topic, queue_id)] = queue
    _open[store] = side
    return side


def _reput_position(store: MessageStore) -> int:
    progress = store.progress
    if store.role == "standalone" or progress is None:
        return store.reput_offset
    return progress.get(Slot.REPUT_OFFSET)


def _log_end(store: MessageStore) -> int:
    if store.role == "services":
        store.follower.follow_commit_log()
        return store.follower.confirm_offset()
    return store.commit_log.confirm_offset


def _begin(store: MessageStore, job: dict[str, Any], clock: Clock) -> None:
    """First step of a job: scratch side directory, cursor at the CommitLog's start."""
    current = _open.pop(store, None)
    if current is not None:
        current.close()
    shutil.rmtree(side_root(store), ignore_errors=True)
    job["from_offset"] = job["cursor"] = store.commit_log.min_offset
    job["target_end"] = _reput_position(store)
    job["records"] = 0
    job["updated_ms"] = clock.now_ms()
    rebuild_dir.save_queue_job(store.root, job)
    names = ", ".join(f"{t}/{q}" for t, q in sorted(wanted_of(job)))
    log.info(
        "rebuilding ConsumeQueue(s) %s of %s from the CommitLog [%d, %d)",
        names, store.root, job["from_offset"], job["target_end"],
    )  # fmt: skip


def walk(
    store: MessageStore, side: SideQueues, start: int, end: int, max_bytes: int
) -> tuple[int, int]:
    """Write the units of the side queues' records in ``[start, end)`` (about ``max_bytes``
    of CommitLog; corrupt records quarantined and walked past, ``rebuild_walk.py``).
    Returns (offset reached, units written).

    Raises:
        StoreError: the CommitLog cannot be walked to ``end`` (nothing to install yet).
    """
    reached, written, budget_end = start, 0, start + max_bytes
    while reached < min(end, budget_end):
        columns, at = rebuild_walk.columns(
            store.commit_log, reached, end, budget_end - reached, store.delay_levels_ms
        )
        written += _put_units(side, columns)
        if at == reached:
            break  # at a record it cannot read yet: the next step goes on
        reached = at
    return reached, written


def _put_units(side: SideQueues, columns: Columns) -> int:
    if not len(columns):
        return 0
    topics, queue_ids, queue_offsets, phys_offsets, sizes, tags, _, _, _, flags = columns.lists()
    units: dict[QueueKey, list[tuple[int, int, int, int]]] = {}
    wanted = side.queues
    for i, topic in enumerate(topics):
        key = (topic, queue_ids[i])
        if key in wanted and takes_unit(flags[i]):
            units.setdefault(key, []).append((phys_offsets[i], sizes[i], tags[i], queue_offsets[i]))
    return sum(wanted[key].put_many(found) for key, found in units.items())


def fraction_of(job: dict[str, Any]) -> float:
    span = job.get("target_end", 0) - job.get("from_offset", 0)
    if "cursor" not in job:
        return 0.0
    return 1.0 if span <= 0 else min(1.0, (job["cursor"] - job["from_offset"]) / span)


def step(store: MessageStore, clock: Clock, *, max_bytes: int = DEFAULT_STEP_BYTES) -> StepResult:
    """Advance the queue rebuild by at most ``max_bytes`` of CommitLog. Idle without a job.

    Raises:
        OSError: a side file could not be written (the next step tries again).
    """
    job = rebuild_dir.load_queue_job(store.root)
    if job is None or job.get("state") != "building" or store.readonly or store.role == "broker":
        return StepResult("queues", False, detail={"job": job})
    with locks.exclusive(store, LOCK) as held:
        if not held:
            return locks.skipped(store, LOCK)
        if "cursor" not in job:
            _begin(store, job, clock)
        try:
            side = _side_queues(store, job)
        except StoreError as exc:  # side files are scratch: start the job again
            log.warning("ConsumeQueue rebuild of %s starts again: %s", store.root, exc)
            job.pop("cursor")
            rebuild_dir.save_queue_job(store.root, job)
            return StepResult("queues", progressed=True, detail={"job": job})
        end = _log_end(store)
        reached, written = walk(store, side, job["cursor"], end, max_bytes)
        job["cursor"], job["records"] = reached, job["records"] + written
        job["target_end"] = max(job["target_end"], min(end, _reput_position(store)))
        job["updated_ms"] = clock.now_ms()
        ready = reached >= min(end, _reput_position(store)) - max_bytes
        if ready:
            job["state"] = "ready"
        rebuild_dir.save_queue_job(store.root, job)
        _show(store, side, job)
        if ready:
            store.appended.set()  # wakes an inline reput loop, which swaps it in
        return StepResult("queues", progressed=not ready, detail={"job": job})


def _show(store: MessageStore, side: SideQueues, job: dict[str, Any]) -> None:
    fraction = fraction_of(job)
    tenth = int(fraction * 10)
    if tenth > side.logged_tenth:
        side.logged_tenth = tenth
        log.info(
            "ConsumeQueue rebuild of %s: %.0f%% (%d units written, CommitLog %d of %d)",
            store.root, fraction * 100, job["records"], job["cursor"], job["target_end"],
        )  # fmt: skip


def apply_ready(store: MessageStore) -> bool:
    """Install a rebuild that is ready (module docstring); the reput holder calls it between
    two reput passes. Returns whether queues were installed.

    It never raises into reput: a failure is logged and the rebuild starts again (a swap a
    failed rename left half done is completed by the next open, from its journal).
    """
    job = rebuild_dir.load_queue_job(store.root)
    if job is None or job.get("state") != "ready" or store.readonly or store.role == "broker":
        return False
    try:
        return _install(store, job)
    except (StoreError, OSError) as exc:
        log.error("ConsumeQueue rebuild of %s could not be installed (%s): starting again",
                  store.root, exc)  # fmt: skip
        _open.pop(store, None)
        job["state"] = "building"
        job.pop("cursor", None)
        try:
            rebuild_dir.save_queue_job(store.root, job)
        except OSError:
            pass
        return False


def _install(store: MessageStore, job: dict[str, Any]) -> bool:
    with store.dispatch_paused():
        side = _side_queues(store, job)
        reached, written = walk(store, side, job["cursor"], store.reput_offset, 1 << 62)
        job["cursor"], job["records"] = reached, job["records"] + written
        if reached < store.reput_offset:  # never short: the next pass tries again
            rebuild_dir.save_queue_job(store.root, job)
            return False
        _pad_to_next_offsets(store, side)
        installed = _swap(store, side)
        wanted = wanted_of(job)
        for key in installed:
            store.rebuilding_queues.pop(key, None)
        store.queues.damaged = {k: v for k, v in store.queues.damaged.items() if k not in wanted}
    rebuild_dir.empty_trash(store.root)
    if store.role == "services" and store.progress is not None:
        # Followers (the broker) reload their views of the derived files.
        store.follower.announce(Slot.ATTACH_COUNT)
    job["state"] = "installed"
    rebuild_dir.rebuild_dir(store.root).joinpath(rebuild_dir.QUEUES_JOB).unlink(missing_ok=True)
    _report(store, job, wanted, installed)
    derived_start.show_condition(store, 1.0)
    return True


def _pad_to_next_offsets(store: MessageStore, side: SideQueues) -> None:
    """Each queue up to its next offset: the writer's table, or (a Celery worker, whose
    broker holds the table) the queue offset snapshot the broker writes."""
    table: dict[QueueKey, int] = dict(store.commit_log.queue_offsets)
    if store.role == "services":
        snapshot = queue_snapshot.read(store.root)
        if snapshot is not None and snapshot.log_offset <= store.reput_offset:
            table = {key: entry.next_offset for key, entry in snapshot.entries.items()}
    for key, queue in side.queues.items():
        pad_to(queue, table.get(key, 0))


def pad_to(queue: ConsumeQueue, next_offset: int) -> None:
    """Blank units up to ``next_offset``: the queue's last records are not in the CommitLog
    (quarantined or lost) and their offsets stay theirs. An empty queue gets its first file
    pre-filled up to it, as a queue that starts above 0 does (spec 3.1)."""
    target = next_offset * CQ_UNIT_SIZE
    segments = queue.segments
    if segments.last() is None and target > 0:
        segments.last_or_create(target)
    while (current := segments.max_offset) < target:
        mapped = segments.last_or_create(current)
        room = (mapped.file_size - mapped.wrote_position) // CQ_UNIT_SIZE
        mapped.append(BLANK_UNIT * min(room, (target - current) // CQ_UNIT_SIZE))


def _swap(store: MessageStore, side: SideQueues) -> list[QueueKey]:
    """Sync and swap in the side queues still wanted; load them into the store."""
    keys = [key for key in sorted(side.queues) if key in store.rebuilding_queues]
    for queue in side.queues.values():
        while queue.flush(0):
            pass
    side.close()
    _open.pop(store, None)
    rebuild_dir.sync_tree(side_root(store))
    rel = Path(rebuild_dir.DIRECTORY) / rebuild_dir.SIDE_QUEUES
    moves = [Move(str(rel / t / str(q)), str(Path("consumequeue") / t / str(q))) for t, q in keys]
    rebuild_dir.swap_in(store.root, moves)
    shutil.rmtree(side_root(store), ignore_errors=True)
    retired: list[ConsumeQueue] = []
    for topic, queue_id in keys:
        queue = ConsumeQueue(
            store.queues.directory, topic, queue_id, store.config.consume_queue_file_size,
            clock=store.clock,
        )  # fmt: skip
        queue.load()
        queue.recover()
        queue.correct_min_offset(store.commit_log.min_offset)
        old = store.queues.replace(queue)
        if old is not None:
            retired.append(old)
        table = store.commit_log.queue_offsets
        table[(topic, queue_id)] = max(table.get((topic, queue_id), 0), queue.max_offset)
    store.views.retire(*retired)
    return keys


def _report(
    store: MessageStore, job: dict[str, Any], wanted: dict[QueueKey, str], installed: list[QueueKey]
) -> None:
    names = ", ".join(f"{t}/{q}" for t, q in installed)
    log.info(
        "ConsumeQueue rebuild of %s done: %s installed (%d units from CommitLog [%d, %d))",
        store.root, names or "nothing", job["records"], job["from_offset"], job["cursor"],
    )  # fmt: skip
    if not installed:
        return
    try:
        _report_problem(store, job, wanted, installed, names)
    except OSError as exc:  # health.json on a full disk: the log line above stays
        log.error("%s: the rebuild could not be reported in health.json: %s", store.root, exc)


def _report_problem(
    store: MessageStore,
    job: dict[str, Any],
    wanted: dict[QueueKey, str],
    installed: list[QueueKey],
    names: str,
) -> None:
    store.health.report(
        "derived_rebuilt",
        f"derived_rebuilt:consumequeue:{job['started_ms']}",
        f"ConsumeQueue(s) {names} were damaged and have been rebuilt from the CommitLog",
        {
            "queues": {f"{t}/{q}": wanted.get((t, q), "") for t, q in installed},
            "units": job["records"],
            "commitlog_from": job["from_offset"],
            "commitlog_to": job["cursor"],
        },
    )
