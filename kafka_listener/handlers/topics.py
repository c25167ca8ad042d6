"""ApiVersions (18), Metadata (3) and the topic admin APIs: CreateTopics (19),
DeleteTopics (20), CreatePartitions (37), DescribeConfigs (32). Sections 2.3, 2.4, 2.14.

Kafka clients see the store's ``normal`` topics whose names map back to Kafka names
(``mapping.from_store_topic``); system, retry and DLQ topics stay hidden. A topic has as
many partitions as read queues. Metadata answers as a single node that leads every
partition and is the controller (clients send admin requests to the controller).

CreateTopics: ``num_partitions`` -1 → ``ListenerConfig.default_partitions``; replication
factor -1 or 1 (anything else: INVALID_REPLICATION_FACTOR, one node); explicit
assignments give the partition count. Topic configs are never accepted and then ignored
(``topic_configs.py``): an unknown name, or a value Cairn cannot honour, is INVALID_CONFIG
with a message saying what is not supported, and nothing is created; DescribeConfigs
reports what Cairn really does, every entry read-only.

Authorization (Kafka's): Metadata lists only the topics the connection may DESCRIBE, and
answers TOPIC_AUTHORIZATION_FAILED (29) for a requested one it may not; auto-creation and
CreateTopics need CREATE on the cluster or on the topic (a deny on either refuses, as on
REST and the console); DeleteTopics DELETE,
CreatePartitions ALTER, DescribeConfigs DESCRIBE_CONFIGS on the topic (29), or on the
cluster for the broker's configs (31). Creations, partition growth and deletions are
audited (``topic.create``, ``topic.update``, ``topic.delete``, store names).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mqcore.access.authorizer import allowed_on_any
from mqcore.access.model import Operation, Resource
from mqcore.broker.broker import Broker
from mqcore.broker.types import TopicInfo
from mqcore.errors import ConflictError, MQError, NotFoundError, ValidationError

from .. import mapping
from ..errors import ErrorCode, error_code_for
from ..schemas import advertised_versions
from ..topic_configs import config_problem, effective_configs
from .authz import (
    AUTHORIZATION_FAILED,
    CLUSTER,
    audit,
    store_topic_resource,
    topic_resource,
)
from .context import Call, KafkaContext


async def api_versions(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Our version table, Produce advertised from v0 (``schemas.advertised_versions``);
    versions above it are answered by the connection itself."""
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(advertised_versions(ctx.versions).items())
        ],
        "throttle_time_ms": 0,
    }


# -- Metadata ----------------------------------------------------------------------------


def visible_topics(broker: Broker) -> list[tuple[str, TopicInfo]]:
    """``(kafka name, info)`` of every topic Kafka clients may see, sorted by name."""
    out = []
    for info in broker.admin.list_topics(include_system=False):
        if info.kind != "normal":
            continue
        name = mapping.from_store_topic(info.name)
        if name is not None:
            out.append((name, info))
    return out


def kafka_topic(broker: Broker, name: str) -> TopicInfo | None:
    """The store topic behind a Kafka topic name, if Kafka clients may use it."""
    if mapping.kafka_topic_error(name) is not None:
        return None
    try:
        info = broker.admin.get_topic(mapping.to_store_topic(name))
    except NotFoundError:
        return None
    return info if info.kind == "normal" else None


def _topic_entry(
    ctx: KafkaContext, name: str, info: TopicInfo | None, error: int
) -> dict[str, Any]:
    node = ctx.config.node_id
    partitions = []
    if info is not None:
        partitions = [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": node,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for p in range(info.read_queue_nums)
        ]
    return {"error_code": int(error), "name": name, "is_internal": False, "partitions": partitions}


