"""How a :class:`MessageStore` shares one store directory with other processes (Celery mode).

Three roles (``MessageStore(root, config, role=...)``)::

    role        <root>/lock   CommitLog                 ConsumeQueue / IndexFile / checkpoint
    ----------  ------------  ------------------------  ---------------------------------------
    standalone  held          writes                    writes (reput, flush, cleanup in-process)
    broker      held          writes                    follows what a worker writes (read-only)
    services    never         follows (mapped read-only) follows; writes once it holds reput

``standalone`` is the embedded default (``CAIRN_SERVICES=inline``). With
``CAIRN_SERVICES=celery`` the broker process opens ``broker`` and Celery workers open
``services``; the files and ``<root>/services/progress`` (``progress.py``) are all they share.

How each side learns what the other did, without either seeing the other's memory:

* CommitLog end, worker side. The writer publishes MAX_OFFSET and CONFIRM_OFFSET after every
  append, once the bytes are in the shared mapping. A service process maps new segment files
  when they appear (``MappedFileQueue.sync_files``) and reads up to the published offset; the
  record decoder still stops at ``NeedMore`` or a zero magic, so a stale or torn value can
  only make it stop early. Decoding alone would not be enough: it cannot tell a record being
  copied in from a complete one, nor the flushed part from the rest under sync flush.
* ConsumeQueue end, broker side. The reput holder publishes REPUT_OFFSET after the units
  below it are written. The broker extends its view of a queue over valid units pointing
  below that offset (``ConsumeQueue.follow``): lazily when a read reaches the end it knows,
  and in ``follow_dispatch``, which walks the newly dispatched records so that listeners
  (long polls, live trace) fire exactly as after an in-process reput. Redis pub/sub (in
  ``workers/``) only wakes the broker early; correctness never depends on it.
* Restarts. Every open of the writer bumps GENERATION. A reput holder that sees a new
  generation (the broker restarted, and its recovery may have cut a torn tail) attaches
  again: it recovers the derived files against the new end, zeroes what it cut, and bumps
  ATTACH_COUNT; every follower reloads its views of the derived files when ATTACH_COUNT
  changes. Until the holder has attached, followers see nothing past the recovered end.
* Cleanup. A cleanup in one process deletes files others have mapped; CLEANUP_GENERATION
  tells them to drop the mappings of vanished front files (so the disk space comes back).

Invariants: only the reput holder writes ConsumeQueue units and index entries, only the
CommitLog writer appends, and every published offset is raised only after what it covers is
in place. Crash behaviour: nothing here is durable; the files are the truth and each side
rebuilds its view of them on (re)attach.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Literal

from mqcore.errors import CorruptIndexError
from mqcore.format.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from mqcore.format.record import DispatchRequest
from mqcore.store import offset_table
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.index.index_service import IndexService
from mqcore.store.recovery import derived_start, full_disk
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.recovery.recovery import (
    RecoveryReport,
    choose_start_segment,
    keep_torn_tail,
    rebuild_index_tail,
    report_truncated_segments,
    scan_commit_log,
)
from mqcore.store.reput.arrivals import arrivals_of_requests
from mqcore.store.sharing.progress import DISK_FULL, LOGIC_DISK_FULL, Progress, Slot, publish_config

if TYPE_CHECKING:
    from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

Role = Literal["standalone", "broker", "services"]
ROLES: tuple[Role, ...] = ("standalone", "broker", "services")


def _ignore(_request: DispatchRequest) -> None:
    return None


def _takes_queue(request: DispatchRequest) -> bool:
    return request.sys_flag & TRANSACTION_TYPE_MASK in (
        TRANSACTION_NOT_TYPE,
        TRANSACTION_COMMIT_TYPE,
    )


def progress_of(store: MessageStore) -> Progress:
    progress = store.progress
    if progress is None:
        raise RuntimeError(f"store {store.root} has no progress file (role {store.role})")
    return progress


# -- what the others published -------------------------------------------------------------


def dispatch_limit(progress: Progress) -> int:
    """Followers may show ConsumeQueue units pointing below this offset.

    The reput holder's REPUT_OFFSET, but not past the writer's recovered end until the
    holder has attached to the current generation (units beyond it may be a cut tail's)."""
    reput = progress.get(Slot.REPUT_OFFSET)
    if progress.get(Slot.REPUT_GENERATION) == progress.get(Slot.GENERATION):
        return reput
    return min(reput, progress.get(Slot.RECOVERED_END))


def new_queues(store: MessageStore, *, readonly: bool) -> ConsumeQueueStore:
    return ConsumeQueueStore(
        store.root,
        file_size_bytes=store.config.consume_queue_file_size,
        readonly=readonly,
        clock=store.clock,
    )


def new_index(
    store: MessageStore, *, readonly: bool, root: os.PathLike[str] | None = None
) -> IndexService:
    return IndexService(
        store.root if root is None else root,
        store.config.index_hash_slots,
        store.config.index_max_entries,
        store.clock,
        on_file_filled=store._on_index_file_filled,
        readonly=readonly,
    )


#: Views a follower replaced stay open this long for readers that picked them up just
#: before (a closed view would read as "file gone" and send a consumer past messages).
RETIRE_AFTER_S = 5.0


#: What a follower (or a rebuild's swap) replaces and closes later.
type View = ConsumeQueueStore | IndexService | ConsumeQueue


def retire(store: MessageStore, *views: View) -> None:
    """Close views replaced more than RETIRE_AFTER_S ago; keep these for later."""
    now = time.monotonic()
    keep: list[tuple[float, View]] = []
    for since, view in store.retired:
        if now - since >= RETIRE_AFTER_S:
            view.close()
        else:
            keep.append((since, view))
    keep += [(now, view) for view in views]
    store.retired = keep


def close_retired(store: MessageStore) -> None:
    for _since, view in store.retired:
        view.close()
    store.retired = []


def load_derived_views(store: MessageStore) -> None:
    """(Re)load the ConsumeQueues and index files as a follower sees them: every queue's end
    found by scanning valid units below :func:`dispatch_limit`. Replaces ``store.queues``
    and ``store.index``; readers still on the old objects finish on the old mappings.

    Followers map derived files read-only: a follower never creates, writes or deletes
    through a mapping (a read-write ``load`` would delete a zero-length last file the reput
    holder is creating). The flush service syncs them with ``fdatasync`` and the cleanup
    service unlinks, so neither needs a writable mapping."""
    limit = dispatch_limit(progress_of(store))
    queues = new_queues(store, readonly=True)
    queues.load()
    for topic in queues.topics():
        for queue in queues.queues(topic).values():
            queue.segments.reset_last_for_follow()
            queue.follow(limit, front=True)
            queue.correct_min_offset(store.commit_log.min_offset)
    index = new_index(store, readonly=True)
    index.load(True, 0)
    old_queues, old_index = store.queues, store.index
    store.queues, store.index = queues, index
    retire(store, old_queues, old_index)
    store.seen[Slot.ATTACH_COUNT] = progress_of(store).get(Slot.ATTACH_COUNT)
    store.seen[Slot.INDEX_GENERATION] = progress_of(store).get(Slot.INDEX_GENERATION)


# -- broker role ---------------------------------------------------------------------------


def recover_commit_log(store: MessageStore, last_exit_ok: bool) -> RecoveryReport:
    """CommitLog recovery (spec 5.6, 5.7) without touching derived files: the scan (which
    quarantines mid-log corruption, as ``recovery.recover`` does), then the torn tail copied
    to the quarantine, cut and zeroed. The derived files are recovered by the reput holder
    when it attaches to the new generation."""
    progress = progress_of(store)
    commit_log = store.commit_log
    report = RecoveryReport(last_exit_ok=last_exit_ok)
    segments = commit_log.segments.files
    if not segments:
        report.stop_reason = "empty CommitLog"
        return report
    dispatched = progress.get(Slot.REPUT_OFFSET) - 1  # a record starting here was dispatched
    start = choose_start_segment(
        segments,
        last_exit_ok=last_exit_ok,
        dispatched_offset=dispatched,
        checkpoint_min_timestamp=store.checkpoint.min_timestamp(),
        check_crc=store.config.check_crc_on_recover,
        file_size=commit_log.file_size,
    )
    truncated = report_truncated_segments(commit_log, report)
    if truncated is not None:
        start = min(start, truncated)
    end = scan_commit_log(
        commit_log,
        start,
        dispatch_from=dispatched,
        dispatch_all=False,
        dispatch=_ignore,
        report=report,
    )
    report.end_offset = end
    keep_torn_tail(commit_log, end, report, report_problem=last_exit_ok)
    commit_log.segments.truncate_dirty(end)
    if report.eventful:
        log.warning("%s", report.summary())
    else:
        log.info("%s", report.summary())
    return report


def open_broker(store: MessageStore, last_exit_ok: bool) -> None:
    """Load and recover as the CommitLog writer of a store whose services run elsewhere."""
    progress = progress_of(store)
    store.commit_log.load()
    store.checkpoint = Checkpoint.load(store.root / "checkpoint")
    store.recovery = report = recover_commit_log(store, last_exit_ok)
    end = report.end_offset
    for slot in (Slot.MAX_OFFSET, Slot.CONFIRM_OFFSET, Slot.FLUSHED_OFFSET, Slot.RECOVERED_END):
        progress.set(slot, end)
    progress.set(Slot.LAST_EXIT_OK, 1 if last_exit_ok else 0)
    progress.set(Slot.WRITER_PID, os.getpid())
    progress.increment(Slot.GENERATION)  # last: the offsets above belong to it
    publish_config(store.root, store.config)
    load_derived_views(store)
    limit = dispatch_limit(progress)
    store.reput_offset = max(min(limit, end), store.commit_log.min_offset)
    # The next queue offsets: what the ConsumeQueues hold, the queue offset snapshot (a lost
    # ConsumeQueue must not restart at 0), and the records after the older of the two.
    snapshot = offset_table.usable_snapshot(store, end)
    begin = store.reput_offset if snapshot is None else min(snapshot.log_offset, store.reput_offset)
    scan = offset_table.scan_after(store, max(begin, store.commit_log.min_offset), end)
    offset_table.set_queue_offsets(store, snapshot, scan, dict(store.queues.damaged))
    store.queue_snapshot = snapshot
    for slot in (Slot.CLEANUP_GENERATION, Slot.ATTACH_COUNT, Slot.INDEX_GENERATION):
        store.seen.setdefault(slot, progress.get(slot))


def publish_standalone(store: MessageStore, last_exit_ok: bool) -> None:
    """After a standalone writer's recovery: its offsets and a new generation, for the
    followers (tools, Celery workers started later)."""
    progress = store.progress
    if progress is None:
        return
    end = store.commit_log.max_offset
    for slot in (Slot.MAX_OFFSET, Slot.CONFIRM_OFFSET, Slot.FLUSHED_OFFSET):
        progress.set(slot, end)
    progress.set(Slot.RECOVERED_END, end)
    progress.set(Slot.LAST_EXIT_OK, 1 if last_exit_ok else 0)
    progress.set(Slot.WRITER_PID, os.getpid())
    progress.set(Slot.REPUT_OFFSET, store.reput_offset)
    generation = progress.increment(Slot.GENERATION)
    progress.set(Slot.REPUT_GENERATION, generation)
    full_disk.quietly(  # the workers keep the geometry published last time
        lambda: publish_config(store.root, store.config),
        f"store {store.root}: store.json not published",
    )


def publish_append(store: MessageStore, end: int = -1) -> None:
    """After an append (or a sync flush): the CommitLog end the writer reached.

    ``end``: the end of the caller's append when it knows it (the put path), else -1 to
    read it. Another writer's later end is published by that writer; each slot only rises.
    Slots are bound once (``_MAX`` ...) and ``confirm_offset`` is worked out here: the
    put path calls this once a batch, and the property chain cost ~1 us of it."""
    progress = store.progress
    if progress is None:
        return
    commit_log = store.commit_log
    if end < 0:
        end = commit_log.max_offset
    flushed = commit_log.flushed_offset
    confirm = flushed if store.config.flush == "sync" else end  # CommitLog.confirm_offset
    raise_to = progress.raise_to
    with store.publish_lock:
        raise_to(_MAX, end)
        raise_to(_FLUSHED, flushed)
        raise_to(_CONFIRM, confirm)


_MAX = Slot.MAX_OFFSET
_FLUSHED = Slot.FLUSHED_OFFSET
_CONFIRM = Slot.CONFIRM_OFFSET


def housekeeping(store: MessageStore) -> None:
    """A follower's periodic catch-up with the other processes: reload the derived views
    after a new reput holder attached, drop files a cleanup deleted, take the disk-full
    flag. Cheap when nothing changed (a few slot reads)."""
    progress = progress_of(store)
    seen = store.seen
    if progress.get(Slot.ATTACH_COUNT) != seen.get(Slot.ATTACH_COUNT):
        load_derived_views(store)
    if store.role == "broker":
        derived_start.follow_rebuild(store)
    cleanup = progress.get(Slot.CLEANUP_GENERATION)
    if cleanup != seen.get(Slot.CLEANUP_GENERATION):
        seen[Slot.CLEANUP_GENERATION] = cleanup
        follow_cleanup(store)
    if progress.get(Slot.INDEX_GENERATION) != seen.get(Slot.INDEX_GENERATION):
        reload_index(store)
    if store.role == "broker":
        flags = progress.get(Slot.DISK_FLAGS)
        if flags & (DISK_FULL | LOGIC_DISK_FULL):
            usage = progress.get(Slot.DISK_USAGE_PPM) / 10_000
            store.set_writable(
                False, f"disk full ({usage:.1f}% used): puts refused until cleanup frees space"
            )
        elif store.unwritable_reason.startswith("disk full"):
            store.set_writable(True, "")


def follow_cleanup(store: MessageStore) -> None:
    """Drop the mappings of front files a cleanup deleted elsewhere and move min offsets."""
    store.commit_log.segments.sync_files(front=True, end=False)
    min_offset = store.commit_log.min_offset
    limit = dispatch_limit(progress_of(store))
    attached = store.role == "services" and store.attached
    for topic in store.queues.topics():
        for queue in store.queues.queues(topic).values():
            if attached:
                queue.delete_expired_files(min_offset)  # the files are gone: drops mappings
            else:
                queue.follow(limit, front=True)
            queue.correct_min_offset(min_offset)
    if attached:
        store.index.delete_expired(min_offset)
    else:
        reload_index(store)


def reload_index(store: MessageStore) -> None:
    """Follower: a fresh view of the index files (another process adds, fills and deletes
    them). Cheap: index files are few; the hash tables are mapped, not read."""
    index = new_index(store, readonly=True)
    try:
        index.load(True, 0)
    except CorruptIndexError:
        # A file caught between its creation and its ftruncate: keep the old view this time.
        index.close()
        return
    old, store.index = store.index, index
    retire(store, old)
    store.seen[Slot.INDEX_GENERATION] = progress_of(store).get(Slot.INDEX_GENERATION)


def refresh_index(store: MessageStore) -> None:
    """Follower, before a query: pick up new files, and the newest file's header."""
    files = store.index.files
    try:
        names = sorted(n for n in os.listdir(store.index.directory) if len(n) == 17 and n.isdigit())
    except FileNotFoundError:
        names = []
    if names != [f.name for f in files]:
        reload_index(store)
    elif files:
        files[-1].refresh_header()


def refresh_queue(store: MessageStore, topic: str, queue_id: int) -> ConsumeQueue | None:
    """Follower, before a read: the queue (discovered if new) extended to what is dispatched."""
    queue = store.queues.get(topic, queue_id)
    if queue is None:
        found = store.queues.discover(topic, queue_id)
        if not found:
            return None
        queue = found[0]
        queue.follow(dispatch_limit(progress_of(store)), front=True)
        queue.correct_min_offset(store.commit_log.min_offset)
        return queue
    queue.follow(dispatch_limit(progress_of(store)))
    return queue


def refresh_all_queues(store: MessageStore) -> None:
    """Follower: discover new queues and extend every queue (the flush and cleanup services)."""
    limit = dispatch_limit(progress_of(store))
    for queue in store.queues.discover():
        queue.correct_min_offset(store.commit_log.min_offset)
    for topic in store.queues.topics():
        for queue in store.queues.queues(topic).values():
            queue.follow(limit)


def follow_dispatch(store: MessageStore, max_bytes: int) -> int:
    """Broker role's reput: catch up with what the worker dispatched.

    Walks the CommitLog from the followed offset up to the worker's REPUT_OFFSET, extends
    each touched queue once, then calls the arrivals listeners once and the listeners for
    every record, as an in-process reput would have. Caller holds the store's reput lock.

    Returns:
        Records followed.
    """
    housekeeping(store)
    limit = dispatch_limit(progress_of(store))
    requests: list[DispatchRequest] = []
    for item in store.commit_log.iter_dispatch(
        store.reput_offset, limit, max_bytes, store.delay_levels_ms
    ):
        if isinstance(item, int):
            end = item
            break
        requests.append(item)
    else:  # pragma: no cover - iter_dispatch always ends with an int
        end = store.reput_offset
    touched = {(r.topic, r.queue_id) for r in requests if _takes_queue(r)}
    for topic, queue_id in touched:
        refresh_queue(store, topic, queue_id)
    store.reput_offset = max(store.reput_offset, end)
    if store.arrivals_listeners and requests:
        arrivals = arrivals_of_requests(requests)
        if arrivals:
            for arrivals_listener in store.arrivals_listeners:
                arrivals_listener(arrivals)
    for request in requests:
        for listener in store.listeners:
            listener(request)
    return len(requests)


# -- services role ---------------------------------------------------------------------------


def open_services(store: MessageStore) -> None:
    """Load as a service process: the CommitLog mapped read-only up to the published end,
    derived files as a follower until :func:`attach`."""
    progress = progress_of(store)
    store.commit_log.load()
    store.commit_log.segments.reset_last_for_follow()
    follow_commit_log(store)
    store.checkpoint = Checkpoint.load(store.root / "checkpoint")
    load_derived_views(store)
    store.reput_offset = progress.get(Slot.REPUT_OFFSET)
    for slot in (Slot.CLEANUP_GENERATION, Slot.INDEX_GENERATION):
        store.seen[slot] = progress.get(slot)


def follow_commit_log(store: MessageStore) -> int:
    """Services role: map segment files the writer created and read up to its published
    end. Returns the end (MAX_OFFSET)."""
    progress = progress_of(store)
    end = progress.get(Slot.MAX_OFFSET)
    segments = store.commit_log.segments
    last = segments.last()
    if last is None or end >= last.base_offset + last.file_size:
        segments.sync_files(front=False, end=True)  # the writer rolled to a new segment
    segments.follow_end(end)
    return end


def confirm_offset(store: MessageStore) -> int:
    """How far a service-role reput may dispatch: the writer's CONFIRM_OFFSET."""
    return progress_of(store).get(Slot.CONFIRM_OFFSET)


def _zero_cut_units(ends_before: dict[ConsumeQueue, int]) -> None:
    """Zero ConsumeQueue units a truncation cut, so no follower can read them back."""
    for queue, old_end in ends_before.items():
        last = queue.segments.last()
        if last is None:
            continue
        start = last.wrote_position
        stop = min(max(old_end - last.base_offset, 0), last.file_size)
        if stop > start:
            last.write_at(start, bytes(stop - start))


def attach(store: MessageStore) -> None:
    """Become the one process that writes derived files (the caller holds the reput lock).

    Recovery of the derived files against the CommitLog end the writer published: reload
    them for writing; after a writer restart that found a crash, drop index files newer than
    the checkpoint (RocketMQ's abnormal start); recover each queue (spec 3.2); cut and zero
    units and index files beyond the end (5.8); restart dispatch where the ConsumeQueues (or
    a dropped index file) stop. Re-dispatching is idempotent, so starting early is safe.
    """
    progress = progress_of(store)
    generation = progress.get(Slot.GENERATION)
    if (
        store.attached_generation == generation
        and progress.get(Slot.REPUT_GENERATION) == generation
        and progress.get(Slot.ATTACH_COUNT) == store.seen.get(Slot.ATTACH_COUNT)
    ):
        # This store object was the last holder and nobody attached since: its view of the
        # derived files is still the truth (a worker's lease ending and the next starting).
        store.attached = True
        progress.set(Slot.REPUT_HOLDER_PID, os.getpid())
        return
    first_in_generation = progress.get(Slot.REPUT_GENERATION) != generation
    # The index is suspect after a crash of the writer (pages may be lost) and after the
    # previous reput holder died without detaching (its pid is still published): an index
    # file's header is written once per batch of keys, so a killed holder leaves entries and
    # slots past the header's count, and new puts would cut those hash chains. As RocketMQ
    # does on an abnormal start, index files newer than the last one filled are rebuilt.
    holder_died = progress.get(Slot.REPUT_HOLDER_PID) != 0
    crashed = (first_in_generation and not progress.get(Slot.LAST_EXIT_OK)) or holder_died
    store.commit_log.segments.sync_files(front=True, end=True)
    end = follow_commit_log(store)
    store.checkpoint = Checkpoint.load(store.root / "checkpoint")
    filled = max(store.checkpoint.index_msg_timestamp, progress.get(Slot.INDEX_TIMESTAMP))
    store.checkpoint.index_msg_timestamp = filled
    derived_start.before_load(store)  # a swap of rebuilt files a crash interrupted
    queues = new_queues(store, readonly=False)
    queues.load()
    index = new_index(store, readonly=False)
    dropped = index.load(not crashed, filled)
    old_queues, old_index = store.queues, store.index
    store.queues, store.index = queues, index
    old_queues.close()
    old_index.close()
    queues.recover_all()
    # After a writer restart, whatever points at or past the end its recovery found may be a
    # cut record's (new records reuse those offsets): cut there. Otherwise at the live end.
    cut = min(end, progress.get(Slot.RECOVERED_END)) if first_in_generation else end
    ends_before = {
        q: q.segments.max_offset for t in queues.topics() for q in queues.queues(t).values()
    }
    queues.truncate_dirty(cut)
    _zero_cut_units({q: e for q, e in ends_before.items() if q.segments.max_offset < e})
    report = RecoveryReport(last_exit_ok=not crashed, index_files_dropped=list(dropped))
    rebuild_from = rebuild_index_tail(store.commit_log, index, cut, report)
    dispatched = queues.max_phys_offset()
    start = dispatched if dispatched >= 0 else 0
    if rebuild_from is not None:
        start = min(start, rebuild_from)
    files = index.files
    if dropped:
        start = min(start, files[-1].end_phys_offset if files else 0)
    elif files and store.config.message_index_enable:
        # Dispatch writes a batch's units before its index keys: a runner killed between
        # the two left records that are in a queue but not in the index. Their keys are
        # re-put from the last record indexed (the index skips what it holds).
        start = min(start, files[-1].end_phys_offset)
    store.reput_offset = max(start, store.commit_log.min_offset)
    for topic in queues.topics():
        for queue in queues.queues(topic).values():
            queue.correct_min_offset(store.commit_log.min_offset)
    # The start check (derived_start.py): damaged queues and index get rebuilt by the
    # rebuild service; the broker refuses puts to those queues once it sees the job.
    derived_start.settle_attached(store, cut)
    visible = max(store.reput_offset, dispatched)
    if first_in_generation:
        progress.set(Slot.REPUT_OFFSET, visible)
    else:
        progress.raise_to(Slot.REPUT_OFFSET, visible)
    progress.set(Slot.REPUT_GENERATION, generation)
    store.attached_generation = generation
    store.attached = True
    progress.set(Slot.REPUT_HOLDER_PID, os.getpid())
    progress.increment(Slot.ATTACH_COUNT)
    for slot in (Slot.CLEANUP_GENERATION, Slot.ATTACH_COUNT, Slot.INDEX_GENERATION):
        store.seen[slot] = progress.get(slot)
    log.info(
        "reput attached to %s (generation %d): dispatch restarts at %d, log ends at %d%s",
        store.root, generation, store.reput_offset, end,
        f", index files dropped {report.index_files_dropped}" if report.index_files_dropped else "",
    )  # fmt: skip


def before_reput(store: MessageStore) -> int:
    """Services role, each reput pass: re-attach after a writer restart, follow cleanups and
    the CommitLog. Returns the offset dispatch may go up to."""
    if not store.attached:
        raise RuntimeError(
            "a services-role store dispatches only after attach() (hold the reput lock)"
        )
    progress = progress_of(store)
    if progress.get(Slot.GENERATION) != store.attached_generation:
        attach(store)
    cleanup = progress.get(Slot.CLEANUP_GENERATION)
    if cleanup != store.seen.get(Slot.CLEANUP_GENERATION):
        store.seen[Slot.CLEANUP_GENERATION] = cleanup
        follow_cleanup(store)
    while True:
        follow_commit_log(store)
        confirm = confirm_offset(store)
        # The writer publishes its offsets before its new generation: an unchanged generation
        # read after the offsets proves they belong to the generation attached to.
        if progress.get(Slot.GENERATION) == store.attached_generation:
            return confirm
        attach(store)


def publish_reput(store: MessageStore) -> None:
    """After a reput pass (services and standalone): what the followers may now show."""
    progress = store.progress
    if progress is None:
        return
    progress.raise_to(Slot.REPUT_OFFSET, store.reput_offset)
    progress.raise_to(Slot.LOGICS_TIMESTAMP, store.checkpoint.logics_msg_timestamp)
    progress.raise_to(Slot.INDEX_TIMESTAMP, store.checkpoint.index_msg_timestamp)


def detach(store: MessageStore) -> None:
    """Stop writing derived files (the reput lock is about to be released): flush them."""
    if not store.attached:
        return
    while store.queues.flush_all(0):
        pass
    store.index.flush()
    publish_reput(store)
    progress = store.progress
    if progress is not None and progress.get(Slot.REPUT_HOLDER_PID) == os.getpid():
        progress.set(Slot.REPUT_HOLDER_PID, 0)
    store.attached = False
