"""Issue 21 at the handlers: the -2/-1 commit placeholders, DeleteGroups and OffsetDelete
(authorized and audited), and CreateTopics/DescribeConfigs that never pretend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_listener.coordinator import JoinRequest
from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import Call, KafkaContext, ListenerConfig, dispatch
from kafka_listener.handlers import supported_versions as versions
from kafka_listener.schemas import ApiKey
from mqcore.access.authorizer import CachedDecisions, Subject
from mqcore.access.backend import StaticAccess
from mqcore.access.model import Operation
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.clock import SystemClock

from .harness import TEST_STORE_CONFIG

OPERATOR = Subject("olga", "operator", "10.0.0.6", "kafka")
VIEWER = Subject("vera", "viewer", "10.0.0.5", "kafka")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))
    try:
        b.admin.create_topic("orders", read_queue_nums=2, write_queue_nums=2)
        b.admin.create_topic("payments", read_queue_nums=1, write_queue_nums=1)
        yield b
    finally:
        b.close()


@pytest.fixture
def access() -> StaticAccess:
    return StaticAccess()


@pytest.fixture
def ctx(broker: Broker, access: StaticAccess) -> Iterator[KafkaContext]:
    config = ListenerConfig(port=0, initial_rebalance_delay_ms=0)
    c = KafkaContext(broker, config, SystemClock(), access=access, versions=versions())
    yield c
    c.close()


def send(ctx: KafkaContext, key: int, request: dict[str, Any], who: Subject = OPERATOR) -> Any:
    async def run() -> Any:
        call = Call(key, versions()[key][1], 1, "test", request, None, CachedDecisions(who))
        return await dispatch(ctx, call)

    return asyncio.run(run())


def commit(ctx: KafkaContext, group: str, topic: str, offsets: dict[int, int]) -> list[int]:
    parts = [
        {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
        for p, o in offsets.items()
    ]
    request = {
        "group_id": group,
        "generation_id": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "topics": [{"name": topic, "partitions": parts}],
    }
    reply = send(ctx, ApiKey.OFFSET_COMMIT, request)
    return [p["error_code"] for p in reply["topics"][0]["partitions"]]


def fetch_offsets(ctx: KafkaContext, group: str, topic: str, partitions: list[int]) -> list[int]:
    request = {"group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}]}
    reply = send(ctx, ApiKey.OFFSET_FETCH, request)
    return [p["committed_offset"] for p in reply["topics"][0]["partitions"]]


def join_member(ctx: KafkaContext, group: str, topics: list[str]) -> None:
    """A live ``consumer`` member subscribed to ``topics`` (ConsumerProtocol v0 metadata)."""
    metadata = b"\x00\x00" + len(topics).to_bytes(4, "big")
    for t in topics:
        metadata += len(t).to_bytes(2, "big") + t.encode()
    metadata += b"\xff\xff\xff\xff"  # user data: null
    replies: list[dict[str, Any]] = []
    request = JoinRequest(group, "", "cid", "/127.0.0.1", 10_000, 10_000, "consumer",
                          [("range", metadata)], require_known_member_id=False)  # fmt: skip
    ctx.coordinator.join(request, replies.append)
    ctx.coordinator.tick()
    assert ctx.coordinator.has_members(group)


def test_placeholder_commits_are_stored_and_fetched_as_they_are(
    ctx: KafkaContext, broker: Broker
) -> None:
    assert commit(ctx, "billing", "orders", {0: 7, 1: 3}) == [0, 0]
    assert commit(ctx, "billing", "orders", {0: -2, 1: -1}) == [0, 0]
    assert broker.get_offsets("billing") == {"orders": {0: -2, 1: -1}}
    assert fetch_offsets(ctx, "billing", "orders", [0, 1]) == [-2, -1]
    assert commit(ctx, "billing", "orders", {0: -3}) == [ErrorCode.OFFSET_OUT_OF_RANGE]
    assert broker.get_offsets("billing") == {"orders": {0: -2, 1: -1}}


def test_delete_groups(ctx: KafkaContext, broker: Broker, access: StaticAccess) -> None:
    assert commit(ctx, "old.team", "orders", {0: 5}) == [0]
    assert broker.admin.get_group("old|team").name == "old|team"  # made by the first commit
    join_member(ctx, "live", ["orders"])
    request = {"groups_names": ["old.team", "live", "never.seen", "g" * 200]}
    reply = send(ctx, ApiKey.DELETE_GROUPS, request)
    assert [(r["group_id"][:8], r["error_code"]) for r in reply["results"]] == [
        ("old.team", 0),
        ("live", ErrorCode.NON_EMPTY_GROUP),
        ("never.se", ErrorCode.GROUP_ID_NOT_FOUND),
        ("g" * 8, ErrorCode.INVALID_GROUP_ID),
    ]
    assert broker.get_offsets("old|team") == {}
    assert "old|team" not in [g.name for g in broker.admin.list_groups()]
    described = send(
        ctx,
        ApiKey.DESCRIBE_GROUPS,
        {"groups": ["old.team"], "include_authorized_operations": False},
    )
    assert described["groups"][0]["group_state"] == "Dead"
    assert ("User:olga", "group.delete", "group", "old|team") in [a[:4] for a in access.audited]
    entry = next(a for a in access.audited if a[1] == "group.delete")
    assert entry[4] == {"offsets": [{"topic": "orders", "queue_id": 0, "offset": 5}]}
    # A viewer may not delete (DELETE on the group), whatever the group's state.
    assert commit(ctx, "kept", "orders", {0: 1}) == [0]
    refused = send(ctx, ApiKey.DELETE_GROUPS, {"groups_names": ["kept"]}, who=VIEWER)
    assert refused["results"][0]["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert broker.get_offsets("kept") == {"orders": {0: 1}}


def offset_delete(ctx: KafkaContext, group: str, topics: dict[str, list[int]],
                  who: Subject = OPERATOR) -> Any:  # fmt: skip
    request = {
        "group_id": group,
        "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in ps]}
            for t, ps in topics.items()
        ],
    }
    return send(ctx, ApiKey.OFFSET_DELETE, request, who)


def codes(reply: Any) -> dict[str, list[int]]:
    return {t["name"]: [p["error_code"] for p in t["partitions"]] for t in reply["topics"]}


def test_offset_delete_removes_one_topics_offsets(
    ctx: KafkaContext, broker: Broker, access: StaticAccess
) -> None:
    assert commit(ctx, "billing", "orders", {0: 4, 1: 9}) == [0, 0]
    assert commit(ctx, "billing", "payments", {0: 2}) == [0]
    reply = offset_delete(ctx, "billing", {"orders": [0, 1], "nope": [0]})
    assert reply["error_code"] == 0
    assert codes(reply) == {"orders": [0, 0], "nope": [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]}
    assert broker.get_offsets("billing") == {"payments": {0: 2}}
    assert fetch_offsets(ctx, "billing", "orders", [0, 1]) == [-1, -1]
    entry = next(a for a in access.audited if a[1] == "group.offsets.delete")
    assert entry[3:5] == (
        "billing",
        [{"topic": "orders", "queue_id": 0, "offset": 4}, {"topic": "orders", "queue_id": 1,
                                                         "offset": 9}],
    )  # fmt: skip
    refused = offset_delete(ctx, "billing", {"payments": [0]}, who=VIEWER)
    assert refused["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    unknown = offset_delete(ctx, "never.seen", {"orders": [0]})
    assert unknown["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


def test_offset_delete_on_a_live_group_spares_subscribed_topics(
    ctx: KafkaContext, broker: Broker
) -> None:
    assert commit(ctx, "live", "orders", {0: 4}) == [0]
    assert commit(ctx, "live", "payments", {0: 2}) == [0]
    join_member(ctx, "live", ["orders"])
    reply = offset_delete(ctx, "live", {"orders": [0], "payments": [0]})
    assert codes(reply) == {"orders": [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC], "payments": [0]}
    assert broker.get_offsets("live") == {"orders": {0: 4}}


def create(ctx: KafkaContext, name: str, configs: dict[str, str | None],
           validate_only: bool = False) -> tuple[int, str | None]:  # fmt: skip
    topic = {
        "name": name,
        "num_partitions": 1,
        "replication_factor": 1,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in configs.items()],
    }
    request = {"topics": [topic], "timeout_ms": 1000, "validate_only": validate_only}
    [result] = send(ctx, ApiKey.CREATE_TOPICS, request)["topics"]
    return result["error_code"], result["error_message"]


@pytest.mark.parametrize(
    ("configs", "says"),
    [
        ({"no.such.config": "1"}, "unknown topic config 'no.such.config'"),
        ({"cleanup.policy": "compact"}, "cleanup.policy=compact is not supported: Cairn deletes"),
        ({"retention.ms": "1000"}, "retention.ms=1000 is not supported: retention is CommitLog"),
        ({"segment.ms": "60000"}, "segment.ms=60000 is not supported: Cairn has no per-topic"),
    ],
)
def test_create_topics_refuses_configs_it_cannot_honour(
    ctx: KafkaContext, broker: Broker, configs: dict[str, str | None], says: str
) -> None:
    for validate_only in (True, False):
        code, message = create(ctx, "shop.orders", configs, validate_only)
        assert code == ErrorCode.INVALID_CONFIG
        assert message is not None and says in message
    assert "shop|orders" not in [t.name for t in broker.admin.list_topics()]


def test_create_topics_takes_what_cairn_does_and_describe_configs_says_it(
    ctx: KafkaContext, broker: Broker
) -> None:
    store = broker.store.config
    retention = str(int(store.file_reserved_time_hours * 3_600_000))
    honoured = {"cleanup.policy": "delete", "retention.ms": retention, "min.insync.replicas": "1",
                "max.message.bytes": str(store.max_message_size), "flush.ms": None}  # fmt: skip
    assert create(ctx, "fine", honoured) == (0, None)
    request = {
        "resources": [{"resource_type": 2, "resource_name": "fine", "configuration_keys": None}],
        "include_synonyms": False,
    }
    [result] = send(ctx, ApiKey.DESCRIBE_CONFIGS, request)["results"]
    described = {c["name"]: c["value"] for c in result["configs"]}
    assert described == {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "max.message.bytes": str(store.max_message_size),
        "message.timestamp.type": "CreateTime",
        "min.insync.replicas": "1",
        "retention.bytes": "-1",
        "retention.ms": retention,
        "segment.bytes": str(store.commitlog_file_size),
    }
    assert all(c["read_only"] for c in result["configs"])


def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(
    ctx: KafkaContext, broker: Broker, access: StaticAccess
) -> None:
    """A user with no role, allowed DELETE on the group and READ on one topic only: the
    other topic's partitions are TOPIC_AUTHORIZATION_FAILED, before any existence check."""
    admin = Subject("root", "admin", "10.0.0.7", "kafka")
    service = Subject("svc", None, "10.0.0.8", "kafka")

    def allow(rtype: int, name: str, operation: Operation) -> None:
        creation = {"resource_type": rtype, "resource_name": name, "resource_pattern_type": 3,
                    "principal": "User:svc", "host": "*", "operation": int(operation),
                    "permission_type": 3}  # fmt: skip
        reply = send(ctx, ApiKey.CREATE_ACLS, {"creations": [creation]}, admin)
        assert reply["results"] == [{"error_code": 0, "error_message": None}]

    assert commit(ctx, "billing", "orders", {0: 4}) == [0]
    assert commit(ctx, "billing", "payments", {0: 2}) == [0]
    assert offset_delete(ctx, "billing", {"orders": [0]}, who=service)["error_code"] == (
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    )
    allow(3, "billing", Operation.DELETE)  # 3: GROUP
    allow(2, "orders", Operation.READ)  # 2: TOPIC
    reply = offset_delete(ctx, "billing", {"orders": [0], "payments": [0], "nope": [0]}, service)
    assert reply["error_code"] == 0
    assert codes(reply) == {
        "orders": [0],
        "payments": [ErrorCode.TOPIC_AUTHORIZATION_FAILED],
        "nope": [ErrorCode.TOPIC_AUTHORIZATION_FAILED],
    }
    assert broker.get_offsets("billing") == {"payments": {0: 2}}
    assert ("User:svc", "group.offsets.delete") in [a[:2] for a in access.audited]
