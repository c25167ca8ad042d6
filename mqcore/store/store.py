"""MessageStore: the facade that composes the store's parts. It owns no algorithm.

::

    put_message ──▶ CommitLog.append ──(sync flush: flush_until)──▶ PutResult ─▶ Publisher
                          │
    reput_once  ◀─────────┘  reput_pass.dispatch_pass ─▶ DispatchWriter ─▶ ConsumeQueue.put
                                                                      ├▶ IndexService.build_index
                                                                      ├▶ arrivals listeners
                                                                      └▶ listeners (live trace)
    get_messages, get_records, query_by_key, view_by_id, offset_for_time ─▶ queries.py

The parts it is given or builds: the CommitLog, the derived views (ConsumeQueues, index,
checkpoint: ``sharing/derived_views.py``), the dispatch writer, and for the process role
(``sharing/process_role.py``) the Publisher, Follower and ReputHolder of ``sharing/``.

Thread-safety: every public method may be called from any thread once the store is open.
Appends serialise on the CommitLog's put lock; dispatch serialises on the reput lock (one
reput runner at a time, whichever thread runs it); a follower's catch-up on the follow lock;
reads take no store-wide lock.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from mqcore.clock import Clock, SystemClock
from mqcore.errors import DiskFullError, StoreClosedError
from mqcore.format.msgid import UniqKeyGenerator
from mqcore.format.record import DispatchRequest
from mqcore.message import Message, MessageExt
from mqcore.store import offset_table
from mqcore.store.commit_log import CommitLog
from mqcore.store.config import StoreConfig
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.files.lockfile import StoreLock
from mqcore.store.files.prefault import Prefaulter
from mqcore.store.files.service_lock import CONTINUOUS_SERVICES, ServiceLocks
from mqcore.store.health import StoreHealth
from mqcore.store.index.index_service import IndexService
from mqcore.store.put.appender import Appender
from mqcore.store.put.plain_batch import PlainColumns
from mqcore.store.queue_snapshot import QueueOffsetSnapshot
from mqcore.store.read import queries
from mqcore.store.read.record_views import RecordsResult
from mqcore.store.recovery import derived_start, full_disk
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.recovery.quarantine import Quarantine
from mqcore.store.recovery.recovery import RecoveryReport, recover
from mqcore.store.refusals import DISK_SOURCES, Refusals
from mqcore.store.reput import reput_pass
from mqcore.store.reput.arrivals import ArrivalsListener
from mqcore.store.reput.dispatch_write import DispatchWriter
from mqcore.store.results import (
    BatchPutResults,
    GetResult,
    PutResult,
    PutStatus,
    RefusedPutResult,
)
from mqcore.store.sharing import writer_open
from mqcore.store.sharing.derived_views import DerivedViews
from mqcore.store.sharing.follower import Follower, dispatch_limit
from mqcore.store.sharing.process_role import ProcessRole, check_process_role
from mqcore.store.sharing.progress import Progress, Slot
from mqcore.store.sharing.publisher import Publisher
from mqcore.store.sharing.reput_holder import ReputHolder, StartChecks

log = logging.getLogger(__name__)

Listener = Callable[[DispatchRequest], None]


def _ignore(request: DispatchRequest) -> None:
    """Read-only opens dispatch nothing."""


class MessageStore:
    """A RocketMQ-compatible store rooted at ``root``. Use ``open()``/``close()`` or ``with``.

    Args:
        root: the store directory (created if missing).
        config: sizes, flush mode and service settings; RocketMQ's defaults when omitted.
        clock: time source (tests pass a FakeClock).
        readonly: open without the writer lock, for tools and Spark; puts then raise.
        role: the process role, who else works on the store directory
            (``sharing/process_role.py``): ``standalone`` (default) does everything in this
            process; ``broker`` appends and follows the derived files a Celery worker
            writes; ``services`` is that worker (no writer lock).
        dispatch: the class of the dispatch writer reput writes through
            (``reput/dispatch_write.py``); tests give ``ReferenceDispatchWriter``, the
            one-request-at-a-time oracle.
        uniq: the generator of the UNIQ_KEYs given to messages without one (tests pass one
            with a fixed host, pid and counter).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        clock: Clock | None = None,
        readonly: bool = False,
        role: ProcessRole = "standalone",
        dispatch: type[DispatchWriter] = DispatchWriter,
        uniq: UniqKeyGenerator | None = None,
    ) -> None:
        self.role: ProcessRole = check_process_role(role, readonly=readonly)
        self.root = Path(root)
        self.config = config or StoreConfig()
        self.clock: Clock = clock or SystemClock()
        self.readonly = readonly
        self.commit_log = CommitLog(
            self.root, self.config, self.clock, readonly=readonly or role == "services"
        )
        self.delay_levels_ms = self.commit_log.delay_levels_ms
        #: The ConsumeQueues, index and checkpoint as this process sees them.
        self.views = DerivedViews(
            self.root, self.config, self.clock, readonly=readonly or role == "broker"
        )
        self.recovery: RecoveryReport | None = None
        #: Damaged queues being rebuilt, and why: puts to them are refused (``derived_start``).
        self.rebuilding_queues: dict[tuple[str, int], str] = {}
        #: Why the index is damaged ("" when it is not); its rebuild clears it.
        self.index_damage = ""
        #: The last queue offset snapshot written or read (``queue_snapshot.py``).
        self.queue_snapshot: QueueOffsetSnapshot | None = None
        #: Broker role: the rebuild job files' mtimes last read (``derived_start``).
        self.seen_rebuild: tuple[int, ...] = ()
        self.queues.on_topic_deleted = lambda topic: offset_table.forget_topic(self, topic)
        #: Problems (kept until acknowledged) and conditions of this store (``health.py``).
        self.health = StoreHealth(self.root, self.clock, readonly=readonly)
        #: Corrupt CommitLog ranges, kept in place and skipped (``quarantine.py``).
        self.quarantine = Quarantine(self.root, self.clock, readonly=readonly, health=self.health)
        self.commit_log.quarantine = self.quarantine
        self.reput_offset = 0
        #: Why puts are refused, by source (``refusals.py``); ``writable`` while none, else
        #: ``unwritable_reason`` says why (e.g. the disk-full check).
        self._refusals = Refusals()
        self.writable = not readonly and role != "services"
        if not self.writable:
            self._refusals.set("opened", f"opened {'read-only' if readonly else role}")
        self.unwritable_reason = self._refusals.reason
        #: Offsets shared with the other processes (``progress.py``); None when read-only.
        self.progress: Progress | None = None
        self._listeners: list[Listener] = []
        self._arrivals_listeners: list[ArrivalsListener] = []
        #: Reput's writes (``dispatch_write.py``), into ``views``, then the listeners.
        self.dispatch = dispatch(
            self.views,
            index_enabled=self.config.message_index_enable,
            listeners=self._listeners,
            arrivals_listeners=self._arrivals_listeners,
        )
        #: What this process publishes for the others; bound to ``progress`` by ``open``.
        self.publisher = Publisher(None, self.commit_log, self.config, self.root)
        self._appender = Appender(
            self.commit_log,
            self.config,
            self.clock,
            uniq or UniqKeyGenerator(clock=self.clock),
            self.publisher,
        )
        #: Set after every append; the inline reput loop waits on it instead of polling.
        self.appended = self._appender.appended
        self._follower: Follower | None = None
        #: Services role: the turn as the one writer of the derived files.
        self.reput_holder: ReputHolder | None = None
        self._follow_lock = threading.RLock()
        self._service_locks = ServiceLocks(self.root, CONTINUOUS_SERVICES)
        self._lock = StoreLock(self.root)
        self._reput_lock = threading.Lock()
        self._open = False

    # -- the parts ------------------------------------------------------------------------

    @property
    def queues(self) -> ConsumeQueueStore:
        """The ConsumeQueues as this process sees them now (``views``)."""
        return self.views.queues

    @queues.setter
    def queues(self, queues: ConsumeQueueStore) -> None:
        self.views.queues = queues

    @property
    def index(self) -> IndexService:
        """The index files as this process sees them now (``views``)."""
        return self.views.index

    @index.setter
    def index(self, index: IndexService) -> None:
        self.views.index = index

    @property
    def checkpoint(self) -> Checkpoint:
        return self.views.checkpoint

    @property
    def prefaulter(self) -> Prefaulter | None:
        """The CommitLog writer's pre-fault thread (``files/prefault.py``) while open."""
        return self._appender.prefaulter

    @property
    def follower(self) -> Follower:
        """How this process catches up with the others (``sharing/follower.py``).

        Raises:
            RuntimeError: the store is not open, or read-only (it shares nothing)."""
        if self._follower is None:
            raise RuntimeError(f"store {self.root} has no progress file (role {self.role})")
        return self._follower

    @property
    def attached(self) -> bool:
        """Services role: this process holds reput and writes the derived files."""
        return self.reput_holder is not None and self.reput_holder.attached

    @attached.setter
    def attached(self, attached: bool) -> None:
        if self.reput_holder is not None:
            self.reput_holder.attached = attached

    def _wire_sharing(self, progress: Progress) -> None:
        """Give the sharing objects their collaborators, once ``progress`` is open."""
        self.publisher.progress = progress
        self._follower = Follower(
            progress,
            self.commit_log,
            self.views,
            listeners=self._listeners,
            arrivals_listeners=self._arrivals_listeners,
            after_housekeeping=self._follow_broker_side if self.role == "broker" else _nothing,
        )
        if self.role == "services":
            checks = StartChecks(lambda: derived_start.before_load(self), self._settle_attached)
            self.reput_holder = ReputHolder(
                progress,
                self.commit_log,
                self.views,
                self._follower,
                self.publisher,
                index_enabled=self.config.message_index_enable,
                checks=checks,
                root=self.root,
            )

    def _follow_broker_side(self) -> None:
        """Broker role: the worker's rebuild jobs and disk-full flag (``Follower``)."""
        derived_start.follow_rebuild(self)
        full_disk.follow_worker_flag(self)

    def _settle_attached(self, cut: int, reput_offset: int) -> None:
        self.reput_offset = reput_offset
        derived_start.settle_attached(self, cut)

    # -- lifecycle ------------------------------------------------------------------------

    def open(self) -> MessageStore:
        """Lock (unless read-only), load and recover. Returns self.

        Raises:
            StoreLockedError: another process has the store open for writing.
            StoreError: a segment has the wrong size or the files are inconsistent.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.readonly and self.role != "services":
            self._lock.acquire()
        try:
            if self.role == "standalone" and not self.readonly:
                self._service_locks.acquire_all()  # no Celery worker may run them beside us
            if not self.readonly:
                self.progress = Progress(self.root)
                self._wire_sharing(self.progress)
            self.health.load()
            self.quarantine.load()
            self._load_and_recover()
        except BaseException:
            self._release_locks()
            raise
        if self.writable:  # the CommitLog writer: after recovery, before any put
            self._appender.start_prefault()
        self._open = True
        return self

    def _release_locks(self) -> None:
        self._service_locks.release_all()
        if self.progress is not None:
            self.progress.close()
            self.progress = self.publisher.progress = None
        self._lock.release()

    def _load_and_recover(self) -> None:
        abort = self.root / "abort"
        last_exit_ok = not abort.exists()
        if self.role == "services":
            self.reput_offset = self.follower.open_services()
            return
        if self.role == "broker":
            self.recovery, self.reput_offset = writer_open.open_writer(
                self.follower,
                self.publisher,
                last_exit_ok=last_exit_ok,
                check_crc=self.config.check_crc_on_recover,
            )
            offset_table.restore_for_broker(self, self.recovery.end_offset)
            full_disk.write_abort(self)
            return
        if not self.readonly:
            derived_start.before_load(self)
        self.commit_log.load()
        self.queues.load()
        checkpoint = self.views.load_checkpoint()
        # A reader of a live store sees ``abort`` too; it must not skip the newest index files.
        self.index.load(last_exit_ok or self.readonly, checkpoint.index_msg_timestamp)
        if self.readonly:
            # Find the ends of data without changing a byte: the same pass recovery runs,
            # with nothing dispatched and truncation done in memory only.
            self.recovery = recover(
                self.commit_log,
                self.queues,
                self.index,
                checkpoint,
                last_exit_ok=True,
                dispatch=_ignore,
                index_dispatch=_ignore,
                readonly=True,
            )
            self.reput_offset = self.recovery.end_offset
            offset_table.set_queue_offsets(self, None, offset_table.Scan({}, {}), {})
            return
        stall = full_disk.DispatchStall()  # a full disk stops recovery's dispatch, not the start
        self.recovery = recover(
            self.commit_log,
            self.queues,
            self.index,
            checkpoint,
            last_exit_ok=last_exit_ok,
            dispatch=stall.wrap(self.dispatch.write_one),
            index_dispatch=stall.wrap(self.dispatch.write_index),
        )
        self.reput_offset = self.recovery.end_offset
        derived_start.settle(self, stall.at)  # with a full disk: the check waits for reput
        full_disk.pause_dispatch(self, stall)  # if the disk was full: reput goes on later
        self.queues.clean_expired(self.commit_log.min_offset)
        full_disk.flush_checkpoint(self)
        full_disk.write_abort(self)
        self.publisher.writer_opened(
            self.commit_log.max_offset, last_exit_ok, reput_offset=self.reput_offset
        )

    def close(self) -> None:
        """Dispatch what is left, flush everything, remove ``abort`` and unlock."""
        if not self._open:
            return
        self._appender.stop_prefault()  # before the segments are closed
        if self.role != "standalone":
            self._close_shared()
            return
        if not self.readonly:
            try:
                self.dispatch_until_caught_up()
            except DiskFullError as exc:  # ``abort`` stays: the next start dispatches the rest
                log.warning("store %s: closing with records not dispatched: %s", self.root, exc)
            # A flush pass covers one file per queue (spec 6.2): repeat until all is on disk.
            while self.commit_log.flush(0):
                pass
            while self.queues.flush_all(0):
                pass
            self.index.flush()
            self._update_checkpoint_times()
            full_disk.flush_checkpoint(self)
            offset_table.save_snapshot(self)
        caught_up = self.reput_offset >= self.commit_log.max_offset
        self._open = False
        self.views.close()
        self.commit_log.close()
        if not self.readonly:
            if caught_up:
                (self.root / "abort").unlink(missing_ok=True)
            self.publisher.writer_closed()
            self._release_locks()

    def _close_shared(self) -> None:
        """Close a broker- or services-role store: each side flushes only what it writes."""
        progress = self.follower.progress
        caught_up = False
        if self.role == "broker":
            while self.commit_log.flush(0):
                pass
            offset_table.save_snapshot(self)
            self.publisher.writer_closed()
            caught_up = (
                progress.get(Slot.REPUT_GENERATION) == progress.get(Slot.GENERATION)
                and progress.get(Slot.REPUT_OFFSET) >= self.commit_log.max_offset
            )
        elif self.reput_holder is not None:
            self.reput_holder.detach(self.reput_offset)
        self._open = False
        self.views.close()
        self.commit_log.close()
        if caught_up:
            (self.root / "abort").unlink(missing_ok=True)
        self._release_locks()

    def __enter__(self) -> MessageStore:
        return self.open() if not self._open else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        return self._open

    def _check_open(self) -> None:
        if not self._open:
            raise StoreClosedError(f"store {self.root} is not open")

    # -- writing --------------------------------------------------------------------------

    def put_message(self, msg: Message, queue_id: int = 0) -> PutResult:
        """Append one message. Under sync flush, returns once it is on disk.

        Raises:
            MessageIllegalError / ValidationError: the message breaks a rule (field, rule).
            StoreClosedError, StoreNotWritableError.
        """
        return self.put_messages([msg], queue_id)[0]

    def put_messages(self, msgs: Sequence[Message], queue_id: int = 0) -> list[PutResult]:
        """Append a batch contiguously under one lock (one segment, consecutive offsets).

        Returns:
            One PutResult per message.
        """
        results = self.put_batch(msgs, queue_id)
        return results.to_list() if isinstance(results, BatchPutResults) else results

    def put_batch(
        self, msgs: Sequence[Message], queue_id: int = 0
    ) -> BatchPutResults | list[PutResult]:
        """:meth:`put_messages` without a PutResult object per message where it can: a plain
        batch (``plain_batch.py``) gives its results as columns
        (:class:`~mqcore.store.results.BatchPutResults`, equal to the list
        :meth:`put_messages` returns), any other a list. What the broker's sends use."""
        self._check_open()
        if not msgs:
            return []
        if not self.writable and not self._retry_refused():
            return self._refused(msgs, queue_id)
        if self.rebuilding_queues and (refused := derived_start.refused_puts(self, msgs, queue_id)):
            return refused
        try:
            return self._appender.put(msgs, queue_id)
        except DiskFullError as exc:  # raised before a byte was written
            return self._refused(msgs, queue_id, exc)

    def put_plain_columns(
        self, columns: PlainColumns, queue_id: int = 0
    ) -> BatchPutResults | list[PutResult]:
        """:meth:`put_batch` of ``columns.to_messages()`` (same records, results and errors;
        one reservation of UNIQ_KEYs, as there), making those messages only for a batch the
        plain path does not take (``plain_batch.encode_plain_columns``). Thread-safe."""
        self._check_open()
        if (
            not columns.bodies
            or not self.writable
            or (columns.topic, queue_id) in self.rebuilding_queues
        ):
            return self.put_batch(columns.to_messages(), queue_id)
        try:
            put = self._appender.put_plain(columns, queue_id)
            return (
                put
                if put is not None
                else self._appender.put_general(columns.to_messages(), queue_id)
            )
        except DiskFullError as exc:  # raised before a byte was written
            return self._refused(columns.to_messages(), queue_id, exc)

    def _refused(
        self, msgs: Sequence[Message], queue_id: int, exc: DiskFullError | None = None
    ) -> list[PutResult]:
        """SERVICE_NOT_AVAILABLE, with why, for each message; ``exc``: refuse from now on."""
        if exc is not None:
            self._refusals.hold_off()
            self.set_writable(False, str(exc), source="space")
        why, status = self.unwritable_reason, PutStatus.SERVICE_NOT_AVAILABLE
        return [RefusedPutResult(status, m.topic, queue_id, reason=why) for m in msgs]

    def _retry_refused(self) -> bool:
        """A refused put's second look, off the hot path (``Refusals.retry_due``): whether
        puts go now."""
        if not self._refusals.retry_due():
            return False
        if "abort" in self._refusals and full_disk.write_abort(self):
            self.set_writable(True, "", source="abort")
        self.set_writable(True, "", source="space")  # the put itself tries the reservation
        return self.writable

    # -- dispatch (reput) -----------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(request)`` for every record dispatched (on the reput thread).
        Listeners must be quick and must not raise (the live trace). While one is registered
        reput builds a DispatchRequest per record; a listener that only needs to know which
        queues grew should use :meth:`add_arrivals_listener`."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    @property
    def listeners(self) -> list[Listener]:
        return self._listeners

    def add_arrivals_listener(self, listener: ArrivalsListener) -> None:
        """Call ``listener(arrivals)`` once per dispatch batch with ``(topic, queue_id) ->
        highest queue offset dispatched`` (``arrivals.py``), after the batch's ConsumeQueue
        units are written. For listeners that only need to know which queues grew: unlike
        :meth:`add_listener`, it keeps reput on its fast rows path. Quick, must not raise."""
        self._arrivals_listeners.append(listener)

    def remove_arrivals_listener(self, listener: ArrivalsListener) -> None:
        self._arrivals_listeners.remove(listener)

    @property
    def arrivals_listeners(self) -> list[ArrivalsListener]:
        return self._arrivals_listeners

    def set_writable(self, writable: bool, reason: str, source: str = "disk") -> None:
        """Refuse puts for ``source`` with ``reason``, or stop refusing for it (puts go while
        no source refuses, ``refusals.py``; a read-only store stays so). Thread-safe."""
        if self.readonly or self.role == "services":
            return
        was = self.writable
        changed = self._refusals.clear(source) if writable else self._refusals.set(source, reason)
        self.writable = not self._refusals
        self.unwritable_reason = self._refusals.reason
        if self.writable != was or (changed and not writable):
            news = "accepted again" if self.writable else f"refused: {reason}"
            log.warning("store %s: puts %s", self.root, news)
        if source in DISK_SOURCES:
            full_disk.show_condition(self.health, self._refusals, self.root)

    @property
    def refusal_sources(self) -> frozenset[str]:
        """The sources refusing puts now. Thread-safe."""
        return self._refusals.sources

    def reput_once(self, max_bytes: int = 4 * 1024 * 1024) -> int:
        """Dispatch new records up to the confirm offset (at most ``max_bytes`` of log).
        The reput service's step. Returns the number of records dispatched. A broker-role
        store follows what its worker dispatched instead (``Follower.follow_dispatch``)."""
        self._check_open()
        if self.role == "broker":
            with self._follow_lock:
                count, self.reput_offset = self.follower.follow_dispatch(
                    self.reput_offset, max_bytes, self.delay_levels_ms
                )
                return count
        with self._reput_lock:
            if self.reput_holder is not None:
                end, self.reput_offset = self.reput_holder.before_reput(self.reput_offset)
            else:
                end = self.commit_log.confirm_offset
            count, self.reput_offset = reput_pass.dispatch_pass(
                self.commit_log,
                self.dispatch,
                self.reput_offset,
                end,
                max_bytes=max_bytes,
                delay_levels_ms=self.delay_levels_ms,
                per_record=bool(self._listeners),
            )
            self.publisher.reput(self.reput_offset, self.views.checkpoint)
            return count

    def attach(self) -> bool:
        """Services role: become the one writer of derived files. The caller holds the reput
        service lock. Returns False while no CommitLog writer has published its end yet."""
        self._check_open()
        holder = self.reput_holder
        if holder is None:
            raise RuntimeError(f"store {self.root}: only a services-role store attaches")
        with self._reput_lock, self._follow_lock:
            if holder.progress.get(Slot.GENERATION) == 0:
                return False
            start = holder.attach()
            if start is not None:
                self.reput_offset = start
            return True

    def detach(self) -> None:
        """Services role: stop writing derived files (before the reput lock is released)."""
        with self._reput_lock, self._follow_lock:
            if self.reput_holder is not None:
                self.reput_holder.detach(self.reput_offset)

    @contextmanager
    def dispatch_paused(self) -> Iterator[None]:
        """Hold the reput lock: no dispatch runs in this process inside the block."""
        with self._reput_lock:
            yield

    def follow_others(self) -> None:
        """Followers (broker role, unattached services): catch up with what the other
        processes did to the files (``Follower.housekeeping``) and extend every queue."""
        self._check_open()
        if self.role == "standalone" or self.attached:
            return
        with self._follow_lock:
            follower = self.follower
            if self.role == "services":
                follower.follow_commit_log()
            follower.housekeeping()
            follower.refresh_all_queues()

    def dispatch_until_caught_up(self) -> int:
        """Run reput until it reaches the CommitLog's confirm offset. Returns records dispatched."""
        total = 0
        while True:
            before = self.reput_offset
            total += self.reput_once()
            if self.reput_offset == before:
                return total

    @property
    def dispatch_behind_bytes(self) -> int:
        """Bytes of CommitLog not dispatched yet (by whichever process runs reput)."""
        progress = self.progress
        if self.role == "standalone" or progress is None:
            return max(0, self.commit_log.confirm_offset - self.reput_offset)
        confirm = progress.get(Slot.CONFIRM_OFFSET)
        return max(0, confirm - dispatch_limit(progress))

    @property
    def follows_derived_files(self) -> bool:
        """Whether another process writes the ConsumeQueues and index this store reads."""
        return self.role == "broker" or (self.role == "services" and not self.attached)

    def _read_queue(
        self, topic: str, queue_id: int, offset: int | None = None
    ) -> ConsumeQueue | None:
        queue = self.queues.get(topic, queue_id)
        if self.follows_derived_files and (
            queue is None or offset is None or offset >= queue.max_offset
        ):
            with self._follow_lock:
                queue = self.follower.refresh_queue(topic, queue_id)
        return queue

    def _read_index(self) -> None:
        if self.follows_derived_files:
            with self._follow_lock:
                self.follower.refresh_index()

    def _update_checkpoint_times(self) -> None:
        last = self.commit_log.segments.last()
        if last is not None and self.commit_log.max_offset > 0:
            ts = self.commit_log.segments.store_timestamp_ms
            if ts:
                self.checkpoint.physic_msg_timestamp = ts

    # -- reading --------------------------------------------------------------------------

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: Collection[int] | None = None,
        *,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> GetResult:
        """Messages of one queue from ``offset`` (spec 7.1). ``tag_filter``: tag hash codes
        (None or empty = all). ``group`` is for the caller's bookkeeping; the store ignores it."""
        self._check_open()
        return queries.get_messages(
            self.commit_log,
            self._read_queue(topic, queue_id, offset),
            offset,
            max_count,
            tag_filter,
            max_bytes,
        )

    def get_records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> RecordsResult:
        """:meth:`get_messages` without a tag filter, as :class:`RecordView` objects (raw
        record bytes, offsets, store time; the rest decoded on use: ``record_views.py``)."""
        self._check_open()
        queue = self._read_queue(topic, queue_id, offset)
        return queries.get_records(self.commit_log, queue, offset, max_count, max_bytes)

    def query_by_key(
        self, topic: str, key: str, begin_ms: int, end_ms: int, max_count: int = 32
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS (or UNIQ_KEY) hold ``key`` exactly, stored in
        [begin_ms, end_ms], oldest first (spec 7.4)."""
        self._check_open()
        self._read_index()
        return queries.query_by_key(
            self.commit_log, self.index, topic, key, begin_ms, end_ms, max_count
        )

    def view_by_id(self, msg_id: str) -> MessageExt | None:
        """Look a message up by offsetMsgId or by UNIQ_KEY (spec 7.3, 7.5)."""
        self._check_open()
        self._read_index()
        return queries.view_by_id(self.commit_log, self.index, self.queues.topics(), msg_id)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after ``timestamp_ms`` (spec 7.2, LOWER)."""
        self._check_open()
        queue = self._read_queue(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_for_time(
            timestamp_ms, self.commit_log.store_time_of, self.commit_log.min_offset
        )

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._read_queue(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._read_queue(topic, queue_id)
        return queue.max_offset if queue is not None else 0


def _nothing() -> None:
    return None
