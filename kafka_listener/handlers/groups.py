"""Group APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9).
Sections 2.8-2.12 and 4.

Membership is the :class:`~kafka_listener.coordinator.GroupCoordinator`'s (in memory);
JoinGroup and SyncGroup await its ``respond`` callback through a future. Committed offsets
are the broker's (``consumerOffset.json``, group names escaped by
``mapping.to_store_group``); commit metadata has no slot there and is kept in memory.
OffsetFetch for an unknown group or partition answers offset -1 without error (clients
then apply ``auto.offset.reset``). Commits of Kafka's placeholders -2 (earliest) and -1
(latest), which reset tools send (kafkajs ``admin.resetOffsets``), are stored as they are
and OffsetFetch returns them unchanged, as Kafka does: each consumer then resolves them
with its own reset policy (the Java client and kafkajs treat any negative offset as "no
committed offset"). Offsets below -2 get OFFSET_OUT_OF_RANGE.

Authorization (Kafka's table): FindCoordinator and DescribeGroups need DESCRIBE on the
group; JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit READ on it
(GROUP_AUTHORIZATION_FAILED, 30), commits also READ on each topic (29); OffsetFetch
DESCRIBE on the group and on each topic (an all-topics fetch leaves out the others);
ListGroups lists every group for DESCRIBE on the cluster, else the groups the connection
may DESCRIBE. Audited as ``group.offsets.commit`` (store names, offsets before and after):
commits that move a group backwards on some partition, and commits made from outside the
membership of a group consumers have joined (generation -1 while the group is empty: a
tool resetting its offsets; the coordinator forgets groups at a restart). The routine
commits, members' and standalone (``assign()``) consumers' moving forward, are counted
(``offset.commit``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mqcore.access.model import Operation, Resource
from mqcore.errors import MQError, NotFoundError, ValidationError
from mqcore.metadata.offsets import EARLIEST_PLACEHOLDER

from .. import mapping
from ..coordinator import JoinRequest
from ..errors import ErrorCode, error_code_for
from .authz import AUTHORIZATION_FAILED, CLUSTER, audit, group_resource, topic_resource
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
    elif not call.check(ctx, Operation.DESCRIBE, group_resource(call.request["key"])):
        reply.update(
            error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
            error_message=AUTHORIZATION_FAILED,
            node_id=-1,
            host="",
            port=-1,
        )
    return reply


def _may_read_group(ctx: KafkaContext, call: Call) -> bool:
    """READ on the request's group: what membership and commits need."""
    return bool(call.check(ctx, Operation.READ, group_resource(call.request["group_id"])))


