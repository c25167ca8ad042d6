"""Subscription groups, their lag, committed offsets and offset resets."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from mqcore.broker.types import GroupInfo, GroupLag, OffsetResetPlan, QueueLag
from mqcore.metadata.topics import MAX_QUEUE_NUMS
from shared.serializers.common import (
    INT32_MAX,
    INT64_MAX,
    MAX_QUEUE_ID,
    EpochMsField,
    GroupNameField,
    Int,
    StrictSerializer,
    StrMapField,
    TopicNameField,
    page_serializer,
)


class GroupUpdateSerializer(StrictSerializer):
    """PATCH body: any subset of a group's settings (RocketMQ SubscriptionGroupConfig)."""

    consume_enable = serializers.BooleanField(required=False)
    consume_from_min_enable = serializers.BooleanField(required=False)
    consume_broadcast_enable = serializers.BooleanField(required=False)
    consume_message_orderly = serializers.BooleanField(required=False)
    retry_queue_nums = Int(
        0, MAX_QUEUE_NUMS, required=False, help_text="0: failed messages are dropped"
    )
    retry_max_times = Int(0, INT32_MAX, required=False)
    broker_id = Int(0, INT64_MAX, required=False)
    which_broker_when_consume_slowly = Int(0, INT64_MAX, required=False)
    notify_consumer_ids_changed_enable = serializers.BooleanField(required=False)
    group_sys_flag = Int(0, INT32_MAX, required=False)
    consume_timeout_minute = Int(0, INT64_MAX, required=False)
    group_retry_policy = serializers.DictField(
        required=False, help_text='e.g. {"type": "CUSTOMIZED"} or {"type": "EXPONENTIAL", ...}'
    )
    attributes = StrMapField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("give at least one setting to change", code="empty")
        return attrs


class GroupCreateSerializer(GroupUpdateSerializer):
    """POST body: a name and any settings (RocketMQ's defaults for the rest)."""

    name = GroupNameField()


class GroupSerializer(serializers.Serializer):
    name = serializers.CharField()
    broker_name = serializers.CharField()
    system = serializers.BooleanField()
    consume_enable = serializers.BooleanField()
    consume_from_min_enable = serializers.BooleanField()
    consume_broadcast_enable = serializers.BooleanField()
    consume_message_orderly = serializers.BooleanField()
    retry_queue_nums = serializers.IntegerField()
    retry_max_times = serializers.IntegerField()
    broker_id = serializers.IntegerField()
    which_broker_when_consume_slowly = serializers.IntegerField()
    notify_consumer_ids_changed_enable = serializers.BooleanField()
    group_sys_flag = serializers.IntegerField()
    consume_timeout_minute = serializers.IntegerField()
    group_retry_policy = serializers.DictField()
    attributes = serializers.DictField(child=serializers.CharField())
    topics = serializers.ListField(child=serializers.CharField(), help_text="topics with offsets")

    def to_representation(self, g: GroupInfo) -> dict[str, Any]:
        return group_dict(g)


def group_dict(g: GroupInfo) -> dict[str, Any]:
    return {
        "name": g.name,
        "broker_name": g.broker_name,
        "system": g.system,
        "consume_enable": g.consume_enable,
        "consume_from_min_enable": g.consume_from_min_enable,
        "consume_broadcast_enable": g.consume_broadcast_enable,
        "consume_message_orderly": g.consume_message_orderly,
        "retry_queue_nums": g.retry_queue_nums,
        "retry_max_times": g.retry_max_times,
        "broker_id": g.broker_id,
        "which_broker_when_consume_slowly": g.which_broker_when_consume_slowly,
        "notify_consumer_ids_changed_enable": g.notify_consumer_ids_changed_enable,
        "group_sys_flag": g.group_sys_flag,
        "consume_timeout_minute": g.consume_timeout_minute,
        "group_retry_policy": dict(g.group_retry_policy),
        "attributes": dict(g.attributes),
        "topics": list(g.topics),
    }


GroupPageSerializer = page_serializer("GroupPageSerializer", GroupSerializer)


# -- lag --------------------------------------------------------------------------------------


class QueueLagSerializer(serializers.Serializer):
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    broker_offset = serializers.IntegerField(help_text="the queue's max offset")
    consumer_offset = serializers.IntegerField(allow_null=True, help_text="null: never committed")
    lag = serializers.IntegerField()
    lag_ms = serializers.IntegerField(help_text="age of the oldest unconsumed message")
    oldest_unconsumed_timestamp = serializers.IntegerField()


class TopicLagSerializer(serializers.Serializer):
    topic = serializers.CharField()
    lag = serializers.IntegerField()
    max_lag_ms = serializers.IntegerField()
    queues = QueueLagSerializer(many=True)


class LagSummarySerializer(serializers.Serializer):
    total_lag = serializers.IntegerField()
    max_lag = serializers.IntegerField()
    max_lag_topic = serializers.CharField(allow_null=True)
    max_lag_queue_id = serializers.IntegerField(allow_null=True)
    max_lag_ms = serializers.IntegerField()


