"""MessageStore: the facade that composes the store's parts. It owns no algorithm.

::

    put_message ──▶ CommitLog.append ──(sync flush: flush_until)──▶ PutResult
                          │
    reput_once  ◀─────────┘  CommitLog.iter_dispatch ─▶ dispatch ─▶ ConsumeQueue.put
                                                                 ├▶ IndexService.build_index
                                                                 └▶ listeners (long polls, trace)
    get_messages, query_by_key, view_by_id, offset_for_time ─▶ queries.py

Thread-safety: every public method may be called from any thread once the store is open.
Appends serialise on the CommitLog's put lock; dispatch serialises on the reput lock (one
reput runner at a time, whichever thread runs it); reads take no store-wide lock.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from types import TracebackType

from mqcore.clock import Clock, SystemClock
from mqcore.errors import StoreClosedError
from mqcore.message import Message, MessageExt
from mqcore.store import queries
from mqcore.store.checkpoint import Checkpoint
from mqcore.store.commit_log import CommitLog, PendingRecord
from mqcore.store.config import StoreConfig
from mqcore.store.consume_queue import ConsumeQueueStore
from mqcore.store.format import DispatchRequest
from mqcore.store.index_service import IndexService
from mqcore.store.lockfile import StoreLock
from mqcore.store.msgid import HostAddress, UniqKeyGenerator, create_offset_msg_id
from mqcore.store.properties import (
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    encode_properties,
)
from mqcore.store.record_layout import (
    BORNHOST_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    V1_MAX_TOPIC_BYTES,
    record_size,
)
from mqcore.store.recovery import RecoveryReport, recover
from mqcore.store.results import GetResult, PutResult, PutStatus
from mqcore.validation import validate_body, validate_properties_size, validate_topic

log = logging.getLogger(__name__)

Listener = Callable[[DispatchRequest], None]
DEFAULT_BORN_HOST = HostAddress("127.0.0.1", 0)


def _ignore(request: DispatchRequest) -> None:
    """Read-only opens dispatch nothing."""


class MessageStore:
    """A RocketMQ-compatible store rooted at ``root``. Use ``open()``/``close()`` or ``with``.

    Args:
        root: the store directory (created if missing).
        config: sizes, flush mode and service settings; RocketMQ's defaults when omitted.
        clock: time source (tests pass a FakeClock).
        readonly: open without the writer lock, for tools and Spark; puts then raise.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        clock: Clock | None = None,
        readonly: bool = False,
    ) -> None:
        self.root = Path(root)
        self.config = config or StoreConfig()
        self.clock: Clock = clock or SystemClock()
        self.readonly = readonly
        self.commit_log = CommitLog(self.root, self.config, self.clock, readonly=readonly)
        self.delay_levels_ms = self.commit_log.delay_levels_ms
        self.queues = ConsumeQueueStore(
            self.root,
            file_size_bytes=self.config.consume_queue_file_size,
            readonly=readonly,
            clock=self.clock,
        )
        self.index = IndexService(
            self.root,
            self.config.index_hash_slots,
            self.config.index_max_entries,
            self.clock,
            on_file_filled=self._on_index_file_filled,
            readonly=readonly,
        )
        self.checkpoint = Checkpoint(self.root / "checkpoint")
        self.recovery: RecoveryReport | None = None
        self.reput_offset = 0
        self.writable = not readonly
        self._lock = StoreLock(self.root)
        self._reput_lock = threading.Lock()
        self._listeners: list[Listener] = []
        #: Set after every append; the inline reput loop waits on it instead of polling.
        self.appended = threading.Event()
        self._uniq = UniqKeyGenerator(clock=self.clock)
        self._open = False

    # -- lifecycle ------------------------------------------------------------------------

    def open(self) -> MessageStore:
        """Lock (unless read-only), load and recover. Returns self.

        Raises:
            StoreLockedError: another process has the store open for writing.
            StoreError: a segment has the wrong size or the files are inconsistent.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.readonly:
            self._lock.acquire()
        try:
            self._load_and_recover()
        except BaseException:
            self._lock.release()
            raise
        self._open = True
        return self

    def _load_and_recover(self) -> None:
        abort = self.root / "abort"
        last_exit_ok = not abort.exists()
        self.commit_log.load()
        self.queues.load()
        self.checkpoint = Checkpoint.load(self.root / "checkpoint")
        # A reader of a live store sees ``abort`` too; it must not skip the newest index files.
        self.index.load(last_exit_ok or self.readonly, self.checkpoint.index_msg_timestamp)
        if self.readonly:
            # Find the ends of data without changing a byte: the same pass recovery runs,
            # with nothing dispatched and truncation done in memory only.
            self.recovery = recover(
                self.commit_log,
                self.queues,
                self.index,
                self.checkpoint,
                last_exit_ok=True,
                dispatch=_ignore,
                index_dispatch=_ignore,
                readonly=True,
            )
            self.reput_offset = self.recovery.end_offset
            self._rebuild_queue_offsets()
            return
        self.recovery = recover(
            self.commit_log,
            self.queues,
            self.index,
            self.checkpoint,
            last_exit_ok=last_exit_ok,
            dispatch=self._dispatch,
            index_dispatch=self._dispatch_index,
        )
        self.reput_offset = self.recovery.end_offset
        self._rebuild_queue_offsets()
        self.queues.clean_expired(self.commit_log.min_offset)
        self.checkpoint.flush()
        old = abort.read_bytes() if abort.exists() else b""
        (self.root / "abort.bak").write_bytes(old)
        abort.write_text(str(os.getpid()))

    def _rebuild_queue_offsets(self) -> None:
        table = self.commit_log.queue_offsets
        table.clear()
        for topic in self.queues.topics():
            for queue_id, queue in self.queues.queues(topic).items():
                table[(topic, queue_id)] = queue.max_offset

    def close(self) -> None:
        """Dispatch what is left, flush everything, remove ``abort`` and unlock."""
        if not self._open:
            return
        if not self.readonly:
            self.dispatch_until_caught_up()
            self.commit_log.flush(0)
            self.queues.flush_all(0)
            self.index.flush()
            self._update_checkpoint_times()
            self.checkpoint.flush()
        caught_up = self.reput_offset >= self.commit_log.max_offset
        self._open = False
        self.index.close()
        self.queues.close()
        self.commit_log.close()
        if not self.readonly:
            if caught_up:
                (self.root / "abort").unlink(missing_ok=True)
            self._lock.release()

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
        """Append a batch contiguously under one lock (one segment, consecutive offsets)."""
        self._check_open()
        if not msgs:
            return []
        if not self.writable:
            return [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, m.topic, queue_id) for m in msgs]
        pending = [self._prepare(m, queue_id) for m in msgs]
        appended = self.commit_log.append([p for p, _, _ in pending])
        self.appended.set()
        status = PutStatus.PUT_OK
        if self.config.flush == "sync" and any(wait for _, _, wait in pending):
            last = appended[-1]
            if not self.commit_log.flush_until(last.phys_offset + last.size):
                status = PutStatus.FLUSH_DISK_TIMEOUT
            self.appended.set()  # reput may now dispatch up to the new flushed offset
        host = self.config.store_host
        return [
            PutResult(
                status,
                p.topic,
                p.queue_id,
                uniq,
                create_offset_msg_id(host, a.phys_offset),
                a.phys_offset,
                a.queue_offset,
                a.store_timestamp,
                a.size,
            )
            for (p, uniq, _), a in zip(pending, appended, strict=True)
        ]

    def _prepare(self, msg: Message, queue_id: int) -> tuple[PendingRecord, str, bool]:
        validate_topic(msg.topic)
        validate_body(msg.body, self.config.max_message_size)
        props = msg.all_properties()
        uniq = props.get(PROPERTY_UNIQ_KEY) or self._uniq.next_id()
        props[PROPERTY_UNIQ_KEY] = uniq
        encoded = encode_properties(props)
        validate_properties_size(encoded)
        born_host = msg.born_host or DEFAULT_BORN_HOST
        sys_flag = msg.sys_flag & ~BORNHOST_V6_FLAG
        if ":" in born_host.ip:
            sys_flag |= BORNHOST_V6_FLAG
        topic_bytes = len(msg.topic.encode())
        size = record_size(
            len(msg.body),
            topic_bytes,
            len(encoded),
            sys_flag=sys_flag | self._store_host_flag(),
            v2=topic_bytes > V1_MAX_TOPIC_BYTES,
        )
        tx = sys_flag & TRANSACTION_TYPE_MASK
        record = PendingRecord(
            topic=msg.topic,
            queue_id=queue_id,
            flag=msg.flag,
            sys_flag=sys_flag,
            born_timestamp=msg.born_timestamp
            if msg.born_timestamp is not None
            else self.clock.now_ms(),
            born_host=born_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=0,
            body=msg.body,
            properties=encoded,
            size=size,
            takes_queue_offset=tx in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE),
        )
        return record, uniq, props.get(PROPERTY_WAIT, "true") != "false"

    def _store_host_flag(self) -> int:
        return 0x20 if ":" in self.config.store_host.ip else 0

    # -- dispatch (reput) -----------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(request)`` for every record dispatched (on the reput thread).
        Listeners must be quick and must not raise; they wake long polls and live traces."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def _dispatch(self, request: DispatchRequest) -> None:
        tx = request.sys_flag & TRANSACTION_TYPE_MASK
        if tx in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            queue = self.queues.find_or_create(request.topic, request.queue_id)
            queue.put(request.phys_offset, request.size, request.tags_code, request.queue_offset)
            self.checkpoint.logics_msg_timestamp = request.store_timestamp
        self._dispatch_index(request)

    def _dispatch_index(self, request: DispatchRequest) -> None:
        if self.config.message_index_enable:
            self.index.build_index(
                request.topic,
                request.phys_offset,
                request.store_timestamp,
                request.uniq_key,
                request.keys,
                request.sys_flag & TRANSACTION_TYPE_MASK,
            )

    def _on_index_file_filled(self, end_timestamp: int) -> None:
        self.checkpoint.index_msg_timestamp = end_timestamp

    def reput_once(self, max_bytes: int = 4 * 1024 * 1024) -> int:
        """Dispatch new records up to the confirm offset (at most ``max_bytes`` of log).
        The reput service's step. Returns the number of records dispatched."""
        self._check_open()
        with self._reput_lock:
            count = 0
            listeners = self._listeners
            for item in self.commit_log.iter_dispatch(
                self.reput_offset, self.commit_log.confirm_offset, max_bytes, self.delay_levels_ms
            ):
                if isinstance(item, int):
                    self.reput_offset = item
                    break
                self._dispatch(item)
                count += 1
                for listener in listeners:
                    listener(item)
            return count

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
        return max(0, self.commit_log.confirm_offset - self.reput_offset)

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
            self.queues.get(topic, queue_id),
            offset,
            max_count,
            tag_filter,
            max_bytes,
        )

    def query_by_key(
        self, topic: str, key: str, begin_ms: int, end_ms: int, max_count: int = 32
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS (or UNIQ_KEY) hold ``key`` exactly, stored in
        [begin_ms, end_ms], oldest first (spec 7.4)."""
        self._check_open()
        return queries.query_by_key(
            self.commit_log, self.index, topic, key, begin_ms, end_ms, max_count
        )

    def view_by_id(self, msg_id: str) -> MessageExt | None:
        """Look a message up by offsetMsgId or by UNIQ_KEY (spec 7.3, 7.5)."""
        self._check_open()
        return queries.view_by_id(self.commit_log, self.index, self.queues.topics(), msg_id)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after ``timestamp_ms`` (spec 7.2, LOWER)."""
        self._check_open()
        queue = self.queues.get(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_for_time(
            timestamp_ms, self.commit_log.store_time_of, self.commit_log.min_offset
        )

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get(topic, queue_id)
        return queue.max_offset if queue is not None else 0