async def join_group(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    r = call.request
    loop = asyncio.get_running_loop()
    future: asyncio.Future[dict[str, Any]] = loop.create_future()
    invalid = mapping.to_store_group(r["group_id"]) is None
    if invalid or not _may_read_group(ctx, call):
        code = ErrorCode.INVALID_GROUP_ID if invalid else ErrorCode.GROUP_AUTHORIZATION_FAILED
        future.set_result(
            {
                "error_code": int(code),
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
    if not _may_read_group(ctx, call):
        code = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return {"throttle_time_ms": 0, "error_code": code, "assignment": b""}
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
    if not _may_read_group(ctx, call):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    code = ctx.coordinator.heartbeat(
        r["group_id"], r["generation_id"], r["member_id"], r["group_instance_id"]
    )
    return {"throttle_time_ms": 0, "error_code": int(code)}


async def leave_group(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    if not _may_read_group(ctx, call):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)}
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
    if offset < EARLIEST_PLACEHOLDER:  # -2 and -1 are stored as they are (module docstring)
        return ErrorCode.OFFSET_OUT_OF_RANGE
    try:
        try:
            ctx.broker.commit_offset(store_group, info.name, partition, offset)
        except NotFoundError as exc:
            if exc.field != "group":
                raise
            ctx.broker.admin.create_group(store_group)  # groups are not auto-created here
            ctx.broker.commit_offset(store_group, info.name, partition, offset)
    except MQError as exc:
        return error_code_for(exc, _COMMIT_ERRORS)
    ctx.commit_metadata[(group, topic, partition)] = metadata
    return 0


def _commit_all(ctx: KafkaContext, call: Call, code: int, outsider: bool) -> list[dict[str, Any]]:
    request = call.request
    group = request["group_id"]
    store_group = mapping.to_store_group(group)
    if store_group is None:
        code = ErrorCode.INVALID_GROUP_ID
    before = ctx.broker.get_offsets(store_group) if store_group and not code else {}
    done: list[tuple[str, int, int]] = []  # (store topic, queue id, offset) committed
    topics = []
    for topic in request["topics"]:
        name = topic["name"]
        refused = code or _topic_refusal(ctx, call, name, Operation.READ)
        partitions = []
        for part in topic["partitions"]:
            error = refused or _commit_one(ctx, group, store_group or "", name, part)
            if not error:
                done.append((mapping.to_store_topic(name), part["partition_index"],
                             part["committed_offset"]))  # fmt: skip
            partitions.append(
                {"partition_index": part["partition_index"], "error_code": int(error)}
            )
        topics.append({"name": name, "partitions": partitions})
    if done and store_group is not None:
        _audit_commit(ctx, call, store_group, before, done, outsider)
    return topics


def _audit_commit(
    ctx: KafkaContext,
    call: Call,
    store_group: str,
    before: dict[str, dict[int, int]],
    done: list[tuple[str, int, int]],
    outsider: bool,
) -> None:
    """Audit a commit that moves the group backwards on some queue, or an ``outsider``'s
    (module docstring); count the routine ones (a consumer's commits, every few seconds,
    would bury the log)."""
    old = [before.get(topic, {}).get(queue) for topic, queue, _ in done]
    backwards = any(o is not None and new < o for o, (_, _, new) in zip(old, done, strict=True))
    if not outsider and not backwards:
        ctx.access.count(call.subject, "offset.commit")
        return
    audit(
        ctx,
        call,
        "group.offsets.commit",
        "group",
        store_group,
        old=[
            {"topic": t, "queue_id": q, "offset": o} for (t, q, _), o in zip(done, old, strict=True)
        ],
        new=[{"topic": t, "queue_id": q, "offset": n} for t, q, n in done],
    )


def _topic_refusal(ctx: KafkaContext, call: Call, name: str, operation: Operation) -> int:
    """TOPIC_AUTHORIZATION_FAILED when the connection may not do ``operation`` on the
    topic ``name`` (a valid name), else 0."""
    if mapping.kafka_topic_error(name) is not None:
        return 0  # answered UNKNOWN_TOPIC_OR_PARTITION
    if call.check(ctx, operation, topic_resource(name)):
        return 0
    return int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


async def offset_commit(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Check READ on the group, the member and generation (section 4.6), then READ on
    each topic and commit each partition."""
    r = call.request
    if not _may_read_group(ctx, call):
        code = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    else:
        code = int(ctx.coordinator.check_commit(r["group_id"], r["generation_id"], r["member_id"]))
    # Not a member's commit, to a group consumers have joined since the broker started.
    known = r["group_id"] in ctx.coordinator.groups
    outsider = r["generation_id"] < 0 and not r["member_id"] and known
    topics = await asyncio.to_thread(_commit_all, ctx, call, code, outsider)
    return {"throttle_time_ms": 0, "topics": topics}


def _fetch_offsets(ctx: KafkaContext, call: Call) -> tuple[int, list[dict[str, Any]]]:
    request = call.request
    group = request["group_id"]
    store_group = mapping.to_store_group(group)
    if store_group is None:
        return ErrorCode.INVALID_GROUP_ID, []
    if not call.check(ctx, Operation.DESCRIBE, group_resource(group)):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    committed = ctx.broker.get_offsets(store_group)
    wanted: list[tuple[str, list[int]]]
    if request["topics"] is None:  # all: only the topics the connection may describe
        wanted = []
        for store_topic, offsets in sorted(committed.items()):
            name = mapping.from_store_topic(store_topic)
            if name is not None and not _topic_refusal(ctx, call, name, Operation.DESCRIBE):
                wanted.append((name, sorted(offsets)))
    else:
        wanted = [(t["name"], t["partition_indexes"]) for t in request["topics"]]
    topics = []
    for name, partitions in wanted:
        refused = _topic_refusal(ctx, call, name, Operation.DESCRIBE)
        offsets = {} if refused else committed.get(mapping.to_store_topic(name), {})
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
                        "error_code": refused,
                    }
                    for p in partitions
                ],
            }
        )
    return 0, topics


async def offset_fetch(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    code, topics = await asyncio.to_thread(_fetch_offsets, ctx, call)
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
    include_operations = call.request["include_authorized_operations"]
    for group_id in call.request["groups"]:
        resource = group_resource(group_id)
        if not call.check(ctx, Operation.DESCRIBE, resource):
            groups.append(_refused_group(group_id))
            continue
        entry = ctx.coordinator.describe(group_id)
        if entry["group_state"] == "Dead" and await asyncio.to_thread(_has_offsets, ctx, group_id):
            entry["group_state"] = "Empty"
        entry["authorized_operations"] = (
            _operations_bits(ctx, call, resource) if include_operations else -(2**31)
        )
        groups.append(entry)
    return {"throttle_time_ms": 0, "groups": groups}


_GROUP_OPERATIONS = (Operation.READ, Operation.DESCRIBE, Operation.DELETE)  # Kafka's


def _operations_bits(ctx: KafkaContext, call: Call, resource: Resource) -> int:
    """KIP-430's ``authorized_operations``: bit ``1 << code`` per operation allowed."""
    bits = 0
    for operation in _GROUP_OPERATIONS:
        if call.check(ctx, operation, resource):
            bits |= 1 << int(operation)
    return bits


def _refused_group(group_id: str) -> dict[str, Any]:
    return {
        "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": -(2**31),
    }


def _stored_groups(ctx: KafkaContext) -> list[str]:
    names = []
    for info in ctx.broker.admin.list_groups():
        name = None if info.system else mapping.from_store_group(info.name)
        if name is not None:
            names.append(name)
    return names


async def list_groups(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Groups the coordinator knows, and the store's (non-system) consumer groups."""
    listed = {gid: ptype for gid, ptype, _ in ctx.coordinator.list_groups()}
    for name in await asyncio.to_thread(_stored_groups, ctx):
        listed.setdefault(name, "")
    if not call.check(ctx, Operation.DESCRIBE, CLUSTER):  # else only those it may describe
        listed = {
            g: t
            for g, t in listed.items()
            if call.check(ctx, Operation.DESCRIBE, group_resource(g))
        }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "groups": [{"group_id": g, "protocol_type": t} for g, t in sorted(listed.items())],
    }
