"""Follower: how a process catches up with what the others wrote to the store directory.

A broker-role store follows the ConsumeQueues and index files its Celery worker writes; a
services-role store follows the CommitLog the broker appends to (and the derived files,
until it holds reput). How each side learns what the other did, without either seeing the
other's memory:

* CommitLog end, worker side. The writer publishes MAX_OFFSET and CONFIRM_OFFSET after every
  append, once the bytes are in the shared mapping. A service process maps new segment files
  when they appear (``MappedFileQueue.sync_files``) and reads up to the published offset; the
  record decoder still stops at ``NeedMore`` or a zero magic, so a stale or torn value can
  only make it stop early. Decoding alone would not be enough: it cannot tell a record being
  copied in from a complete one, nor the flushed part from the rest under sync flush.
* ConsumeQueue end, broker side. The reput holder publishes REPUT_OFFSET after the units
  below it are written. The broker extends its view of a queue over valid units pointing
  below that offset (``ConsumeQueue.follow``): lazily when a read reaches the end it knows,
  and in :meth:`Follower.follow_dispatch`, which walks the newly dispatched records so that
  listeners (long polls, live trace) fire exactly as after an in-process reput. Redis
  pub/sub (in ``workers/``) only wakes the broker early; correctness never depends on it.
* Restarts. Every open of the writer bumps GENERATION; the reput holder attaches again
  (``reput_holder.py``) and bumps ATTACH_COUNT; every follower reloads its views of the
  derived files when ATTACH_COUNT changes. Until the holder has attached, followers see
  nothing past the recovered end (:func:`dispatch_limit`).
* Cleanup. A cleanup in one process deletes files others have mapped; CLEANUP_GENERATION
  tells them to drop the mappings of vanished front files (so the disk space comes back).

Thread-safety: the caller holds the store's follow lock. Crash behaviour: nothing here is
durable; a follower rebuilds its views from the files on open.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from mqcore.errors import CorruptIndexError
from mqcore.format.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from mqcore.format.record import DispatchRequest
from mqcore.store.commit_log import CommitLog
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.reput.arrivals import ArrivalsListener, arrivals_of_requests
from mqcore.store.sharing.derived_views import DerivedViews
from mqcore.store.sharing.progress import Progress, Slot

Listener = Callable[[DispatchRequest], None]


def _nothing() -> None:
    return None


def dispatch_limit(progress: Progress) -> int:
    """Followers may show ConsumeQueue units pointing below this offset.

    The reput holder's REPUT_OFFSET, but not past the writer's recovered end until the
    holder has attached to the current generation (units beyond it may be a cut tail's)."""
    reput = progress.get(Slot.REPUT_OFFSET)
    if progress.get(Slot.REPUT_GENERATION) == progress.get(Slot.GENERATION):
        return reput
    return min(reput, progress.get(Slot.RECOVERED_END))


def _takes_queue(request: DispatchRequest) -> bool:
    return request.sys_flag & TRANSACTION_TYPE_MASK in (
        TRANSACTION_NOT_TYPE,
        TRANSACTION_COMMIT_TYPE,
    )


class Follower:
    """Keeps ``views`` (and, for a services process, ``commit_log``'s end) in step with what
    the other processes published in ``progress``.

    Args:
        progress: the shared slots.
        commit_log: the store's CommitLog (followed by a services process; walked by the
            broker's :meth:`follow_dispatch`).
        views: the derived views this follower replaces.
        listeners: the store's per-record listeners (the live list, not a copy).
        arrivals_listeners: the store's arrivals listeners (the live list).
        after_housekeeping: the broker's own catch-up steps (rebuild jobs, the worker's
            disk-full flag), run by :meth:`housekeeping`; nothing for a services process.
    """

    def __init__(
        self,
        progress: Progress,
        commit_log: CommitLog,
        views: DerivedViews,
        *,
        listeners: Sequence[Listener] = (),
        arrivals_listeners: Sequence[ArrivalsListener] = (),
        after_housekeeping: Callable[[], None] = _nothing,
    ) -> None:
        self.progress = progress
        self.commit_log = commit_log
        self.views = views
        self._listeners = listeners
        self._arrivals_listeners = arrivals_listeners
        self._after_housekeeping = after_housekeeping
        #: The progress counters last acted on (ATTACH_COUNT, CLEANUP_GENERATION, ...).
        self.seen: dict[Slot, int] = {}

    def limit(self) -> int:
        """:func:`dispatch_limit` of this store's progress."""
        return dispatch_limit(self.progress)

    def note(self, *slots: Slot, keep: bool = False) -> None:
        """Remember the current value of ``slots`` as acted on (``keep``: only where none is
        remembered yet)."""
        for slot in slots:
            if not keep or slot not in self.seen:
                self.seen[slot] = self.progress.get(slot)

    # -- derived files ---------------------------------------------------------------------

    def load_views(self) -> None:
        """(Re)load the ConsumeQueues and index files as a follower sees them: every queue's
        end found by scanning valid units below :func:`dispatch_limit`. Readers still on the
        old views finish on the old mappings.

        Followers map derived files read-only: a follower never creates, writes or deletes
        through a mapping (a read-write ``load`` would delete a zero-length last file the
        reput holder is creating). The flush service syncs them with ``fdatasync`` and the
        cleanup service unlinks, so neither needs a writable mapping."""
        limit = self.limit()
        min_offset = self.commit_log.min_offset
        queues = self.views.new_queues(readonly=True)
        queues.load()
        for topic in queues.topics():
            for queue in queues.queues(topic).values():
                queue.segments.reset_last_for_follow()
                queue.follow(limit, front=True)
                queue.correct_min_offset(min_offset)
        index = self.views.new_index(readonly=True)
        index.load(True, 0)
        self.views.replace(queues, index)
        self.note(Slot.ATTACH_COUNT, Slot.INDEX_GENERATION)

    def reload_index(self) -> None:
        """A fresh view of the index files (another process adds, fills and deletes them).
        Cheap: index files are few; the hash tables are mapped, not read."""
        index = self.views.new_index(readonly=True)
        try:
            index.load(True, 0)
        except CorruptIndexError:
            # A file caught between its creation and its ftruncate: keep the old view this time.
            index.close()
            return
        self.views.replace(index=index)
        self.note(Slot.INDEX_GENERATION)

    def refresh_index(self) -> None:
        """Before a query: pick up new files, and the newest file's header."""
        index = self.views.index
        files = index.files
        try:
            names = sorted(n for n in os.listdir(index.directory) if len(n) == 17 and n.isdigit())
        except FileNotFoundError:
            names = []
        if names != [f.name for f in files]:
            self.reload_index()
        elif files:
            files[-1].refresh_header()

    def refresh_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """Before a read: the queue (discovered if new) extended to what is dispatched."""
        queues = self.views.queues
        queue = queues.get(topic, queue_id)
        if queue is None:
            found = queues.discover(topic, queue_id)
            if not found:
                return None
            queue = found[0]
            queue.follow(self.limit(), front=True)
            queue.correct_min_offset(self.commit_log.min_offset)
            return queue
        queue.follow(self.limit())
        return queue

    def refresh_all_queues(self) -> None:
        """Discover new queues and extend every queue (the flush and cleanup services)."""
        limit = self.limit()
        queues = self.views.queues
        for queue in queues.discover():
            queue.correct_min_offset(self.commit_log.min_offset)
        for topic in queues.topics():
            for queue in queues.queues(topic).values():
                queue.follow(limit)

    def follow_cleanup(self, *, holder: bool = False) -> None:
        """Drop the mappings of front files a cleanup deleted elsewhere and move min offsets.
        ``holder``: this process writes the derived files (it deletes through its views
        instead of following them)."""
        self.commit_log.segments.sync_files(front=True, end=False)
        min_offset = self.commit_log.min_offset
        limit = self.limit()
        queues = self.views.queues
        for topic in queues.topics():
            for queue in queues.queues(topic).values():
                if holder:
                    queue.delete_expired_files(min_offset)  # the files are gone: drops mappings
                else:
                    queue.follow(limit, front=True)
                queue.correct_min_offset(min_offset)
        if holder:
            self.views.index.delete_expired(min_offset)
        else:
            self.reload_index()

    def announce(self, slot: Slot) -> int:
        """Increment ``slot`` for the other processes and count it as seen here (this
        process made the change its followers must act on). Returns the new value."""
        value = self.progress.increment(slot)
        self.seen[slot] = value
        return value

    def take_cleanup(self) -> bool:
        """Whether a cleanup ran elsewhere since last asked (then it counts as seen)."""
        cleanup = self.progress.get(Slot.CLEANUP_GENERATION)
        if cleanup == self.seen.get(Slot.CLEANUP_GENERATION):
            return False
        self.seen[Slot.CLEANUP_GENERATION] = cleanup
        return True

    def housekeeping(self) -> None:
        """Periodic catch-up with the other processes: reload the derived views after a new
        reput holder attached, drop files a cleanup deleted, then the owner's own steps.
        Cheap when nothing changed (a few slot reads)."""
        progress = self.progress
        if progress.get(Slot.ATTACH_COUNT) != self.seen.get(Slot.ATTACH_COUNT):
            self.load_views()
        self._after_housekeeping()
        if self.take_cleanup():
            self.follow_cleanup()
        if progress.get(Slot.INDEX_GENERATION) != self.seen.get(Slot.INDEX_GENERATION):
            self.reload_index()

    # -- the CommitLog ---------------------------------------------------------------------

    def follow_commit_log(self) -> int:
        """Services role: map segment files the writer created and read up to its published
        end. Returns the end (MAX_OFFSET)."""
        end = self.progress.get(Slot.MAX_OFFSET)
        segments = self.commit_log.segments
        last = segments.last()
        if last is None or end >= last.base_offset + last.file_size:
            segments.sync_files(front=False, end=True)  # the writer rolled to a new segment
        segments.follow_end(end)
        return end

    def confirm_offset(self) -> int:
        """How far a services-role reput may dispatch: the writer's CONFIRM_OFFSET."""
        return self.progress.get(Slot.CONFIRM_OFFSET)

    def open_services(self) -> int:
        """Load as a services process: the CommitLog mapped read-only up to the published
        end, derived files as a follower until the reput holder attaches. Returns the
        dispatch position to start from (the published REPUT_OFFSET)."""
        self.commit_log.load()
        self.commit_log.segments.reset_last_for_follow()
        self.follow_commit_log()
        self.views.load_checkpoint()
        self.load_views()
        self.note(Slot.CLEANUP_GENERATION, Slot.INDEX_GENERATION)
        return self.progress.get(Slot.REPUT_OFFSET)

    def follow_dispatch(
        self, reput_offset: int, max_bytes: int, delay_levels_ms: Sequence[int]
    ) -> tuple[int, int]:
        """The broker role's reput: catch up with what the worker dispatched.

        Walks the CommitLog from ``reput_offset`` up to the worker's REPUT_OFFSET, extends
        each touched queue once, then calls the arrivals listeners once and the listeners
        for every record, as an in-process reput would have. Caller holds the follow lock.

        Returns:
            Records followed, and the new dispatch position.
        """
        self.housekeeping()
        limit = self.limit()
        requests: list[DispatchRequest] = []
        end = reput_offset
        for item in self.commit_log.iter_dispatch(reput_offset, limit, max_bytes, delay_levels_ms):
            if isinstance(item, int):
                end = item
                break
            requests.append(item)
        touched = {(r.topic, r.queue_id) for r in requests if _takes_queue(r)}
        for topic, queue_id in touched:
            self.refresh_queue(topic, queue_id)
        if self._arrivals_listeners and requests:
            arrivals = arrivals_of_requests(requests)
            if arrivals:
                for arrivals_listener in self._arrivals_listeners:
                    arrivals_listener(arrivals)
        for request in requests:
            for listener in self._listeners:
                listener(request)
        return len(requests), max(reput_offset, end)
