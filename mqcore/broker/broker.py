"""Broker: the semantics users see, over one MessageStore and its Metadata.

Every front end (REST API, Kafka listener, console) goes through this class, so a message
sent by one is seen identically by the others.

Wiring (the runtime does this once)::

    store = MessageStore(root, store_config).open()
    metadata = Metadata(root / "config", clock, broker_name=..., cluster_name=...)
    metadata.load()
    broker = Broker(store, metadata, config=BrokerConfig(...))
    broker.start()                   # registers the dispatch listener, accepts requests
    ... ServiceLoops: reput, flush, delay_delivery.step(broker), offsets_persist.step(broker)
    broker.stop()                    # wakes long polls, persists offsets
    store.close()

(:meth:`Broker.open` does all of it for tests and tools.)

Thread-safety: every public method may be called from any thread once started. Blocking
methods (``pull`` with ``wait_ms``, ``wait_for_messages``) block only their caller.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

from mqcore.broker import browse as browse_pages
from mqcore.broker import copies, lag, retry, view
from mqcore.broker.admin import BrokerAdmin, require_group
from mqcore.broker.config import BrokerConfig
from mqcore.broker.errors import BrokerNotStartedError, NoPermissionError
from mqcore.broker.long_poll import ArrivalNotifier
from mqcore.broker.placement import BY_MESSAGE, Placement
from mqcore.broker.plain_sending import PlainBatch, is_plain_batch, place_plain, store_plain
from mqcore.broker.pulling import _map_status, check_pull, check_pull_args, scan
from mqcore.broker.reader import StoreReader
from mqcore.broker.sending import (
    Placed,
    QueueSelector,
    check_queue_id,
    place_messages,
    resolve_topic,
    store_placed,
)
from mqcore.broker.stats import RateCounter
from mqcore.broker.tags import TagFilter, parse_tag_expression
from mqcore.broker.types import (
    BrokerStatus,
    BrowsePage,
    MessageView,
    OutgoingMessage,
    PullResult,
    PullStatus,
    SendBackResult,
    SendResult,
)
from mqcore.clock import Clock, SystemClock
from mqcore.errors import NotFoundError, ValidationError
from mqcore.format.msgid import HostAddress, UniqKeyGenerator
from mqcore.message import MessageExt
from mqcore.metadata import Metadata
from mqcore.metadata.topics import PERM_WRITE, SCHEDULE_TOPIC, TopicConfig
from mqcore.store.config import StoreConfig
from mqcore.store.files.space import existing_parent, partition_of
from mqcore.store.read.record_views import RecordsResult
from mqcore.store.results import GetStatus
from mqcore.store.store import MessageStore

QueueRef = tuple[str, int, int]
"""``(topic, queue_id, offset)``: a queue and the offset a waiter wants data at or beyond."""

OffsetAt = Literal["earliest", "latest"] | int
"""Where :meth:`Broker.list_offsets` looks: the queue's ends, or a timestamp in ms."""


