"""What the Broker takes and returns: frozen dataclasses, one per input or output.

Every front end (REST, Kafka listener, console) speaks these types, so a message sent by one
is seen identically by the others. Each result that names a queue also names the broker
(``broker_name``), as RocketMQ's ``MessageQueue`` does, so that a routing layer over several
brokers can come later without changing these shapes.

Conventions:

* Offsets are queue offsets (logical indexes in a ConsumeQueue) unless named ``phys_offset``.
* A committed consumer offset is the **next** offset the group will consume (spec 8.4).
* Times are epoch milliseconds (``*_ms`` / ``*_timestamp``), durations ``*_ms``.
* Sequences are tuples (the dataclasses are immutable); mappings are plain dicts treated as
  read-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from mqcore.message import MessageExt
from mqcore.store.files.space import used_ratio

__all__ = [
    "BrokerStatus",
    "BrowsePage",
    "ConsumeState",
    "GroupConsumeStatus",
    "GroupInfo",
    "GroupLag",
    "MessageView",
    "OffsetResetPlan",
    "OutgoingMessage",
    "PullResult",
    "PullStatus",
    "QueueLag",
    "QueueStatus",
    "SendBackAction",
    "SendBackResult",
    "SendResult",
    "SendStatus",
    "TopicInfo",
    "TopicKind",
    "TopicStatus",
]


# -- sending ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message as a front end hands it to :meth:`Broker.send`.

    Attributes:
        body: payload, 1 byte to ``max_message_size`` (4 MiB by default).
        tag: the single tag (``TAGS``) consumers filter on; None or "" for none.
        keys: business keys (``KEYS``), indexed for :meth:`Broker.query_by_key`; a sequence,
            or one string of space-separated keys.
        properties: user properties. Names reserved by RocketMQ (``TAGS``, ``UNIQ_KEY``,
            ``DELAY``...) are refused: use the fields instead.
        queue_id: the queue to write to; None lets the broker choose (by ``sharding_key``
            hash if there is one, else round robin). Kafka's explicit partition goes here.
        sharding_key: messages with the same key go to the same queue (as long as the
            topic's write queue count stays the same): ``abs(hashCode(key)) % writeQueueNums``,
            RocketMQ's ``SelectMessageQueueByHash``. Ignored when ``queue_id`` is set.
        delay_level: 1-based delay level (spec 9, 1 = 1 s ... 18 = 2 h); 0 for none.
            Levels above the highest are clamped to it.
        flag: opaque int for the application (record FLAG).
        born_timestamp: producer time (ms); None = the broker's clock (Kafka sets it).
    """

    body: bytes
    tag: str | None = None
    keys: Sequence[str] | str = ()
    properties: Mapping[str, str] | None = None
    queue_id: int | None = None
    sharding_key: str | None = None
    delay_level: int = 0
    flag: int = 0
    born_timestamp: int | None = None


class SendStatus(StrEnum):
    """RocketMQ's client ``SendStatus``: the message is stored in every case."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where one message was stored.

    Attributes:
        msg_id: the client-visible id (``UNIQ_KEY``); kept across retries.
        offset_msg_id: store host + commit-log offset (spec 2.3); unique per stored record.
        topic, queue_id: where consumers will see it (for a delayed message: its real topic
            and queue, where it appears once due).
        queue_offset: the offset it was stored at. For a delayed message this is its offset
            in ``SCHEDULE_TOPIC_XXXX`` (what RocketMQ reports too); ``delayed`` says so.
        store_timestamp: when the broker stored it (ms).
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    broker_name: str
    store_timestamp: int
    delayed: bool = False


class SendBackAction(StrEnum):
    """What :meth:`Broker.send_back` did with a failed message."""

    RETRY = "RETRY"  # stored for %RETRY%<group>, due after the level's delay
    DLQ = "DLQ"  # retries exhausted (or delay level < 0): stored in %DLQ%<group>
    DROPPED = "DROPPED"  # the group has retry_queue_nums == 0 (RocketMQ drops it too)


@dataclass(frozen=True, slots=True)
class SendBackResult:
    """Outcome of :meth:`Broker.send_back`.

    Attributes:
        reconsume_times: the new copy's reconsume count (the failed one's + 1).
        delay_level: the level the retry waits (0 for DLQ and dropped).
        send: where the copy was stored (None when dropped).
    """

    action: SendBackAction
    reconsume_times: int
    delay_level: int
    send: SendResult | None


# -- pulling ----------------------------------------------------------------------------------


class PullStatus(StrEnum):
    """RocketMQ's client ``PullStatus`` (spec 7.1 mapping)."""

    FOUND = "FOUND"  # messages returned
    NO_NEW_MSG = "NO_NEW_MSG"  # offset is at the queue's end (after the wait, if any)
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # nothing matched the tags; continue at next_offset
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"  # offset outside [min, max]; next_offset is the fix


