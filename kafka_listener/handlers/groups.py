"""Group APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9).
Sections 2.8-2.12 and 4.

Membership is the :class:`~kafka_listener.coordinator.GroupCoordinator`'s (in memory);
JoinGroup and SyncGroup await its ``respond`` callback through a future. Committed offsets
are the broker's (``consumerOffset.json``, group names escaped by
``mapping.to_store_group``); commit metadata has no slot there and is kept in memory.
OffsetFetch for an unknown group or partition answers offset -1 without error (clients
then apply ``auto.offset.reset``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mqcore.errors import MQError, NotFoundError, ValidationError

from .. import mapping
from ..coordinator import JoinRequest
from ..errors import ErrorCode, error_code_for
from .context import Call, KafkaContext
from .topics import kafka_topic

MAX_METADATA_CHARS = 4096  # Kafka's offset.metadata.max.bytes
_COMMIT_ERRORS: dict[type[BaseException], ErrorCode] = {
    NotFoundError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ValidationError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


def _respond_into(future: asyncio.Future[dict[str, Any]]) -> Any:
    def respond(reply: dict[str, Any]) -> None:
        if not future.done():  # the connection may be gone (task cancelled)
            future.set_result(reply)

    return respond


async def find_coordinator(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Always this node for groups; transactions are not offered."""
    host, port = ctx.advertised
    reply = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "node_id": ctx.config.node_id,
        "host": host,
        "port": port,
    }
    if call.request["key_type"] == 1:
        reply.update(
            error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            error_message="transactions are not supported",
            node_id=-1,
            host="",
            port=-1,
        )
    elif not call.request["key"]:
        reply.update(error_code=int(ErrorCode.INVALID_GROUP_ID), node_id=-1, host="", port=-1)
    return reply