class Broker:
    """One broker: send, pull with long polling, lookups, consumer offsets, retry and DLQ;
    its topics and groups through :attr:`admin`.

    Args:
        store: an open MessageStore. The broker neither opens nor closes it, unless it was
            built by :meth:`open`.
        metadata: loaded config managers over ``<root>/config``.
        config: broker settings (defaults: :class:`BrokerConfig`).
        clock: time source for store-time comparisons, lag ages, rates and delay delivery;
            default the store's clock. Long-poll timeouts are real time (see
            :mod:`mqcore.broker.long_poll`).
        reader: what reads go through (pull, browse, lookups, offsets, lag); default
            ``store``. The runtime passes a ``TieredMessageStore`` wrapping ``store`` when
            tiered storage is on, so cold offsets are served from the tier. Writes always
            go to ``store``.

    Attributes:
        store, reader, metadata, config, clock: as given; the services read them.
        admin: topics, groups, queue bounds, lag and offset resets
            (:class:`~mqcore.broker.admin.BrokerAdmin`).
    """

    def __init__(
        self,
        store: MessageStore,
        metadata: Metadata,
        *,
        config: BrokerConfig | None = None,
        clock: Clock | None = None,
        reader: StoreReader | None = None,
    ) -> None:
        self.store = store
        self.reader: StoreReader = reader if reader is not None else store
        self.metadata = metadata
        self.config = config or BrokerConfig()
        self.clock: Clock = clock or store.clock
        self._broker_name = self.config.broker_name or store.config.broker_name
        self._cluster_name = self.config.cluster_name or store.config.cluster_name
        self._notifier = ArrivalNotifier()
        self._selector = QueueSelector()
        # Own loader hash: ids never collide with the store's generator (same ip and pid).
        self._uniq = UniqKeyGenerator(clock=self.clock, loader_hash=secrets.randbits(32))
        self._puts = RateCounter(self.clock)
        self._gets = RateCounter(self.clock)
        self._lock = threading.Lock()
        self._started = False
        self._started_at_ms = 0
        self._owns_store = False
        self.admin = BrokerAdmin(store, self.reader, metadata, self.clock, self._broker_name)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Register the dispatch listener (wakes long polls), pull each delay level's offset
        into its queue's bounds (spec 8.5), and accept requests. Idempotent."""
        with self._lock:
            if self._started:
                return
            # Per batch, not per record: reput keeps its fast path (``mqcore.store.reput.arrivals``).
            self.store.add_arrivals_listener(self._notifier.on_arrivals)
            self._notifier.reopen()
            for level in range(1, len(self.store.delay_levels_ms) + 1):
                self.metadata.delay_offsets.clamp(
                    level,
                    self.store.min_offset(SCHEDULE_TOPIC, level - 1),
                    self.store.max_offset(SCHEDULE_TOPIC, level - 1),
                )
            self._started = True
            self._started_at_ms = self.clock.now_ms()

    def stop(self) -> None:
        """Refuse new sends, wake every waiting pull (they return at once), persist consumer
        and delay offsets. Idempotent.

        Raises:
            OSError: the offsets could not be written.
        """
        with self._lock:
            if not self._started:
                return
            self._started = False
            self.store.remove_arrivals_listener(self._notifier.on_arrivals)
            self._notifier.close()
        self.metadata.offsets.persist()
        self.metadata.delay_offsets.persist()

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        store_config: StoreConfig | None = None,
        *,
        config: BrokerConfig | None = None,
        clock: Clock | None = None,
        **metadata_options: Any,
    ) -> Broker:
        """Open the store at ``root`` and its metadata (``<root>/config``), and return a
        started Broker that owns both: :meth:`close` closes them. For tests and tools.

        Args:
            metadata_options: passed to :class:`~mqcore.metadata.Metadata` (e.g.
                ``auto_create_subscription_group=False``).

        Raises:
            StoreLockedError: another process has the store open.
            StoreError: the store or a config file is unreadable.
        """
        clock = clock or SystemClock()
        store = MessageStore(root, store_config, clock=clock).open()
        try:
            names = {
                "broker_name": (config and config.broker_name) or store.config.broker_name,
                "cluster_name": (config and config.cluster_name) or store.config.cluster_name,
            }
            metadata = Metadata(Path(root) / "config", clock, **(names | metadata_options))
            metadata.load(store)
            broker = cls(store, metadata, config=config, clock=clock)
        except BaseException:
            store.close()
            raise
        broker._owns_store = True
        broker.start()
        return broker

    def close(self) -> None:
        """:meth:`stop`, then close the store if :meth:`open` opened it."""
        try:
            self.stop()
        finally:
            if self._owns_store:
                self._owns_store = False
                self.store.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def started(self) -> bool:
        return self._started

    @property
    def broker_name(self) -> str:
        """The name RocketMQ shows for this broker (``brokerName``), in every queue result."""
        return self._broker_name

    @property
    def cluster_name(self) -> str:
        return self._cluster_name

    @property
    def max_delay_level(self) -> int:
        """The highest delay level (18 with the default ``messageDelayLevel``)."""
        return len(self.store.delay_levels_ms)

    @property
    def waiting_pulls(self) -> int:
        """Pulls and waits parked right now (status pages, tests)."""
        return self._notifier.waiting

    # -- messages: send -----------------------------------------------------------------------

    def _check_accepting(self) -> None:
        if not self._started:
            raise BrokerNotStartedError(f"broker {self._broker_name!r} is not accepting messages")
        if not self.config.broker_perm & PERM_WRITE:
            raise NoPermissionError(
                "broker", "broker_not_writable", f"broker {self._broker_name!r} refuses writes now"
            )

    def send(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage] | PlainBatch,
        placement: Placement = BY_MESSAGE,
        *,
        born_host: HostAddress | None = None,
    ) -> Sequence[SendResult]:
        """Store a batch of messages for ``topic`` (one, or many), in order: the one way
        every front end sends.

        Where each message goes is ``placement`` (:mod:`mqcore.broker.placement`): the
        whole batch in one queue (:class:`ToQueue`, a Kafka partition), or each message's
        ``queue_id``, else the hash of its ``sharding_key``, else round robin
        (:data:`BY_MESSAGE`). A message with a delay level appears in its topic once due
        (the delay_delivery service). The messages for one queue are appended as one batch
        (one put per queue, in the order given, consecutive offsets); nothing is stored
        unless every message is valid.

        ``messages`` are ``OutgoingMessage`` (the reference path,
        :mod:`mqcore.broker.sending`), or plain store messages a front end decoded its input
        into, as a list or as ``PlainColumns`` (the fast path,
        :mod:`mqcore.broker.plain_sending`, chosen by
        :func:`~mqcore.broker.plain_sending.is_plain_batch`): same rules, errors, queues and
        offsets.

        Args:
            born_host: the producer's address for ``OutgoingMessage`` (None: 127.0.0.1:0);
                store messages carry their own.

        Returns:
            One SendResult per message, in order.

        Raises:
            BrokerNotStartedError: not started (or stopped).
            NoPermissionError: broker or topic not writable, or a system topic.
            NotFoundError: unknown topic and auto-creation is off.
            ValidationError / MessageIllegalError: a rule of spec 11 (see
                :mod:`mqcore.broker.sending`), with ``field`` and ``rule``.
            StoreNotWritableError: the store refuses writes (disk full, read-only).
            ValueError: a batch of store messages holds one that is not plain.
        """
        config = self._sendable_topic(topic)
        if is_plain_batch(messages):
            plain = cast(PlainBatch, messages)
            groups = place_plain(
                config,
                plain,
                placement,
                selector=self._selector,
                uniq=self._uniq,
                max_message_size=self.store.config.max_message_size,
                max_batch_bytes=self.config.max_batch_bytes,
            )
            results = store_plain(self.store, plain, groups, self._broker_name)
            self._after_puts(len(results))
            return results
        placed = place_messages(
            config,
            cast(Sequence[OutgoingMessage], messages),
            placement,
            selector=self._selector,
            uniq=self._uniq,
            born_host=born_host,
            max_message_size=self.store.config.max_message_size,
            max_batch_bytes=self.config.max_batch_bytes,
            max_delay_level=self.max_delay_level,
        )
        return self.deliver_internal(placed)

    def _sendable_topic(self, topic: str) -> TopicConfig:
        """The config of ``topic`` for a send (created if auto-creation is on), once the
        broker accepts sends."""
        self._check_accepting()
        return resolve_topic(
            self.metadata,
            topic,
            auto_create=self.config.auto_create_topics,
            default_queue_nums=self.config.default_topic_queue_nums,
        )

    def deliver_internal(self, placed: Sequence[Placed]) -> Sequence[SendResult]:
        """Store messages the broker's own services placed and validated (delay delivery,
        retry, DLQ), each where its ``Placed`` says. Front ends use :meth:`send`."""
        results = store_placed(self.store, placed, self._broker_name)
        self._after_puts(len(results))
        return results

    def _after_puts(self, count: int) -> None:
        self._puts.add(count)
        if self.config.dispatch_on_send and count:
            self.store.dispatch_until_caught_up()

    # -- messages: pull -----------------------------------------------------------------------

    def _has_data(self, topic: str, queue_id: int, offset: int) -> bool:
        return self.reader.max_offset(topic, queue_id) > offset

    def _prepare_pull(
        self,
        group: str | None,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_expression: str,
        wait_ms: int,
        max_bytes: int,
    ) -> tuple[TagFilter, int, PullResult]:
        wait_ms = check_pull_args(self.config, offset, max_count, wait_ms, max_bytes)
        check_pull(self.metadata, self.config, group, topic, queue_id)
        tags = parse_tag_expression(tag_expression)
        first = scan(self.reader, group, topic, queue_id, offset, max_count, tags, max_bytes)
        return tags, wait_ms, first

    def pull(
        self,
        group: str | None,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        *,
        tag_expression: str = "*",
        wait_ms: int = 0,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> PullResult:
        """Read messages of one queue from ``offset``; with ``wait_ms`` > 0, wait up to that
        long (long polling) when there is nothing new, returning as soon as a message for
        the queue is dispatched. Blocks the calling thread only. Thread-safe.

        Args:
            group: the consuming group (checked: exists or auto-created, consume enabled);
                None for group-less readers (Kafka fetch, console).
            offset: queue offset to start at (usually the committed offset). Pulling does not
                commit; call :meth:`commit_offset`.
            max_count: 1..``max_pull_count`` messages.
            tag_expression: ``*`` or ``A || B``; messages are re-checked by their real tag.
            wait_ms: longest wait, cut to ``max_pull_wait_ms``.
            max_bytes: stop adding messages past this many record bytes (at least one is
                returned when there is one).

        Returns:
            A PullResult (see :class:`PullStatus`); continue from ``next_offset``.

        Raises:
            NotFoundError: unknown topic or group.
            NoPermissionError: broker or topic not readable, or the group's consuming is off.
            ValidationError: ``queue_id``, ``offset``, ``max_count``, ``wait_ms``,
                ``max_bytes`` out of ``range``; a tag expression with ``no_tags``.
        """
        tags, wait_ms, result = self._prepare_pull(
            group, topic, queue_id, offset, max_count, tag_expression, wait_ms, max_bytes
        )
        deadline = time.monotonic() + wait_ms / 1000
        recheck_s = self.config.long_poll_recheck_ms / 1000
        while result.status is PullStatus.NO_NEW_MSG and wait_ms > 0:
            remaining = deadline - time.monotonic()
            at = result.next_offset
            ready = functools.partial(self._has_data, topic, queue_id, at)
            if remaining <= 0 or not self._notifier.wait(
                [(topic, queue_id)], ready, remaining, recheck_s
            ):
                break
            result = scan(self.reader, group, topic, queue_id, at, max_count, tags, max_bytes)
        self._gets.add(len(result.messages), topic)
        return result

    def pull_records(
        self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int
    ) -> tuple[PullStatus, RecordsResult]:
        """A group-less :meth:`pull` of the *local* store as raw record views
        (``MessageStore.get_records``): the same checks and status mapping, no tag filter,
        no wait. For front ends that re-encode records (the Kafka fetch); offsets already
        moved to a tier (``self.reader`` is not ``self.store``) must use :meth:`pull`.

        Raises:
            As :meth:`pull` (no group errors).
        """
        check_pull_args(self.config, offset, max_count, 0, max_bytes)
        check_pull(self.metadata, self.config, None, topic, queue_id)
        got = self.store.get_records(topic, queue_id, offset, max_count, max_bytes)
        status = (
            PullStatus.FOUND if got.status is GetStatus.FOUND else _map_status(got.status, offset)
        )
        self._gets.add(len(got.records), topic)
        return status, got

    def count_gets(self, count: int, topic: str) -> None:
        """Count ``count`` messages of ``topic`` read by a front end that reads the store's
        files itself (the Kafka fetch's run reader) or serves them from its own copy (the
        Kafka fetch's cache of produced batches), as :meth:`pull_records` counts what it
        returns. Thread-safe."""
        self._gets.add(count, topic)

    def delivered_by_topic(self) -> dict[str, int]:
        """Messages returned by pulls and fetches since start, by topic (``status()``'s
        ``get_total`` split up). Thread-safe."""
        return self._gets.totals_by_key()

    def _ready_queues(self, refs: Sequence[QueueRef]) -> list[QueueRef]:
        return [ref for ref in refs if self._has_data(ref[0], ref[1], ref[2])]

    def _check_wait(
        self, queues: Iterable[QueueRef], timeout_ms: int
    ) -> tuple[list[QueueRef], float]:
        if timeout_ms < 0:
            raise ValidationError(
                "timeout_ms", "range", f"timeout_ms: must be >= 0 (got {timeout_ms})"
            )
        return list(queues), min(timeout_ms, self.config.max_pull_wait_ms) / 1000

    def wait_for_messages(self, queues: Iterable[QueueRef], timeout_ms: int) -> list[QueueRef]:
        """Wait until at least one of several queues has a message at or beyond an offset.

        Args:
            queues: ``(topic, queue_id, offset)``; a queue is ready when its max offset is
                greater than ``offset``.
            timeout_ms: longest wait (cut to ``max_pull_wait_ms``); 0 checks once.

        Returns:
            The ready entries (as given), or an empty list on timeout. Thread-safe; blocks
            the calling thread only.

        Raises:
            ValidationError: negative ``timeout_ms``.
        """
        refs, timeout_s = self._check_wait(queues, timeout_ms)
        keys = [(topic, queue_id) for topic, queue_id, _ in refs]
        ready = functools.partial(self._ready_queues, refs)
        self._notifier.wait(keys, lambda: bool(ready()), timeout_s, self._recheck_s)
        return ready()

    @property
    def _recheck_s(self) -> float:
        return self.config.long_poll_recheck_ms / 1000

    # -- messages: lookups --------------------------------------------------------------------

    def _check_limit(self, limit: int) -> None:
        if not 1 <= limit <= self.config.max_browse_limit:
            raise ValidationError(
                "limit", "range", f"limit: must be 1..{self.config.max_browse_limit} (got {limit})"
            )

    def _check_range(self, begin_ms: int, end_ms: int) -> None:
        if begin_ms > end_ms:
            raise ValidationError("begin_ms", "before_end", "begin_ms: must not be after end_ms")

    def query_by_key(
        self, topic: str, key: str, begin_ms: int, end_ms: int, limit: int = 32
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``key``),
        stored in [begin_ms, end_ms], oldest first (spec 7.4). Thread-safe.

        Raises:
            NotFoundError: no such topic.
            ValidationError: empty key, ``limit`` out of range, begin after end.
        """
        self.metadata.topics.require(topic)
        self._check_limit(limit)
        self._check_range(begin_ms, end_ms)
        return self.reader.query_by_key(topic, key, begin_ms, end_ms, limit)

    def browse(
        self, topic: str, begin_ms: int, end_ms: int, limit: int = 32, cursor: str | None = None
    ) -> BrowsePage:
        """Messages of every queue of ``topic`` stored in [begin_ms, end_ms], in store-time
        order, one page at a time (see :mod:`mqcore.broker.browse`). Thread-safe.

        Args:
            cursor: None for the first page, then the previous page's ``next_cursor``.

        Raises:
            NotFoundError: no such topic.
            ValidationError: ``limit`` out of range, begin after end, a bad cursor
                (rules ``invalid``, ``mismatch``).
        """
        config = self.metadata.topics.require(topic)
        self._check_limit(limit)
        self._check_range(begin_ms, end_ms)
        return browse_pages.browse(self.reader, config, begin_ms, end_ms, limit, cursor)

    def get_message(self, msg_id: str) -> MessageExt | None:
        """The record an offsetMsgId names, or a record carrying that UNIQ_KEY (msgId);
        None if there is none. Thread-safe."""
        return copies.find(self.reader, msg_id)

    def view_message(self, msg_id: str) -> MessageView | None:
        """A message (by offsetMsgId or UNIQ_KEY) with its consume state for each group
        consuming its topic: consumed, pending, retrying or in the DLQ (see
        :mod:`mqcore.broker.view`). None if there is no such message. Thread-safe."""
        return view.view_message(self.reader, self.metadata, self._broker_name, msg_id)

    # -- messages: retry and DLQ --------------------------------------------------------------

    def send_back(
        self,
        group: str,
        msg_id: str,
        delay_level: int = 0,
        *,
        max_reconsume_times: int | None = None,
    ) -> SendBackResult:
        """A consumer of ``group`` failed the message: retry it later, or after
        ``retry_max_times`` failures move it to ``%DLQ%<group>`` (spec 9; see
        :mod:`mqcore.broker.retry`).

        Args:
            msg_id: the delivered record's offsetMsgId (best), or its msgId (UNIQ_KEY).
            delay_level: 0 = ``3 + reconsume_times``; > 0 = that level; < 0 = straight to
                the DLQ.
            max_reconsume_times: overrides the group's ``retry_max_times``.

        Raises:
            BrokerNotStartedError, NoPermissionError: as for :meth:`send`.
            NotFoundError: unknown group or message.
        """
        self._check_accepting()
        return retry.send_back(
            self.reader,
            self.deliver_internal,
            self.metadata,
            self._selector,
            group,
            msg_id,
            delay_level,
            max_reconsume_times=max_reconsume_times,
            max_delay_level=self.max_delay_level,
        )

    def resend_from_dlq(self, group: str, msg_id: str) -> SendResult:
        """Store a message of ``%DLQ%<group>`` again in its original topic (same msgId,
        reconsume count 0).

        Raises:
            BrokerNotStartedError, NoPermissionError: as for :meth:`send`.
            NotFoundError: no DLQ, message not in it, or original topic gone.
        """
        self._check_accepting()
        return retry.resend_from_dlq(
            self.reader, self.deliver_internal, self.metadata, self._selector, group, msg_id
        )

    # -- consumer offsets ---------------------------------------------------------------------

    def get_offsets(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        """Committed offsets, ``{topic: {queue_id: next offset}}`` (only queues the group
        committed on). Thread-safe; an unknown group has none."""
        topics = [topic] if topic is not None else self.metadata.offsets.topics_of_group(group)
        return {t: self.metadata.offsets.offsets_for(group, t) for t in topics}

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` will next consume ``offset`` on a queue (memory; written to
        ``consumerOffset.json`` by the offsets_persist step and at stop), or one of Kafka's
        placeholders -2 (earliest) and -1 (latest), which the group's consumers resolve
        (``mqcore.metadata.offsets``). Thread-safe.

        Raises:
            NotFoundError: unknown group (when groups are not auto-created) or topic.
            ValidationError: ``queue_id`` out of ``range``, ``offset`` below -2.
        """
        require_group(self.metadata, group)
        config = self.metadata.topics.get(topic)
        if config is None:
            raise NotFoundError("topic", "not_found", f"topic {topic!r} does not exist")
        if queue_id < 0:
            raise ValidationError("queue_id", "range", f"queue_id: must be >= 0 (got {queue_id})")
        check_queue_id(config, queue_id)
        self.metadata.offsets.commit(group, topic, queue_id, offset)

    def list_offsets(self, topic: str, queue_id: int, at: OffsetAt) -> int:
        """A queue offset: ``"earliest"`` (min), ``"latest"`` (max, where the next message
        goes), or for a timestamp (ms) the first offset stored at or after it (max if none).

        Raises:
            NotFoundError: no such topic. ValidationError: bad ``queue_id`` or ``at``.
        """
        self.admin.queue_status(topic, queue_id)  # checks topic and queue
        if at == "earliest":
            return self.reader.min_offset(topic, queue_id)
        if at == "latest":
            return self.reader.max_offset(topic, queue_id)
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            raise ValidationError(
                "at", "choice", f"at: must be 'earliest', 'latest' or a timestamp >= 0 (got {at!r})"
            )
        return lag.offset_at_time(self.reader, topic, queue_id, at)

    # -- status -------------------------------------------------------------------------------

    def status(self, services: Mapping[str, Mapping[str, Any]] | None = None) -> BrokerStatus:
        """Figures for the console's status page. Walks the store directory to size it
        (milliseconds for thousands of files). Thread-safe.

        Args:
            services: per-service state from the runtime, e.g.
                ``{loop.name: loop.state.as_dict() for loop in loops}``.
        """
        root = self.store.root
        # The CommitLog's partition, as the disk guard measures it (it may be a mount of
        # its own under the store root): the console and the guard show the same figure.
        disk_path = existing_parent(root / "commitlog")
        usage = shutil.disk_usage(disk_path)
        mount, fs_type = partition_of(disk_path)
        now = self.clock.now_ms()
        return BrokerStatus(
            broker_name=self._broker_name,
            cluster_name=self._cluster_name,
            store_root=str(root),
            started=self._started,
            uptime_ms=max(0, now - self._started_at_ms) if self._started else 0,
            store_size_bytes=_tree_size(root),
            disk_total_bytes=usage.total,
            disk_used_bytes=usage.used,
            disk_free_bytes=usage.free,
            put_tps=self._puts.rate(),
            get_tps=self._gets.rate(),
            put_total=self._puts.total,
            get_total=self._gets.total,
            commitlog_min_offset=self.store.commit_log.min_offset,
            commitlog_max_offset=self.store.commit_log.max_offset,
            dispatch_behind_bytes=self.store.dispatch_behind_bytes,
            topic_count=len(self.metadata.topics.list()),
            group_count=len(self.metadata.groups.list()),
            services={name: dict(state) for name, state in (services or {}).items()},
            disk_path=disk_path,
            disk_mount=mount,
            disk_fs_type=fs_type,
        )


def _tree_size(root: Path) -> int:
    total = 0
    stack = [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    # Allocated blocks, not the apparent size: segments are created sparse at
                    # full size (1 GiB CommitLog files), so st_size overstates a young store.
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total