@dataclass(frozen=True, slots=True)
class PullResult:
    """One pull's answer.

    Attributes:
        messages: matching messages, queue order (tags already re-checked).
        next_offset: where the next pull should start.
        min_offset, max_offset: the queue's bounds at the time of the pull.
    """

    status: PullStatus
    messages: tuple[MessageExt, ...]
    next_offset: int
    min_offset: int
    max_offset: int


# -- topics -----------------------------------------------------------------------------------

TopicKind = Literal["normal", "retry", "dlq", "system"]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic's settings (spec 8.2) as front ends show them.

    Attributes:
        perm: bits READ 4, WRITE 2, INHERIT 1.
        kind: ``retry`` for ``%RETRY%<group>``, ``dlq`` for ``%DLQ%<group>``, ``system`` for
            the broker's own topics, else ``normal``.
    """

    name: str
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool
    topic_filter_type: str
    topic_sys_flag: int
    attributes: dict[str, str]
    kind: TopicKind

    @property
    def readable(self) -> bool:
        return bool(self.perm & 4)

    @property
    def writable(self) -> bool:
        return bool(self.perm & 2)

    def settings(self) -> dict[str, Any]:
        """The settings an operator changes, by the REST API's keys: what the audit log
        records as a topic change's old and new value, whichever front end made it."""
        return {
            "name": self.name,
            "read_queue_nums": self.read_queue_nums,
            "write_queue_nums": self.write_queue_nums,
            "perm": self.perm,
            "order": self.order,
            "topic_filter_type": self.topic_filter_type,
            "attributes": dict(self.attributes),
        }


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue's bounds. ``last_store_timestamp`` is 0 for an empty queue."""

    topic: str
    queue_id: int
    broker_name: str
    min_offset: int
    max_offset: int
    last_store_timestamp: int


@dataclass(frozen=True, slots=True)
class TopicStatus:
    """Every queue of a topic (``max(read, write)`` queues plus any found on disk)."""

    topic: str
    broker_name: str
    queues: tuple[QueueStatus, ...]

    @property
    def message_count(self) -> int:
        """Messages still stored (sum of ``max - min``)."""
        return sum(q.max_offset - q.min_offset for q in self.queues)


# -- groups and offsets -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group's settings (spec 8.3) and the topics it has offsets on.

    Attributes:
        group_retry_policy: RocketMQ's bean as a plain dict, e.g. ``{"type": "CUSTOMIZED"}``.
        topics: topics with committed offsets, sorted.
        system: one of the broker's own groups (cannot be deleted).
    """

    name: str
    broker_name: str
    consume_enable: bool
    consume_from_min_enable: bool
    consume_broadcast_enable: bool
    consume_message_orderly: bool
    retry_queue_nums: int
    retry_max_times: int
    broker_id: int
    which_broker_when_consume_slowly: int
    notify_consumer_ids_changed_enable: bool
    group_sys_flag: int
    consume_timeout_minute: int
    group_retry_policy: dict[str, Any]
    attributes: dict[str, str]
    topics: tuple[str, ...]
    system: bool


@dataclass(frozen=True, slots=True)
class QueueLag:
    """How far a group is behind on one queue.

    Attributes:
        broker_offset: the queue's max offset.
        consumer_offset: the group's committed next offset; None if it never committed.
        lag: messages not yet consumed (from the committed offset, or from the queue's min
            offset when nothing is committed).
        lag_ms: now minus the store time of the oldest unconsumed message; 0 without lag.
        oldest_unconsumed_timestamp: that store time; 0 without lag.
    """

    topic: str
    queue_id: int
    broker_name: str
    broker_offset: int
    consumer_offset: int | None
    lag: int
    lag_ms: int
    oldest_unconsumed_timestamp: int


@dataclass(frozen=True, slots=True)
class GroupLag:
    """A group's lag on every queue of the topics it consumes, and the totals."""

    group: str
    broker_name: str
    queues: tuple[QueueLag, ...]

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)

    @property
    def max_lag_ms(self) -> int:
        return max((q.lag_ms for q in self.queues), default=0)