class GroupLagSerializer(serializers.Serializer):
    group = serializers.CharField()
    broker_name = serializers.CharField()
    summary = LagSummarySerializer()
    topics = TopicLagSerializer(many=True)

    def to_representation(self, lag: GroupLag) -> dict[str, Any]:
        return lag_dict(lag)


def _queue_lag(q: QueueLag) -> dict[str, Any]:
    return {
        "topic": q.topic,
        "queue_id": q.queue_id,
        "broker_offset": q.broker_offset,
        "consumer_offset": q.consumer_offset,
        "lag": q.lag,
        "lag_ms": q.lag_ms,
        "oldest_unconsumed_timestamp": q.oldest_unconsumed_timestamp,
    }


def lag_dict(lag: GroupLag) -> dict[str, Any]:
    topics: dict[str, list[QueueLag]] = {}
    for q in lag.queues:
        topics.setdefault(q.topic, []).append(q)
    worst = max(lag.queues, key=lambda q: q.lag, default=None)
    return {
        "group": lag.group,
        "broker_name": lag.broker_name,
        "summary": {
            "total_lag": lag.total_lag,
            "max_lag": worst.lag if worst else 0,
            "max_lag_topic": worst.topic if worst else None,
            "max_lag_queue_id": worst.queue_id if worst else None,
            "max_lag_ms": lag.max_lag_ms,
        },
        "topics": [
            {
                "topic": topic,
                "lag": sum(q.lag for q in queues),
                "max_lag_ms": max(q.lag_ms for q in queues),
                "queues": [_queue_lag(q) for q in queues],
            }
            for topic, queues in sorted(topics.items())
        ],
    }


class TopicFilterSerializer(serializers.Serializer):
    topic = TopicNameField(required=False)


# -- offsets ------------------------------------------------------------------------------------


class OffsetSerializer(StrictSerializer):
    topic = TopicNameField()
    queue_id = Int(0, MAX_QUEUE_ID)
    offset = Int(0, INT64_MAX, help_text="the next offset the group will consume")


class OffsetsSerializer(StrictSerializer):
    """``{"offsets": [{"topic", "queue_id", "offset"}]}``: committed together, or not at all."""

    offsets = OffsetSerializer(many=True, allow_empty=False, max_length=10_000)


class GroupOffsetsSerializer(serializers.Serializer):
    group = serializers.CharField()
    offsets = OffsetSerializer(many=True)


def offsets_dict(group: str, table: dict[str, dict[int, int]]) -> dict[str, Any]:
    return {
        "group": group,
        "offsets": [
            {"topic": topic, "queue_id": queue_id, "offset": offset}
            for topic, queues in sorted(table.items())
            for queue_id, offset in sorted(queues.items())
        ],
    }


class QueueOffsetSerializer(StrictSerializer):
    queue_id = Int(0, MAX_QUEUE_ID)
    offset = Int(0, INT64_MAX)


class ResetSerializer(StrictSerializer):
    """Move a group's offsets on one topic: to the ``earliest`` or ``latest`` message, to the
    first message stored at or after ``timestamp``, or to explicit ``offsets`` (clamped into
    each queue's range). ``dry_run`` returns the plan and changes nothing."""

    topic = TopicNameField()
    to = serializers.ChoiceField(["earliest", "latest", "timestamp", "offsets"])
    timestamp = EpochMsField(required=False, help_text="with to=timestamp (epoch ms)")
    offsets = QueueOffsetSerializer(
        many=True, required=False, allow_empty=False, max_length=MAX_QUEUE_NUMS
    )
    dry_run = serializers.BooleanField(default=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        to = attrs["to"]
        for name, needed in (("timestamp", to == "timestamp"), ("offsets", to == "offsets")):
            if needed and name not in attrs:
                raise serializers.ValidationError(
                    {name: [serializers.ErrorDetail(f"required with to={to}", code="required")]}
                )
            if not needed and name in attrs:
                raise serializers.ValidationError(
                    {name: [serializers.ErrorDetail(f"not allowed with to={to}", code="exclusive")]}
                )
        return attrs


class ResetPlanSerializer(serializers.Serializer):
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    old_offset = serializers.IntegerField(allow_null=True)
    new_offset = serializers.IntegerField()
    lag_before = serializers.IntegerField()
    lag_after = serializers.IntegerField()


class ResetResultSerializer(serializers.Serializer):
    group = serializers.CharField()
    topic = serializers.CharField()
    dry_run = serializers.BooleanField()
    queues = ResetPlanSerializer(many=True)


def plan_dict(p: OffsetResetPlan) -> dict[str, Any]:
    return {
        "topic": p.topic,
        "queue_id": p.queue_id,
        "old_offset": p.old_offset,
        "new_offset": p.new_offset,
        "lag_before": p.lag_before,
        "lag_after": p.lag_after,
    }
