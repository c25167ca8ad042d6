"""Topic and group configs as front ends see them (:class:`TopicInfo`, :class:`GroupInfo`)."""

from __future__ import annotations

from mqcore.broker.types import GroupInfo, TopicInfo, TopicKind
from mqcore.metadata import Metadata, SubscriptionGroupConfig, TopicConfig
from mqcore.validation import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX


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