@dataclass(frozen=True, slots=True)
class OffsetResetPlan:
    """One queue's part of an offset reset (applied, or only planned in a dry run).

    Attributes:
        old_offset: the committed offset before; None if the group never committed there.
        lag_before, lag_after: messages behind before and after.
    """

    topic: str
    queue_id: int
    broker_name: str
    old_offset: int | None
    new_offset: int
    lag_before: int
    lag_after: int


# -- browsing and message detail --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrowsePage:
    """One page of a time-range browse over every queue of a topic.

    Attributes:
        messages: in store-time order (ties: queue id, then queue offset).
        next_cursor: pass back to get the next page; None once exhausted.
        exhausted: no message of the range is left after this page.
    """

    messages: tuple[MessageExt, ...]
    next_cursor: str | None
    exhausted: bool


class ConsumeState(StrEnum):
    """Where a message stands for one consumer group (console "message detail")."""

    CONSUMED = "CONSUMED"  # the group's committed offset is past it
    PENDING = "PENDING"  # not consumed yet (or delayed and not yet due)
    RETRYING = "RETRYING"  # failed; a copy waits in (or for) %RETRY%<group>
    DLQ = "DLQ"  # retries exhausted; a copy sits in %DLQ%<group>


@dataclass(frozen=True, slots=True)
class GroupConsumeStatus:
    """One group's view of a message.

    Attributes:
        committed_offset: the group's committed offset on the queue that decided ``state``
            (the message's own queue, or the retry queue of its retry copy); None if none.
        reconsume_times: failed deliveries so far (0 when it never failed).
    """

    group: str
    state: ConsumeState
    committed_offset: int | None
    reconsume_times: int


@dataclass(frozen=True, slots=True)
class MessageView:
    """A message and its consume status per subscribing group.

    Attributes:
        message: the stored record in its home topic (the topic producers sent it to); for
            a delayed message not yet due, the record parked in ``SCHEDULE_TOPIC_XXXX``.
        topic: the home topic.
        statuses: one entry per group that has offsets on (or subscribes to) the topic,
            sorted by group name.
    """

    message: MessageExt
    msg_id: str
    offset_msg_id: str
    topic: str
    broker_name: str
    statuses: tuple[GroupConsumeStatus, ...]


# -- status -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """What the console's status page shows.

    Attributes:
        store_size_bytes: disk space the files under the store root take (commit log,
            queues, index, config): allocated blocks, so a sparse, mostly empty segment
            counts what was written, not its full size.
        disk_*: the partition holding the CommitLog, the one the disk guard watches
            (``shutil.disk_usage`` of ``disk_path``): ``disk_mount`` is its mount point and
            ``disk_fs_type`` its file system type ("" when unknown).
        put_tps, get_tps: messages stored / returned by pulls per second, averaged over the
            last 60 s.
        commitlog_min_offset, commitlog_max_offset: phys offsets.
        dispatch_behind_bytes: commit log not yet dispatched to the queues and the index.
        services: per-service state handed in by the runtime (``ServiceState.as_dict()``).
    """

    broker_name: str
    cluster_name: str
    store_root: str
    started: bool
    uptime_ms: int
    store_size_bytes: int
    disk_total_bytes: int
    disk_used_bytes: int
    disk_free_bytes: int
    put_tps: float
    get_tps: float
    put_total: int
    get_total: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    dispatch_behind_bytes: int
    topic_count: int
    group_count: int
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    disk_path: str = ""
    disk_mount: str = ""
    disk_fs_type: str = ""

    @property
    def disk_used_ratio(self) -> float:
        """The disk guard's figure (:func:`mqcore.store.files.space.used_ratio`, ``df``'s Use%):
        blocks reserved for root count as used, as they are unusable to the broker."""
        return used_ratio(self.disk_used_bytes, self.disk_free_bytes)