async def join_group(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    r = call.request
    loop = asyncio.get_running_loop()
    future: asyncio.Future[dict[str, Any]] = loop.create_future()
    if mapping.to_store_group(r["group_id"]) is None:
        future.set_result(
            {
                "error_code": int(ErrorCode.INVALID_GROUP_ID),
                "generation_id": -1,
                "protocol_name": "",
                "leader": "",
                "member_id": r["member_id"],
                "members": [],
            }
        )
    else:
        rebalance_timeout = r["rebalance_timeout_ms"]
        request = JoinRequest(
            group_id=r["group_id"],
            member_id=r["member_id"],
            client_id=call.client_id or "",
            client_host=call.client_host,
            session_timeout_ms=r["session_timeout_ms"],
            rebalance_timeout_ms=rebalance_timeout
            if rebalance_timeout >= 0
            else r["session_timeout_ms"],
            protocol_type=r["protocol_type"],
            protocols=[(p["name"], p["metadata"]) for p in r["protocols"]],
            group_instance_id=r["group_instance_id"],
            require_known_member_id=call.api_version >= 4,
        )
        ctx.coordinator.join(request, _respond_into(future))
    reply = await future
    return {"throttle_time_ms": 0, **reply}


async def sync_group(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    r = call.request
    future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    assignments = {a["member_id"]: a["assignment"] for a in r["assignments"]}
    ctx.coordinator.sync(
        r["group_id"],
        r["generation_id"],
        r["member_id"],
        r["group_instance_id"],
        assignments,
        _respond_into(future),
    )
    reply = await future
    return {"throttle_time_ms": 0, **reply}


async def heartbeat(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    r = call.request
    code = ctx.coordinator.heartbeat(
        r["group_id"], r["generation_id"], r["member_id"], r["group_instance_id"]
    )
    return {"throttle_time_ms": 0, "error_code": int(code)}


async def leave_group(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    code = ctx.coordinator.leave(call.request["group_id"], call.request["member_id"])
    return {"throttle_time_ms": 0, "error_code": int(code)}


# -- offsets -----------------------------------------------------------------------------


def _commit_one(
    ctx: KafkaContext, group: str, store_group: str, topic: str, part: dict[str, Any]
) -> int:
    metadata = part["committed_metadata"]
    if metadata is not None and len(metadata) > MAX_METADATA_CHARS:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    info = kafka_topic(ctx.broker, topic)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    partition, offset = part["partition_index"], part["committed_offset"]
    if not 0 <= partition < info.read_queue_nums:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if offset < 0:
        return ErrorCode.OFFSET_OUT_OF_RANGE
    try:
        try:
            ctx.broker.commit_offset(store_group, info.name, partition, offset)
        except NotFoundError as exc:
            if exc.field != "group":
                raise
            ctx.broker.create_group(store_group)  # groups are not auto-created here
            ctx.broker.commit_offset(store_group, info.name, partition, offset)
    except MQError as exc:
        return error_code_for(exc, _COMMIT_ERRORS)
    ctx.commit_metadata[(group, topic, partition)] = metadata
    return 0


def _commit_all(ctx: KafkaContext, request: dict[str, Any], code: int) -> list[dict[str, Any]]:
    group = request["group_id"]
    store_group = mapping.to_store_group(group)
    if store_group is None:
        code = ErrorCode.INVALID_GROUP_ID
    topics = []
    for topic in request["topics"]:
        partitions = []
        for part in topic["partitions"]:
            error = code or _commit_one(ctx, group, store_group or "", topic["name"], part)
            partitions.append(
                {"partition_index": part["partition_index"], "error_code": int(error)}
            )
        topics.append({"name": topic["name"], "partitions": partitions})
    return topics


async def offset_commit(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Check the member and generation (section 4.6), then commit each partition."""
    r = call.request
    code = int(ctx.coordinator.check_commit(r["group_id"], r["generation_id"], r["member_id"]))
    topics = await asyncio.to_thread(_commit_all, ctx, r, code)
    return {"throttle_time_ms": 0, "topics": topics}


def _fetch_offsets(ctx: KafkaContext, request: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    group = request["group_id"]
    store_group = mapping.to_store_group(group)
    if store_group is None:
        return ErrorCode.INVALID_GROUP_ID, []
    committed = ctx.broker.get_offsets(store_group)
    wanted: list[tuple[str, list[int]]]
    if request["topics"] is None:
        wanted = []
        for store_topic, offsets in sorted(committed.items()):
            name = mapping.from_store_topic(store_topic)
            if name is not None:
                wanted.append((name, sorted(offsets)))
    else:
        wanted = [(t["name"], t["partition_indexes"]) for t in request["topics"]]
    topics = []
    for name, partitions in wanted:
        offsets = committed.get(mapping.to_store_topic(name), {})
        topics.append(
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": offsets.get(p, -1),
                        "metadata": ctx.commit_metadata.get((group, name, p), "")
                        if p in offsets
                        else "",
                        "error_code": 0,
                    }
                    for p in partitions
                ],
            }
        )
    return 0, topics


async def offset_fetch(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    code, topics = await asyncio.to_thread(_fetch_offsets, ctx, call.request)
    if code and call.request["topics"]:
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "metadata": "",
                        "error_code": code,
                    }
                    for p in t["partition_indexes"]
                ],
            }
            for t in call.request["topics"]
        ]
    return {"throttle_time_ms": 0, "topics": topics, "error_code": int(code)}


# -- admin -------------------------------------------------------------------------------


def _has_offsets(ctx: KafkaContext, group: str) -> bool:
    store_group = mapping.to_store_group(group)
    return store_group is not None and bool(ctx.broker.get_offsets(store_group))


async def describe_groups(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """The coordinator's view; a group known only by its committed offsets is Empty."""
    groups = []
    for group_id in call.request["groups"]:
        entry = ctx.coordinator.describe(group_id)
        if entry["group_state"] == "Dead" and await asyncio.to_thread(_has_offsets, ctx, group_id):
            entry["group_state"] = "Empty"
        entry["authorized_operations"] = -(2**31)
        groups.append(entry)
    return {"throttle_time_ms": 0, "groups": groups}


def _stored_groups(ctx: KafkaContext) -> list[str]:
    names = []
    for info in ctx.broker.list_groups():
        name = None if info.system else mapping.from_store_group(info.name)
        if name is not None:
            names.append(name)
    return names


async def list_groups(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Groups the coordinator knows, and the store's (non-system) consumer groups."""
    listed = {gid: ptype for gid, ptype, _ in ctx.coordinator.list_groups()}
    for name in await asyncio.to_thread(_stored_groups, ctx):
        listed.setdefault(name, "")
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "groups": [{"group_id": g, "protocol_type": t} for g, t in sorted(listed.items())],
    }
