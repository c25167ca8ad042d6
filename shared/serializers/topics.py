"""Topics: create and update bodies; TopicInfo / TopicStatus out."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from mqcore.broker.types import TopicInfo, TopicStatus
from mqcore.metadata.topics import MAX_QUEUE_NUMS, PERM_MAX, TOPIC_FILTER_TYPES
from shared.serializers.common import (
    Int,
    StrictSerializer,
    StrMapField,
    TopicNameField,
    page_serializer,
)
from shared.serializers.tiered import TierQueueSerializer

FILTER_TYPES = sorted(TOPIC_FILTER_TYPES)
TOPIC_KINDS = ["normal", "retry", "dlq", "system"]


class TopicUpdateSerializer(StrictSerializer):
    """PATCH body: any subset of the settings."""

    read_queue_nums = Int(1, MAX_QUEUE_NUMS, required=False)
    write_queue_nums = Int(1, MAX_QUEUE_NUMS, required=False)
    perm = Int(0, PERM_MAX, required=False, help_text="bits: READ 4, WRITE 2, INHERIT 1")
    order = serializers.BooleanField(required=False)
    topic_filter_type = serializers.ChoiceField(FILTER_TYPES, required=False)
    attributes = StrMapField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("give at least one setting to change", code="empty")
        return attrs


class TopicCreateSerializer(TopicUpdateSerializer):
    """POST body. Queue counts default to 8 each (one given: both); perm to 6 (read + write)."""

    name = TopicNameField()
    perm = Int(0, PERM_MAX, default=6, help_text="bits: READ 4, WRITE 2, INHERIT 1")
    order = serializers.BooleanField(default=False)
    topic_filter_type = serializers.ChoiceField(FILTER_TYPES, default="SINGLE_TAG")
    attributes = StrMapField(default=dict)


class QueueStatusSerializer(serializers.Serializer):
    queue_id = serializers.IntegerField()
    min_offset = serializers.IntegerField()
    max_offset = serializers.IntegerField()
    message_count = serializers.IntegerField()
    last_store_timestamp = serializers.IntegerField(help_text="epoch ms; 0 for an empty queue")
    tier = TierQueueSerializer(
        required=False, allow_null=True, help_text="tiered storage progress; null if not tiered"
    )


class TopicSerializer(serializers.Serializer):
    """A topic's settings, with its queue count and the messages it still stores."""

    name = serializers.CharField()
    broker_name = serializers.CharField()
    kind = serializers.ChoiceField(TOPIC_KINDS)
    read_queue_nums = serializers.IntegerField()
    write_queue_nums = serializers.IntegerField()
    perm = serializers.IntegerField()
    readable = serializers.BooleanField()
    writable = serializers.BooleanField()
    order = serializers.BooleanField()
    topic_filter_type = serializers.CharField()
    topic_sys_flag = serializers.IntegerField()
    attributes = serializers.DictField(child=serializers.CharField())
    queue_count = serializers.IntegerField()
    message_count = serializers.IntegerField(help_text="sum of max - min offset over queues")

    def to_representation(self, instance: tuple[TopicInfo, TopicStatus]) -> dict[str, Any]:
        info, status = instance
        return {
            "name": info.name,
            "broker_name": info.broker_name,
            "kind": info.kind,
            "read_queue_nums": info.read_queue_nums,
            "write_queue_nums": info.write_queue_nums,
            "perm": info.perm,
            "readable": info.readable,
            "writable": info.writable,
            "order": info.order,
            "topic_filter_type": info.topic_filter_type,
            "topic_sys_flag": info.topic_sys_flag,
            "attributes": dict(info.attributes),
            "queue_count": len(status.queues),
            "message_count": status.message_count,
        }


class TopicDetailSerializer(TopicSerializer):
    """A topic with every queue's min/max offset and last store time."""

    queues = QueueStatusSerializer(many=True)
    last_store_timestamp = serializers.IntegerField(help_text="newest over all queues; 0 if none")

    def to_representation(self, instance: tuple[TopicInfo, TopicStatus]) -> dict[str, Any]:
        data = super().to_representation(instance)
        queues = instance[1].queues
        data["queues"] = [
            {
                "queue_id": q.queue_id,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
                "message_count": q.max_offset - q.min_offset,
                "last_store_timestamp": q.last_store_timestamp,
            }
            for q in queues
        ]
        data["last_store_timestamp"] = max((q.last_store_timestamp for q in queues), default=0)
        return data


TopicPageSerializer = page_serializer("TopicPageSerializer", TopicSerializer)
