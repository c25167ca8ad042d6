"""Authorization and audit of every Kafka API, handler by handler, with StaticAccess.

Each call carries the subject a connection would have (``as_user``); the entries are
made through the listener's own CreateAcls, so their names go through the Kafka ↔ store
translation as a real client's would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import Call, KafkaContext, Later, ListenerConfig, dispatch
from kafka_listener.handlers import supported_versions as versions
from kafka_listener.records import encode_batch
from kafka_listener.schemas import ApiKey
from mqcore.access.authorizer import CachedDecisions, Subject
from mqcore.access.backend import StaticAccess
from mqcore.access.model import Operation, PatternType, Permission
from mqcore.access.model import ResourceType as RT
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.clock import SystemClock

from .harness import TEST_STORE_CONFIG

TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH = 29, 30, 31
VIEWER = Subject(None, "viewer", "10.0.0.5", "kafka")
OPERATOR = Subject("olga", "operator", "10.0.0.6", "kafka")
ADMIN = Subject("root", "admin", "10.0.0.7", "kafka")
SVC = Subject("svc", None, "10.0.0.8", "kafka")  # no role: ACL entries only


class RecordingAccess(StaticAccess):
    """StaticAccess that keeps the whole subject of each audit entry."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.subjects: list[Subject] = []

    def audit(self, subject: Subject, action: str, *args: Any, **kwargs: Any) -> None:
        self.subjects.append(subject)
        super().audit(subject, action, *args, **kwargs)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))
    try:
        for name in ("orders|eu", "orders|us", "payments"):
            b.admin.create_topic(name, read_queue_nums=2, write_queue_nums=2)
        yield b
    finally:
        b.close()


@pytest.fixture
def access() -> RecordingAccess:
    return RecordingAccess()


@pytest.fixture
def ctx(broker: Broker, access: RecordingAccess) -> Iterator[KafkaContext]:
    c = KafkaContext(
        broker,
        ListenerConfig(port=0, auto_create_topics=True, initial_rebalance_delay_ms=0),
        SystemClock(),
        access=access,
        versions=versions(),
    )
    yield c
    c.close()


def send(ctx: KafkaContext, who: Subject | CachedDecisions, key: int, request: dict) -> Any:
    decisions = who if isinstance(who, CachedDecisions) else CachedDecisions(who)

    async def run() -> Any:
        call = Call(key, versions()[key][1], 1, "test", request, None, decisions)
        response = await dispatch(ctx, call)
        return await response.response if isinstance(response, Later) else response

    return asyncio.run(run())


def allow(ctx: KafkaContext, principal: str, rtype: int, name: str, op: Operation,
          pattern: int = 3, permission: int = 3) -> None:  # fmt: skip
    creation = {
        "resource_type": int(rtype),
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": int(op),
        "permission_type": permission,
    }
    reply = send(ctx, ADMIN, ApiKey.CREATE_ACLS, {"creations": [creation]})
    assert reply["results"] == [{"error_code": 0, "error_message": None}]


def produce(ctx: KafkaContext, who: Subject, topic: str, value: bytes = b"v") -> int:
    records = encode_batch([(0, 1_700_000_000_000, None, value, ())])
    request = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    reply = send(ctx, who, ApiKey.PRODUCE, request)
    code: int = reply["responses"][0]["partition_responses"][0]["error_code"]
    return code


def metadata(ctx: KafkaContext, who: Subject, topics: list[str] | None) -> dict[str, int]:
    request = {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": True,
    }
    reply = send(ctx, who, ApiKey.METADATA, request)
    return {t["name"]: t["error_code"] for t in reply["topics"]}


# -- produce, fetch, offsets ---------------------------------------------------------------


