"""Administration of one broker: topics, subscription groups, queue bounds, lag and offset
resets, as front ends see them (:class:`TopicInfo`, :class:`GroupInfo`, ...).

A :class:`BrokerAdmin` is composed into the :class:`~mqcore.broker.broker.Broker` as
``broker.admin`` (``broker.admin.create_topic(...)``): what an operator does to the broker's
configuration lives here, what producers and consumers do (send, pull, commit offsets) on the
Broker itself. Both share the broker's store, reader and metadata.

Thread-safety: every method is thread-safe (the metadata managers lock; store reads take no
store-wide lock).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from mqcore.broker import lag
from mqcore.broker.reader import StoreReader
from mqcore.broker.sending import check_queue_id
from mqcore.broker.types import (
    GroupInfo,
    GroupLag,
    OffsetResetPlan,
    QueueStatus,
    TopicInfo,
    TopicKind,
    TopicStatus,
)
from mqcore.clock import Clock
from mqcore.errors import NotFoundError, ValidationError
from mqcore.metadata import Metadata, SubscriptionGroupConfig, TopicConfig
from mqcore.metadata.topics import PERM_READ, PERM_WRITE
from mqcore.store.store import MessageStore
from mqcore.validation import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

DEFAULT_CREATE_QUEUE_NUMS = 8  # mqadmin updateTopic's default read/write queue count


class BrokerAdmin:
    """Topics, groups, queue bounds, lag and offset resets of one broker.

    Args:
        store: the broker's store (topic deletion removes its ConsumeQueue files).
        reader: what reads go through (the store, or the tiered store wrapping it).
        metadata: the broker's config managers.
        clock: time source for lag ages.
        broker_name: the name every result carries.
    """

    def __init__(
        self,
        store: MessageStore,
        reader: StoreReader,
        metadata: Metadata,
        clock: Clock,
        broker_name: str,
    ) -> None:
        self.store = store
        self.reader = reader
        self.metadata = metadata
        self.clock = clock
        self.broker_name = broker_name

    # -- topics -------------------------------------------------------------------------------

    def list_topics(self, *, include_system: bool = True) -> list[TopicInfo]:
        """Every topic, sorted by name; ``include_system=False`` leaves out the broker's own
        (retry and DLQ topics are kept). Thread-safe."""
        infos = [
            topic_info(self.metadata, self.broker_name, c) for c in self.metadata.topics.list()
        ]
        if not include_system:
            infos = [i for i in infos if i.kind != "system"]
        return sorted(infos, key=lambda i: i.name)

    def get_topic(self, name: str) -> TopicInfo:
        """One topic's settings.

        Raises:
            NotFoundError: field ``topic_name``, rule ``not_found``.
        """
        return topic_info(self.metadata, self.broker_name, self.metadata.topics.require(name))

    def topic_status(self, name: str) -> TopicStatus:
        """Min/max offsets and last store time of every queue of a topic.

        Raises:
            NotFoundError: no such topic.
        """
        config = self.metadata.topics.require(name)
        queues = tuple(
            lag.queue_status(self.reader, self.broker_name, name, q)
            for q in lag.queue_ids(self.reader, config, name)
        )
        return TopicStatus(name, self.broker_name, queues)

    def queue_status(self, topic: str, queue_id: int) -> QueueStatus:
        """One queue's bounds and last store time.

        Raises:
            NotFoundError: no such topic. ValidationError: ``queue_id`` out of ``range``.
        """
        config = self.metadata.topics.require(topic)
        check_queue_id(config, queue_id)
        if queue_id < 0:
            raise ValidationError("queue_id", "range", f"queue_id: must be >= 0 (got {queue_id})")
        return lag.queue_status(self.reader, self.broker_name, topic, queue_id)

    def create_topic(
        self,
        name: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        topic_filter_type: str = "SINGLE_TAG",
        attributes: Mapping[str, str] | None = None,
    ) -> TopicInfo:
        """Create a topic and persist ``topics.json``.

        Args:
            read_queue_nums, write_queue_nums: 1..1024; when only one is given the other
                equals it; neither: 8 each.
            perm: READ 4 | WRITE 2 | INHERIT 1 (0..7).

        Raises:
            ValidationError: a bad name (field ``topic_name``), queue count, perm, filter
                type or attribute, or a system topic's name (rule ``system_topic``).
            ConflictError: the topic exists.
        """
        read = read_queue_nums if read_queue_nums is not None else write_queue_nums
        write = write_queue_nums if write_queue_nums is not None else read
        config = TopicConfig(
            name,
            read if read is not None else DEFAULT_CREATE_QUEUE_NUMS,
            write if write is not None else DEFAULT_CREATE_QUEUE_NUMS,
            perm,
            topic_filter_type,
            0,
            order,
            dict(attributes or {}),
        )
        return topic_info(self.metadata, self.broker_name, self.metadata.topics.create(config))

    def update_topic(self, name: str, **changes: Any) -> TopicInfo:
        """Change some settings (``read_queue_nums``, ``write_queue_nums``, ``perm``,
        ``order``, ``topic_filter_type``, ``topic_sys_flag``, ``attributes``) and persist.

        Raises:
            NotFoundError: no such topic.
            ValidationError: an unknown setting (rule ``unknown_field``) or a bad value.
        """
        updated = self.metadata.topics.update(name, **changes)
        return topic_info(self.metadata, self.broker_name, updated)

    def delete_topic(self, name: str) -> None:
        """Delete a topic, its ConsumeQueue files and every group's offsets on it. Its
        records stay in the CommitLog until cleanup removes their segment.

        Raises:
            NotFoundError: no such topic.
            ValidationError: rule ``system_topic``.
        """
        self.metadata.topics.delete(name)
        self.metadata.offsets.remove_topic(name)
        self.store.queues.delete_topic(name)

    # -- groups -------------------------------------------------------------------------------

    def list_groups(self) -> list[GroupInfo]:
        """Every subscription group, sorted by name. Thread-safe."""
        infos = [
            group_info(self.metadata, self.broker_name, c) for c in self.metadata.groups.list()
        ]
        return sorted(infos, key=lambda i: i.name)

    def get_group(self, name: str) -> GroupInfo:
        """Raises: NotFoundError (field ``group_name``)."""
        return group_info(self.metadata, self.broker_name, self.metadata.groups.require(name))

    def create_group(self, name: str, **settings: Any) -> GroupInfo:
        """Create a subscription group (spec 8.3 defaults for what is not given) and persist.

        Args:
            settings: :class:`~mqcore.metadata.SubscriptionGroupConfig` fields, e.g.
                ``retry_max_times=3``, ``retry_queue_nums=1``, ``consume_enable=False``.

        Raises:
            ValidationError: a bad name or value, or an unknown setting (``unknown_field``).
            ConflictError: the group exists.
        """
        unknown = set(settings) - _GROUP_FIELDS
        if unknown:
            field = sorted(unknown)[0]
            raise ValidationError(field, "unknown_field", f"{field!r} is not a group setting")
        created = self.metadata.groups.create(SubscriptionGroupConfig(name, **settings))
        return group_info(self.metadata, self.broker_name, created)

    def update_group(self, name: str, **changes: Any) -> GroupInfo:
        """Change some settings and persist.

        Raises:
            NotFoundError: no such group. ValidationError: unknown setting or bad value.
        """
        updated = self.metadata.groups.update(name, **changes)
        return group_info(self.metadata, self.broker_name, updated)

    def delete_group(self, name: str, *, remove_offsets: bool = True) -> None:
        """Delete a group (and, by default, its committed offsets). Its retry and DLQ topics
        are kept (they may hold messages someone wants).

        Raises:
            NotFoundError: no such group. ValidationError: rule ``system_group``.
        """
        self.metadata.groups.delete(name)
        if remove_offsets:
            self.metadata.offsets.remove_group(name)

    def delete_offsets(
        self, group: str, topic: str, queue_ids: Iterable[int] | None = None
    ) -> dict[int, int]:
        """Forget ``group``'s committed offsets on ``topic`` (every queue, or ``queue_ids``),
        as Kafka's OffsetDelete does; the group and the topic need not exist any more.
        Returns the removed ``{queue_id: offset}``. Thread-safe."""
        if queue_ids is None:
            queue_ids = self.metadata.offsets.offsets_for(group, topic)
        return self.metadata.offsets.remove_queues(group, topic, queue_ids)

    def forget_group_offsets(self, group: str) -> int:
        """Forget every committed offset of ``group``, whether or not a subscription group
        of that name exists (Kafka's DeleteGroups for a group known only by its offsets).
        Returns the number of topics dropped. Thread-safe."""
        return self.metadata.offsets.remove_group(group)

    def _group_topics(self, group: str, topic: str | None) -> list[TopicConfig]:
        if topic is not None:
            return [self.metadata.topics.require(topic)]
        names = set(self.metadata.offsets.topics_of_group(group))
        config = self.metadata.groups.get(group)
        for item in (config.subscription_data_set or ()) if config else ():
            if isinstance(item.get("topic"), str):
                names.add(item["topic"])
        found = (self.metadata.topics.get(n) for n in sorted(names))
        return [c for c in found if c is not None]

    def group_lag(self, group: str, topic: str | None = None) -> GroupLag:
        """Lag per queue (messages and ms) of ``group`` on ``topic``, or on every topic it
        has offsets on or subscribes to. See :mod:`mqcore.broker.lag`. Thread-safe.

        Raises:
            NotFoundError: no such group (field ``group_name``) or topic.
        """
        self.metadata.groups.require(group)
        queues = [
            lag.queue_lag(
                self.reader,
                self.clock,
                self.broker_name,
                config.topic_name,
                q,
                self.metadata.offsets.query(group, config.topic_name, q),
            )
            for config in self._group_topics(group, topic)
            for q in lag.queue_ids(self.reader, config, config.topic_name)
        ]
        return GroupLag(group, self.broker_name, tuple(queues))

    def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        to: Literal["earliest", "latest"] | None = None,
        timestamp_ms: int | None = None,
        offsets: Mapping[int, int] | None = None,
        dry_run: bool = False,
    ) -> list[OffsetResetPlan]:
        """Move ``group``'s offsets on ``topic``: to the earliest or latest offset, to the
        first message stored at or after ``timestamp_ms``, or to explicit ``offsets`` per
        queue (clamped into each queue's [min, max]). Give exactly one.

        Returns:
            Per queue (sorted): old offset, new offset, lag before and after. With
            ``dry_run`` nothing is committed.

        Raises:
            NotFoundError: unknown group or topic.
            ValidationError: rule ``one_target``, ``choice``, ``range``, ``queue_range``.
        """
        require_group(self.metadata, group)
        config = self.metadata.topics.require(topic)
        targets = lag.reset_targets(
            self.reader, config, to=to, timestamp_ms=timestamp_ms, offsets=offsets
        )
        committed = self.metadata.offsets.offsets_for(group, topic)
        plans = lag.plan_reset(self.reader, self.broker_name, topic, committed, targets)
        if not dry_run:
            for plan in plans:
                self.metadata.offsets.commit(group, topic, plan.queue_id, plan.new_offset)
        return plans


_GROUP_FIELDS = frozenset(f.name for f in dataclasses.fields(SubscriptionGroupConfig)) - {
    "group_name"
}


def require_group(metadata: Metadata, group: str) -> SubscriptionGroupConfig:
    """The group's config, auto-created when the metadata allows it.

    Raises:
        NotFoundError: field ``group``, rule ``not_found``.
    """
    config = metadata.groups.get_or_auto_create(group)
    if config is None:
        raise NotFoundError("group", "not_found", f"group {group!r} does not exist")
    return config


def topic_kind(metadata: Metadata, name: str) -> TopicKind:
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if name.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dlq"
    if metadata.topics.is_system_topic(name):
        return "system"
    return "normal"


def topic_info(metadata: Metadata, broker_name: str, config: TopicConfig) -> TopicInfo:
    return TopicInfo(
        name=config.topic_name,
        broker_name=broker_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        order=config.order,
        topic_filter_type=config.topic_filter_type,
        topic_sys_flag=config.topic_sys_flag,
        attributes=dict(config.attributes),
        kind=topic_kind(metadata, config.topic_name),
    )


def group_info(metadata: Metadata, broker_name: str, config: SubscriptionGroupConfig) -> GroupInfo:
    return GroupInfo(
        name=config.group_name,
        broker_name=broker_name,
        consume_enable=config.consume_enable,
        consume_from_min_enable=config.consume_from_min_enable,
        consume_broadcast_enable=config.consume_broadcast_enable,
        consume_message_orderly=config.consume_message_orderly,
        retry_queue_nums=config.retry_queue_nums,
        retry_max_times=config.retry_max_times,
        broker_id=config.broker_id,
        which_broker_when_consume_slowly=config.which_broker_when_consume_slowly,
        notify_consumer_ids_changed_enable=config.notify_consumer_ids_changed_enable,
        group_sys_flag=config.group_sys_flag,
        consume_timeout_minute=config.consume_timeout_minute,
        group_retry_policy=dict(config.group_retry_policy),
        attributes=dict(config.attributes),
        topics=tuple(metadata.offsets.topics_of_group(config.group_name)),
        system=metadata.groups.is_system_group(config.group_name),
    )
