"""Deleting groups and their offsets: DeleteGroups (42) and OffsetDelete (47), as Kafka's
group coordinator answers them (issue 21).

DeleteGroups, per group: INVALID_GROUP_ID for an id the store cannot name, then
GROUP_AUTHORIZATION_FAILED without DELETE on the group, GROUP_ID_NOT_FOUND when neither
the coordinator, the store's subscription groups nor the committed offsets know it,
NON_EMPTY_GROUP while it has members; otherwise the group goes everywhere at once: its
committed offsets, the store's subscription group (so REST and the console no longer list
it; its retry and DLQ topics stay, as on REST) and the coordinator's empty entry.

OffsetDelete: the group needs DELETE (GROUP_AUTHORIZATION_FAILED for the whole request),
each topic READ (TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka's KafkaApis. An
unknown group is GROUP_ID_NOT_FOUND; an empty one loses the named partitions' offsets; a
group with members loses them only on topics its consumers do not subscribe to
(GROUP_SUBSCRIBED_TO_TOPIC on the others), and a group whose subscriptions cannot be read
(not the ``consumer`` protocol) is NON_EMPTY_GROUP, as Kafka answers.

Both are audited with the REST API's action names, store names and what was removed:
``group.delete`` (old: the offsets it had) and ``group.offsets.delete`` (old: the removed
offsets).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mqcore.access.model import Operation
from mqcore.errors import NotFoundError, ValidationError

from .. import mapping
from ..errors import ErrorCode
from .authz import audit, group_resource, topic_resource
from .context import Call, KafkaContext
from .topics import kafka_topic


def _offsets_entries(table: dict[str, dict[int, int]]) -> list[dict[str, Any]]:
    return [
        {"topic": topic, "queue_id": queue_id, "offset": offset}
        for topic, queues in sorted(table.items())
        for queue_id, offset in sorted(queues.items())
        if queues
    ]


def _store_group_exists(ctx: KafkaContext, store_group: str) -> bool:
    try:
        info = ctx.broker.admin.get_group(store_group)
    except NotFoundError:
        return False
    return not info.system


def _refusal(ctx: KafkaContext, call: Call, group_id: str) -> int:
    """What stops DeleteGroups before the store is touched (on the event loop, which owns
    the coordinator): a bad id, no DELETE on the group, live members."""
    if mapping.to_store_group(group_id) is None:
        return ErrorCode.INVALID_GROUP_ID
    if not call.check(ctx, Operation.DELETE, group_resource(group_id)):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if ctx.coordinator.has_members(group_id):
        return ErrorCode.NON_EMPTY_GROUP
    return 0


def _delete_stored(ctx: KafkaContext, call: Call, group_id: str, coordinated: bool) -> int:
    """Remove an empty group's offsets and subscription group and audit it; ``coordinated``:
    the coordinator knows it. Runs in a worker thread (file and audit writes)."""
    store_group = mapping.to_store_group(group_id)
    assert store_group is not None  # checked by _refusal
    offsets = ctx.broker.get_offsets(store_group)
    known = coordinated or any(offsets.values())
    if _store_group_exists(ctx, store_group):
        try:
            ctx.broker.admin.delete_group(store_group)
        except ValidationError:  # a system group: never a Kafka client's to delete
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
        except NotFoundError:  # deleted meanwhile through another front end
            pass
        known = True
    if not known:
        return ErrorCode.GROUP_ID_NOT_FOUND
    ctx.broker.admin.forget_group_offsets(store_group)
    for key in [k for k in ctx.commit_metadata if k[0] == group_id]:
        ctx.commit_metadata.pop(key, None)
    old = {"offsets": _offsets_entries(offsets)}
    audit(ctx, call, "group.delete", "group", store_group, old=old)
    return 0


async def delete_groups(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Delete each empty group (module docstring)."""
    results = []
    for group_id in call.request["groups_names"]:
        code = _refusal(ctx, call, group_id)
        if not code:
            coordinated = group_id in ctx.coordinator.groups
            code = await asyncio.to_thread(_delete_stored, ctx, call, group_id, coordinated)
            if not code:
                ctx.coordinator.forget(group_id)  # only while it is still empty
        results.append({"group_id": group_id, "error_code": int(code)})
    return {"throttle_time_ms": 0, "results": results}


def _partition_errors(topic: dict[str, Any], code: int) -> dict[str, Any]:
    return {
        "name": topic["name"],
        "partitions": [
            {"partition_index": p["partition_index"], "error_code": int(code)}
            for p in topic["partitions"]
        ],
    }


def _offset_delete(
    ctx: KafkaContext, call: Call, coordinated: bool, subscribed: frozenset[str] | None
) -> dict[str, Any]:
    """OffsetDelete past the group's authorization (module docstring); ``coordinated``: the
    coordinator knows the group, ``subscribed``: its members' topics. Worker thread."""
    request = call.request
    group_id = request["group_id"]
    store_group = mapping.to_store_group(group_id)
    assert store_group is not None
    committed = ctx.broker.get_offsets(store_group)
    known = coordinated or any(committed.values()) or _store_group_exists(ctx, store_group)
    code = 0
    if not known:
        code = ErrorCode.GROUP_ID_NOT_FOUND
    elif subscribed is None:
        code = ErrorCode.NON_EMPTY_GROUP
    if code or subscribed is None:
        return {"error_code": int(code), "throttle_time_ms": 0, "topics": []}
    topics, removed_all = [], []
    for topic in request["topics"]:
        name = topic["name"]
        # Authorization before existence, as Kafka: a refused client learns nothing more.
        valid = mapping.kafka_topic_error(name) is None
        if valid and not call.check(ctx, Operation.READ, topic_resource(name)):
            topics.append(_partition_errors(topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        if not valid or kafka_topic(ctx.broker, name) is None:
            topics.append(_partition_errors(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if name in subscribed:
            topics.append(_partition_errors(topic, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
            continue
        store_topic = mapping.to_store_topic(name)
        queue_ids = [p["partition_index"] for p in topic["partitions"]]
        removed = ctx.broker.admin.delete_offsets(store_group, store_topic, queue_ids)
        for queue_id in removed:
            ctx.commit_metadata.pop((group_id, name, queue_id), None)
        removed_all += [
            {"topic": store_topic, "queue_id": q, "offset": o} for q, o in sorted(removed.items())
        ]
        topics.append(_partition_errors(topic, 0))
    if removed_all:
        audit(ctx, call, "group.offsets.delete", "group", store_group, old=removed_all)
    return {"error_code": 0, "throttle_time_ms": 0, "topics": topics}


async def offset_delete(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Delete one group's offsets on the named partitions (module docstring)."""
    group_id = call.request["group_id"]
    code = 0
    if mapping.to_store_group(group_id) is None:
        code = ErrorCode.INVALID_GROUP_ID
    elif not call.check(ctx, Operation.DELETE, group_resource(group_id)):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    if code:
        return {"error_code": int(code), "throttle_time_ms": 0, "topics": []}
    coordinated = group_id in ctx.coordinator.groups
    subscribed = ctx.coordinator.subscribed_topics(group_id)
    return await asyncio.to_thread(_offset_delete, ctx, call, coordinated, subscribed)