def _metadata_topics(ctx: KafkaContext, call: Call) -> list[dict[str, Any]]:
    requested = call.request["topics"]
    broker = ctx.broker
    if requested is None or (call.api_version == 0 and not requested):
        return [
            _topic_entry(ctx, name, info, 0)
            for name, info in visible_topics(broker)
            if call.check(ctx, Operation.DESCRIBE, store_topic_resource(info.name))
        ]
    entries = []
    auto = ctx.config.auto_create_topics and call.request["allow_auto_topic_creation"]
    for item in requested:
        name = item["name"]
        if mapping.kafka_topic_error(name) is not None:
            entries.append(_topic_entry(ctx, name, None, ErrorCode.INVALID_TOPIC_EXCEPTION))
            continue
        resource = topic_resource(name)
        if not call.check(ctx, Operation.DESCRIBE, resource):
            entries.append(_topic_entry(ctx, name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        info = kafka_topic(broker, name)
        error: int = 0
        if info is None and auto and not _may_create(ctx, call, resource):
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None and auto:
            error, info = _create(ctx, call, name, ctx.config.default_partitions)
        elif info is None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        entries.append(_topic_entry(ctx, name, info if error == 0 else None, error))
    return entries


async def metadata(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """This node, and the requested (or all visible) topics."""
    topics = await asyncio.to_thread(_metadata_topics, ctx, call)
    host, port = ctx.advertised
    node = ctx.config.node_id
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": node, "host": host, "port": port, "rack": None}],
        "cluster_id": ctx.config.cluster_id,
        "controller_id": node,
        "topics": topics,
    }


# -- CreateTopics / DeleteTopics / CreatePartitions --------------------------------------

_CREATE_ERRORS: dict[type[BaseException], ErrorCode] = {
    ConflictError: ErrorCode.TOPIC_ALREADY_EXISTS,
    ValidationError: ErrorCode.INVALID_PARTITIONS,
}


def _may_create(ctx: KafkaContext, call: Call, resource: Resource) -> bool:
    """CREATE on the cluster or on the topic itself (CreateTopics and Metadata's
    auto-creation), decided as REST and the console decide it: a deny entry on either
    refuses (Kafka would let the cluster's allow win over a deny on the topic name; Cairn's
    operator role allows CREATE on the cluster, so a deny on ``private.``* must win)."""
    return bool(
        allowed_on_any(
            (
                call.check(ctx, Operation.CREATE, CLUSTER),
                call.check(ctx, Operation.CREATE, resource),
            )
        )
    )


def _create(
    ctx: KafkaContext, call: Call, name: str, partitions: int
) -> tuple[int, TopicInfo | None]:
    """Create the topic and audit it (``topic.create``). Runs in a worker thread."""
    try:
        info = ctx.broker.admin.create_topic(
            mapping.to_store_topic(name), read_queue_nums=partitions, write_queue_nums=partitions
        )
    except ValidationError as exc:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION if "name" in exc.field else None
        return int(code or ErrorCode.INVALID_PARTITIONS), None
    except MQError as exc:
        code = error_code_for(exc, _CREATE_ERRORS)
        if code == ErrorCode.TOPIC_ALREADY_EXISTS:  # raced with another creator
            found = kafka_topic(ctx.broker, name)
            return (0, found) if found is not None else (int(code), None)
        return int(code), None
    audit(ctx, call, "topic.create", "topic", info.name, new=info.settings())
    return 0, info


def _create_one(
    ctx: KafkaContext, call: Call, topic: dict[str, Any], validate_only: bool
) -> tuple[int, str]:
    name = topic["name"]
    problem = mapping.kafka_topic_error(name)
    if problem is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, problem
    if not _may_create(ctx, call, topic_resource(name)):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED
    partitions = topic["num_partitions"]
    replication = topic["replication_factor"]
    if topic["assignments"]:
        if partitions != -1 or replication != -1:
            return ErrorCode.INVALID_REQUEST, "give either assignments or partition counts"
        partitions = len(topic["assignments"])
        replication = len(topic["assignments"][0]["broker_ids"])
    if partitions == -1:
        partitions = ctx.config.default_partitions
    if not 1 <= partitions <= 1024:
        return ErrorCode.INVALID_PARTITIONS, "partitions must be 1..1024 (RocketMQ queues)"
    if replication not in (-1, 1):
        return ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be 1 (one node)"
    for config in topic["configs"]:
        problem = config_problem(ctx.broker.store.config, config["name"], config["value"])
        if problem is not None:
            return ErrorCode.INVALID_CONFIG, problem
    try:
        ctx.broker.admin.get_topic(mapping.to_store_topic(name))
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
    except NotFoundError:
        pass
    if validate_only:
        return 0, ""
    code, _ = _create(ctx, call, name, partitions)
    return code, "" if code == 0 else f"cannot create topic {name!r}"


def _create_all(ctx: KafkaContext, call: Call) -> list[dict[str, Any]]:
    out = []
    for topic in call.request["topics"]:
        code, message = _create_one(ctx, call, topic, call.request["validate_only"])
        out.append(
            {"name": topic["name"], "error_code": int(code), "error_message": message or None}
        )
    return out


async def create_topics(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "topics": await asyncio.to_thread(_create_all, ctx, call)}


def _delete_one(ctx: KafkaContext, call: Call, name: str) -> int:
    broker = ctx.broker
    if mapping.kafka_topic_error(name) is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if not call.check(ctx, Operation.DELETE, topic_resource(name)):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    info = kafka_topic(broker, name)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    store_topic = mapping.to_store_topic(name)
    try:
        broker.admin.delete_topic(store_topic)
    except MQError as exc:
        return error_code_for(exc, {ValidationError: ErrorCode.TOPIC_AUTHORIZATION_FAILED})
    ctx.batch_cache.drop_topic(store_topic)  # (fetches check entries anyway; this frees them)
    audit(ctx, call, "topic.delete", "topic", store_topic, old=info.settings())
    return 0


async def delete_topics(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    def run() -> list[dict[str, Any]]:
        names = call.request["topic_names"]
        return [{"name": n, "error_code": int(_delete_one(ctx, call, n))} for n in names]

    return {"throttle_time_ms": 0, "responses": await asyncio.to_thread(run)}


def _grow(
    ctx: KafkaContext, call: Call, topic: dict[str, Any], validate_only: bool
) -> tuple[int, str]:
    name = topic["name"]
    if mapping.kafka_topic_error(name) is None:
        decision = call.check(ctx, Operation.ALTER, topic_resource(name))
        if not decision:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, decision.reason
    info = kafka_topic(ctx.broker, name)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic"
    count = topic["count"]
    if count <= info.read_queue_nums or count > 1024:
        return ErrorCode.INVALID_PARTITIONS, (
            f"the topic has {info.read_queue_nums} partitions; the new count must be more, "
            "and at most 1024"
        )
    if not validate_only:
        new = ctx.broker.admin.update_topic(
            info.name, read_queue_nums=count, write_queue_nums=count
        )
        old_settings, new_settings = info.settings(), new.settings()
        audit(ctx, call, "topic.update", "topic", info.name, old=old_settings, new=new_settings)
    return 0, ""


async def create_partitions(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    def run() -> list[dict[str, Any]]:
        out = []
        for topic in call.request["topics"]:
            try:
                code, message = _grow(ctx, call, topic, call.request["validate_only"])
            except MQError as exc:
                code, message = error_code_for(exc), str(exc)
            out.append(
                {"name": topic["name"], "error_code": int(code), "error_message": message or None}
            )
        return out

    return {"throttle_time_ms": 0, "results": await asyncio.to_thread(run)}


# -- DescribeConfigs ---------------------------------------------------------------------

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


def _describe_refusal(ctx: KafkaContext, call: Call, kind: int, name: str) -> ErrorCode | None:
    """DESCRIBE_CONFIGS on the topic (29) or, for the broker, on the cluster (31)."""
    if kind == RESOURCE_TOPIC and mapping.kafka_topic_error(name) is None:
        if not call.check(ctx, Operation.DESCRIBE_CONFIGS, topic_resource(name)):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    elif kind == RESOURCE_BROKER and not call.check(ctx, Operation.DESCRIBE_CONFIGS, CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


def _describe_one(ctx: KafkaContext, call: Call, resource: dict[str, Any]) -> dict[str, Any]:
    kind, name = resource["resource_type"], resource["resource_name"]
    result: dict[str, Any] = {
        "error_code": 0,
        "error_message": None,
        "resource_type": kind,
        "resource_name": name,
        "configs": [],
    }
    refused = _describe_refusal(ctx, call, kind, name)
    if refused is not None:
        result.update(error_code=int(refused), error_message=AUTHORIZATION_FAILED)
        return result
    if kind == RESOURCE_TOPIC:
        if kafka_topic(ctx.broker, name) is None:
            result.update(
                error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                error_message=f"unknown topic {name!r}",
            )
            return result
        values, source = effective_configs(ctx.broker.store.config), SOURCE_DEFAULT
    elif kind == RESOURCE_BROKER:
        values = {
            "broker.id": str(ctx.config.node_id),
            "num.partitions": str(ctx.config.default_partitions),
            "auto.create.topics.enable": str(ctx.config.auto_create_topics).lower(),
            "group.initial.rebalance.delay.ms": str(ctx.config.initial_rebalance_delay_ms),
            "socket.request.max.bytes": str(ctx.config.max_frame_bytes),
        }
        source = SOURCE_STATIC_BROKER
    else:
        result.update(
            error_code=int(ErrorCode.INVALID_REQUEST),
            error_message=f"resource type {kind} is not supported",
        )
        return result
    keys = resource["configuration_keys"]
    result["configs"] = [
        {
            "name": key,
            "value": value,
            "read_only": True,
            "is_default": source == SOURCE_DEFAULT,
            "config_source": source,
            "is_sensitive": False,
            "synonyms": [],
        }
        for key, value in sorted(values.items())
        if keys is None or key in keys
    ]
    return result


async def describe_configs(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    def run() -> list[dict[str, Any]]:
        return [_describe_one(ctx, call, r) for r in call.request["resources"]]

    return {"throttle_time_ms": 0, "results": await asyncio.to_thread(run)}