def test_a_viewer_cannot_produce_and_nothing_is_stored(ctx: KafkaContext, broker: Broker) -> None:
    assert produce(ctx, VIEWER, "payments") == TOPIC_AUTH
    assert broker.reader.max_offset("payments", 0) == 0
    assert produce(ctx, VIEWER, "no.such.topic") == TOPIC_AUTH  # existence not told
    assert produce(ctx, OPERATOR, "payments") == 0
    assert produce(ctx, OPERATOR, "no.such.topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_prefixed_allow_writes_orders_and_nothing_else(ctx: KafkaContext) -> None:
    allow(ctx, "User:svc", RT.TOPIC, "orders.", Operation.WRITE, pattern=PatternType.PREFIXED)
    assert produce(ctx, SVC, "orders.eu") == 0
    assert produce(ctx, SVC, "orders.us") == 0
    assert produce(ctx, SVC, "payments") == TOPIC_AUTH
    # Stored under the store's name, so REST and the console read the same entry.
    (entry,) = ctx.access.authorizer().entries
    assert entry.resource_name == "orders|" and entry.pattern_type is PatternType.PREFIXED


def test_a_deny_entry_wins_over_the_operator_role(ctx: KafkaContext) -> None:
    decisions = CachedDecisions(OPERATOR)  # one connection: the cache must see the change
    assert produce(ctx, decisions.subject, "orders.eu") == 0
    send(ctx, ADMIN, ApiKey.CREATE_ACLS, {"creations": [{
        "resource_type": 2, "resource_name": "orders.eu", "resource_pattern_type": 3,
        "principal": "Role:operator", "host": "*", "operation": int(Operation.WRITE),
        "permission_type": int(Permission.DENY),
    }]})  # fmt: skip
    request_topic = "orders.eu"
    records = encode_batch([(0, 1, None, b"x", ())])
    request = {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": request_topic, "partition_data": [{"index": 0, "records": records}]}]}  # fmt: skip
    reply = send(ctx, decisions, ApiKey.PRODUCE, request)
    assert reply["responses"][0]["partition_responses"][0]["error_code"] == TOPIC_AUTH
    assert produce(ctx, OPERATOR, "orders.us") == 0


def test_idempotent_producers_need_idempotent_write_or_write_on_some_topic(
    ctx: KafkaContext,
) -> None:
    request = {"transactional_id": None, "transaction_timeout_ms": 1000}
    assert send(ctx, VIEWER, ApiKey.INIT_PRODUCER_ID, request)["error_code"] == CLUSTER_AUTH
    assert send(ctx, SVC, ApiKey.INIT_PRODUCER_ID, request)["error_code"] == CLUSTER_AUTH
    allow(ctx, "User:svc", RT.TOPIC, "orders.", Operation.WRITE, pattern=PatternType.PREFIXED)
    assert send(ctx, SVC, ApiKey.INIT_PRODUCER_ID, request)["producer_id"] >= 0
    assert send(ctx, OPERATOR, ApiKey.INIT_PRODUCER_ID, request)["error_code"] == 0
    # A deny of everything its allow covers takes it away again.
    allow(ctx, "User:svc", RT.TOPIC, "orders", Operation.WRITE, PatternType.PREFIXED, 2)
    assert send(ctx, SVC, ApiKey.INIT_PRODUCER_ID, request)["error_code"] == CLUSTER_AUTH


def test_fetch_and_list_offsets_need_read_and_describe(ctx: KafkaContext) -> None:
    fetch = {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "payments", "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }  # fmt: skip
    part = send(ctx, SVC, ApiKey.FETCH, fetch)["responses"][0]["partitions"][0]
    assert part["error_code"] == TOPIC_AUTH and part["records"] is None
    assert (
        send(ctx, VIEWER, ApiKey.FETCH, fetch)["responses"][0]["partitions"][0]["error_code"] == 0
    )
    offsets = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "payments",
               "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                               "timestamp": -1, "max_num_offsets": 1}]}]}  # fmt: skip
    listed = send(ctx, SVC, ApiKey.LIST_OFFSETS, offsets)["topics"][0]["partitions"][0]
    assert listed["error_code"] == TOPIC_AUTH and listed["offset"] == -1
    allow(ctx, "User:svc", RT.TOPIC, "payments", Operation.DESCRIBE)
    assert (
        send(ctx, SVC, ApiKey.LIST_OFFSETS, offsets)["topics"][0]["partitions"][0]["error_code"]
        == 0
    )


# -- metadata and topic admin --------------------------------------------------------------


def test_metadata_lists_only_describable_topics(ctx: KafkaContext, broker: Broker) -> None:
    assert set(metadata(ctx, VIEWER, None)) == {"orders.eu", "orders.us", "payments"}
    assert metadata(ctx, SVC, None) == {}
    allow(ctx, "User:svc", RT.TOPIC, "orders.", Operation.READ, pattern=PatternType.PREFIXED)
    assert metadata(ctx, SVC, None) == {"orders.eu": 0, "orders.us": 0}
    assert metadata(ctx, SVC, ["payments", "orders.eu"]) == {"payments": TOPIC_AUTH,
                                                              "orders.eu": 0}  # fmt: skip
    # Auto-creation (on in this listener) needs CREATE: a viewer's request creates nothing.
    assert metadata(ctx, VIEWER, ["auto.made"]) == {"auto.made": TOPIC_AUTH}
    assert "auto|made" not in {t.name for t in broker.admin.list_topics()}
    assert metadata(ctx, OPERATOR, ["auto.made"]) == {"auto.made": 0}
    assert ctx.access.audited[-1][:4] == ("User:olga", "topic.create", "topic", "auto|made")


def test_topic_admin_needs_create_delete_alter_and_is_audited(
    ctx: KafkaContext, broker: Broker, access: RecordingAccess
) -> None:
    create = {"topics": [{"name": "new.one", "num_partitions": 2, "replication_factor": 1,
                          "assignments": [], "configs": []}],
              "timeout_ms": 1000, "validate_only": False}  # fmt: skip
    refused = send(ctx, VIEWER, ApiKey.CREATE_TOPICS, create)["topics"][0]
    assert refused["error_code"] == TOPIC_AUTH and refused["error_message"]
    assert send(ctx, OPERATOR, ApiKey.CREATE_TOPICS, create)["topics"][0]["error_code"] == 0
    grow = {"topics": [{"name": "new.one", "count": 4, "assignments": None}],
            "timeout_ms": 1000, "validate_only": False}  # fmt: skip
    result = send(ctx, VIEWER, ApiKey.CREATE_PARTITIONS, grow)["results"][0]
    assert result["error_code"] == TOPIC_AUTH and "alter" in result["error_message"]
    assert send(ctx, OPERATOR, ApiKey.CREATE_PARTITIONS, grow)["results"][0]["error_code"] == 0
    delete = {"topic_names": ["new.one"], "timeout_ms": 1000}
    assert send(ctx, VIEWER, ApiKey.DELETE_TOPICS, delete)["responses"][0]["error_code"] == 29
    assert broker.admin.get_topic("new|one").read_queue_nums == 4
    assert send(ctx, OPERATOR, ApiKey.DELETE_TOPICS, delete)["responses"][0]["error_code"] == 0
    actions = [(a[1], a[3]) for a in access.audited]
    assert actions == [("topic.create", "new|one"), ("topic.update", "new|one"),
                       ("topic.delete", "new|one")]  # fmt: skip
    grown = access.audited[1]
    assert grown[4]["read_queue_nums"] == 2 and grown[5]["read_queue_nums"] == 4
    assert all(s.user == "olga" and s.front_end == "kafka" and s.host == "10.0.0.6"
               for s in access.subjects)  # fmt: skip


def test_a_deny_on_the_topic_name_refuses_creation_despite_the_role(
    ctx: KafkaContext, broker: Broker
) -> None:
    """The operator role allows CREATE on the cluster; a deny on the name still wins (as on
    REST and the console), for CreateTopics and Metadata's auto-creation alike."""
    send(ctx, ADMIN, ApiKey.CREATE_ACLS, {"creations": [{
        "resource_type": 2, "resource_name": "private.", "resource_pattern_type": 4,
        "principal": "Role:operator", "host": "*", "operation": int(Operation.CREATE),
        "permission_type": int(Permission.DENY),
    }]})  # fmt: skip
    create = {"topics": [{"name": "private.x", "num_partitions": 1, "replication_factor": 1,
                          "assignments": [], "configs": []}],
              "timeout_ms": 1000, "validate_only": False}  # fmt: skip
    assert send(ctx, OPERATOR, ApiKey.CREATE_TOPICS, create)["topics"][0]["error_code"] == 29
    assert metadata(ctx, OPERATOR, ["private.y"]) == {"private.y": TOPIC_AUTH}
    assert not {"private|x", "private|y"} & {t.name for t in broker.admin.list_topics()}
    create["topics"][0]["name"] = "public.x"
    assert send(ctx, OPERATOR, ApiKey.CREATE_TOPICS, create)["topics"][0]["error_code"] == 0


def test_describe_configs_needs_describe_configs(ctx: KafkaContext) -> None:
    request = {"resources": [
        {"resource_type": 2, "resource_name": "payments", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "0", "configuration_keys": None}],
        "include_synonyms": False}  # fmt: skip
    codes = [r["error_code"] for r in send(ctx, SVC, ApiKey.DESCRIBE_CONFIGS, request)["results"]]
    assert codes == [TOPIC_AUTH, CLUSTER_AUTH]
    codes = [
        r["error_code"] for r in send(ctx, VIEWER, ApiKey.DESCRIBE_CONFIGS, request)["results"]
    ]
    assert codes == [0, 0]


# -- groups ------------------------------------------------------------------------------


def commit(ctx: KafkaContext, who: Subject, group: str, offset: int, generation: int = -1,
           member: str = "") -> int:  # fmt: skip
    request = {"group_id": group, "generation_id": generation, "member_id": member,
               "retention_time_ms": -1, "topics": [{"name": "payments", "partitions": [
                   {"partition_index": 0, "committed_offset": offset, "commit_timestamp": -1,
                    "committed_metadata": None}]}]}  # fmt: skip
    code: int = send(ctx, who, ApiKey.OFFSET_COMMIT, request)["topics"][0]["partitions"][0][
        "error_code"
    ]
    return code


def test_group_apis_need_read_on_the_group(ctx: KafkaContext) -> None:
    join = {"group_id": "app", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}  # fmt: skip
    assert send(ctx, VIEWER, ApiKey.JOIN_GROUP, join)["error_code"] == GROUP_AUTH
    beat = {"group_id": "app", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    assert send(ctx, VIEWER, ApiKey.HEARTBEAT, beat)["error_code"] == GROUP_AUTH
    sync = {**beat, "assignments": []}
    assert send(ctx, VIEWER, ApiKey.SYNC_GROUP, sync)["error_code"] == GROUP_AUTH
    leave = {"group_id": "app", "member_id": "m"}
    assert send(ctx, VIEWER, ApiKey.LEAVE_GROUP, leave)["error_code"] == GROUP_AUTH
    assert commit(ctx, VIEWER, "app", 1) == GROUP_AUTH
    find = {"key": "app", "key_type": 0}
    assert send(ctx, VIEWER, ApiKey.FIND_COORDINATOR, find)["error_code"] == 0
    assert send(ctx, SVC, ApiKey.FIND_COORDINATOR, find)["error_code"] == GROUP_AUTH
    # A group READ without the topic: TOPIC_AUTHORIZATION_FAILED for its partitions.
    allow(ctx, "User:svc", RT.GROUP, "app", Operation.READ)
    assert commit(ctx, SVC, "app", 1) == TOPIC_AUTH
    allow(ctx, "User:svc", RT.TOPIC, "payments", Operation.READ)
    assert commit(ctx, SVC, "app", 1) == 0


def test_offset_fetch_needs_describe(ctx: KafkaContext) -> None:
    assert commit(ctx, OPERATOR, "app.x", 1) == 0
    fetch_all = {"group_id": "app.x", "topics": None}
    assert send(ctx, SVC, ApiKey.OFFSET_FETCH, fetch_all)["error_code"] == GROUP_AUTH
    reply = send(ctx, VIEWER, ApiKey.OFFSET_FETCH, fetch_all)
    assert reply["error_code"] == 0 and reply["topics"][0]["partitions"][0]["committed_offset"] == 1
    allow(ctx, "User:svc", RT.GROUP, "app.", Operation.DESCRIBE, pattern=PatternType.PREFIXED)
    reply = send(ctx, SVC, ApiKey.OFFSET_FETCH, fetch_all)
    assert reply["error_code"] == 0 and reply["topics"] == []  # payments is not describable
    one = {"group_id": "app.x", "topics": [{"name": "payments", "partition_indexes": [0]}]}
    part = send(ctx, SVC, ApiKey.OFFSET_FETCH, one)["topics"][0]["partitions"][0]
    assert part["error_code"] == TOPIC_AUTH and part["committed_offset"] == -1


def test_list_and_describe_groups_show_only_describable_groups(ctx: KafkaContext) -> None:
    for group in ("team.a", "team.b", "other"):
        assert commit(ctx, OPERATOR, group, 1) == 0
    listed = send(ctx, SVC, ApiKey.LIST_GROUPS, {})
    assert listed["groups"] == []
    allow(ctx, "User:svc", RT.GROUP, "team.", Operation.DESCRIBE, pattern=PatternType.PREFIXED)
    listed = send(ctx, SVC, ApiKey.LIST_GROUPS, {})
    assert sorted(g["group_id"] for g in listed["groups"]) == ["team.a", "team.b"]
    assert len(send(ctx, VIEWER, ApiKey.LIST_GROUPS, {})["groups"]) == 3  # cluster DESCRIBE
    described = send(
        ctx,
        SVC,
        ApiKey.DESCRIBE_GROUPS,
        {"groups": ["team.a", "other"], "include_authorized_operations": True},
    )
    first, second = described["groups"]
    assert first["error_code"] == 0 and first["authorized_operations"] == 1 << 8  # DESCRIBE
    assert second["error_code"] == GROUP_AUTH


def test_commits_backwards_or_from_outside_the_group_are_audited(
    ctx: KafkaContext, access: RecordingAccess
) -> None:
    # Standalone (assign()) commits: forward counted, backwards audited with before/after.
    assert commit(ctx, OPERATOR, "solo", 10) == 0
    assert access.audited == [] and access.counted == {"offset.commit": 1}
    assert commit(ctx, OPERATOR, "solo", 3) == 0
    (entry,) = access.audited
    assert entry[:4] == ("User:olga", "group.offsets.commit", "group", "solo")
    assert entry[4] == [{"topic": "payments", "queue_id": 0, "offset": 10}]
    assert entry[5] == [{"topic": "payments", "queue_id": 0, "offset": 3}]
    # A member's commit forward is counted, backwards audited.
    join = {"group_id": "app", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}  # fmt: skip
    decisions = CachedDecisions(OPERATOR)

    async def call(key: int, request: dict[str, Any]) -> Any:
        return await dispatch(ctx, Call(key, versions()[key][1], 1, "c", request, None,
                                        decisions))  # fmt: skip

    async def member_commits() -> list[int]:
        first = await call(ApiKey.JOIN_GROUP, join)
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        parked = asyncio.ensure_future(
            call(ApiKey.JOIN_GROUP, {**join, "member_id": first["member_id"]})
        )
        for _ in range(100):  # the listener's ticker does this in production
            await asyncio.sleep(0.01)
            ctx.coordinator.tick()
            if parked.done():
                break
        joined = await parked
        member, generation = joined["member_id"], joined["generation_id"]
        await call(ApiKey.SYNC_GROUP, {"group_id": "app", "generation_id": generation,
                                       "member_id": member, "group_instance_id": None,
                                       "assignments": [{"member_id": member,
                                                        "assignment": b""}]})  # fmt: skip
        codes = []
        for offset in (12, 5):
            request = {"group_id": "app", "generation_id": generation, "member_id": member,
                       "retention_time_ms": -1, "topics": [{"name": "payments", "partitions": [
                           {"partition_index": 0, "committed_offset": offset,
                            "commit_timestamp": -1, "committed_metadata": None}]}]}  # fmt: skip
            reply = await call(ApiKey.OFFSET_COMMIT, request)
            codes.append(reply["topics"][0]["partitions"][0]["error_code"])
        await call(ApiKey.LEAVE_GROUP, {"group_id": "app", "member_id": member})
        return codes

    assert asyncio.run(member_commits()) == [0, 0]
    assert access.counted == {"offset.commit": 2}
    assert len(access.audited) == 2
    assert access.audited[1][4] == [{"topic": "payments", "queue_id": 0, "offset": 12}]
    assert access.audited[1][5] == [{"topic": "payments", "queue_id": 0, "offset": 5}]
    # The group is empty now: a commit from outside its membership is audited, even forward.
    assert commit(ctx, OPERATOR, "app", 40) == 0
    assert len(access.audited) == 3 and access.audited[2][5][0]["offset"] == 40
    assert access.counted == {"offset.commit": 2}


def test_a_connection_decides_once_per_operation_and_topic_until_the_acls_change(
    ctx: KafkaContext, access: RecordingAccess
) -> None:
    decided: list[tuple[Operation, str]] = []
    authorizer = access.authorizer()
    original = authorizer.decide

    def counting(subject: Subject, operation: Operation, resource: Any) -> Any:
        decided.append((operation, resource.name))
        return original(subject, operation, resource)

    authorizer.decide = counting  # type: ignore[method-assign]
    decisions = CachedDecisions(OPERATOR)
    records = encode_batch([(0, 1, None, b"x", ())])
    request = {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "payments", "partition_data": [{"index": p, "records": records}
                                                 for p in (0, 1)]}]}  # fmt: skip
    for _ in range(5):
        reply = send(ctx, decisions, ApiKey.PRODUCE, request)
        assert [p["error_code"] for p in reply["responses"][0]["partition_responses"]] == [0, 0]
    assert decided == [(Operation.WRITE, "payments")]
    access.set_entries([])  # a new authorizer version: decided again, once
    send(ctx, decisions, ApiKey.PRODUCE, request)
    assert decisions._version == access.authorizer().version
