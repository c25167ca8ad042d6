"""Handlers against a real Broker on tmp_path (dispatch on send: no reput thread needed)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import (
    Call,
    KafkaContext,
    Later,
    ListenerConfig,
    dispatch,
    supported_versions,
)
from kafka_listener.records import decode_batches, encode_batch
from kafka_listener.schemas import ApiKey
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.broker.types import OutgoingMessage
from mqcore.clock import SystemClock

from .harness import TEST_STORE_CONFIG


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))
    try:
        b.admin.create_topic("t", read_queue_nums=2, write_queue_nums=2)
        b.admin.create_topic("a|b", read_queue_nums=1, write_queue_nums=1)
        yield b
    finally:
        b.close()


@pytest.fixture
def ctx(broker: Broker) -> KafkaContext:
    return KafkaContext(
        broker, ListenerConfig(port=0), SystemClock(), versions=supported_versions()
    )


def call(ctx: KafkaContext, key: int, request: dict[str, Any], version: int | None = None) -> Any:
    version = version if version is not None else supported_versions()[key][1]

    async def run() -> Any:
        response = await dispatch(ctx, Call(key, version, 1, "test-client", request))
        return await response.response if isinstance(response, Later) else response

    return asyncio.run(run())


def produce_request(topic: str, partition: int, records: bytes | None, acks: int = 1) -> dict:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def produced(response: dict) -> dict:
    return response["responses"][0]["partition_responses"][0]


def fetch_request(topic: str, partition: int, offset: int, wait_ms: int = 0) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def fetched(response: dict) -> dict:
    return response["responses"][0]["partitions"][0]


BATCH = encode_batch(
    [(0, 1000, b"k1", b"v1", (("h", b"x"),)), (1, 1005, None, None, ()), (2, 1010, b"", b"", ())]
)


@pytest.fixture
def uncached(broker: Broker) -> KafkaContext:
    """A context without the fetch cache: every Fetch rebuilds batches from the store."""
    config = ListenerConfig(port=0, fetch_cache_bytes=0)
    return KafkaContext(broker, config, SystemClock(), versions=supported_versions())


def test_produce_then_fetch_round_trips_records(uncached: KafkaContext, broker: Broker) -> None:
    ctx = uncached
    first = produced(call(ctx, ApiKey.PRODUCE, produce_request("a.b", 0, BATCH)))
    assert first == {
        "index": 0,
        "error_code": 0,
        "base_offset": 0,
        "log_append_time_ms": -1,
        "log_start_offset": 0,
    }
    second = produced(call(ctx, ApiKey.PRODUCE, produce_request("a.b", 0, BATCH)))
    assert second["base_offset"] == 3
    part = fetched(call(ctx, ApiKey.FETCH, fetch_request("a.b", 0, 1)))
    assert part["error_code"] == 0 and part["high_watermark"] == part["last_stable_offset"] == 6
    (batch,) = decode_batches(part["records"])  # CRC checked
    assert batch.header.base_offset == 1
    assert [(r.offset_delta, r.timestamp, r.key, r.value, r.headers) for r in batch.records] == [
        (0, 1005, None, None, ()),
        (1, 1010, b"", b"", ()),
        (2, 1000, b"k1", b"v1", (("h", b"x"),)),
        (3, 1005, None, None, ()),
        (4, 1010, b"", b"", ()),
    ]
    # The console and REST see one message per record, findable by key.
    assert [m.body for m in broker.query_by_key("a|b", "k1", 0, 2**62)] == [b"v1", b"v1"]


def test_acks_zero_has_no_response_but_stores(ctx: KafkaContext, broker: Broker) -> None:
    assert call(ctx, ApiKey.PRODUCE, produce_request("t", 1, BATCH, acks=0)) is None
    assert broker.store.max_offset("t", 1) == 3


@pytest.mark.parametrize(
    ("topic", "partition", "records", "acks", "code"),
    [
        ("t", 0, BATCH, 2, ErrorCode.INVALID_REQUIRED_ACKS),
        ("bad name", 0, BATCH, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("missing", 0, BATCH, 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("TBW102", 0, BATCH, 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),  # system topics hidden
        ("t", 9, BATCH, 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", 0, BATCH[:-5] + bytes([BATCH[-5] ^ 1]) + BATCH[-4:], 1, ErrorCode.CORRUPT_MESSAGE),
        ("t", 0, BATCH + BATCH, 1, ErrorCode.INVALID_RECORD),
        ("t", 0, None, 1, ErrorCode.INVALID_RECORD),
        # offset deltas must be 0, 1, ..., n-1 (last_offset_delta agrees in both)
        ("t", 0, encode_batch([(0, 1, None, b"a", ()), (2, 1, None, b"b", ())],
                              last_offset_delta=1), 1, ErrorCode.INVALID_RECORD),
        ("t", 0, encode_batch([(1, 1, None, b"a", ()), (0, 1, None, b"b", ())]), 1,
         ErrorCode.INVALID_RECORD),
    ],
)  # fmt: skip
def test_produce_errors_store_nothing(ctx, broker, topic, partition, records, acks, code) -> None:
    reply = produced(call(ctx, ApiKey.PRODUCE, produce_request(topic, partition, records, acks)))
    assert reply["error_code"] == code and reply["base_offset"] == -1
    assert broker.store.max_offset("t", 0) == 0


def test_idempotent_retry_is_not_stored_twice(ctx: KafkaContext, broker: Broker) -> None:
    def batch(seq: int, epoch: int = 0) -> bytes:
        return encode_batch(
            [(0, 1, None, b"a", ()), (1, 1, None, b"b", ())],
            producer_id=42,
            producer_epoch=epoch,
            base_sequence=seq,
        )

    def send(records: bytes) -> dict:
        return produced(call(ctx, ApiKey.PRODUCE, produce_request("t", 0, records)))

    assert send(batch(0))["base_offset"] == 0
    assert send(batch(2))["base_offset"] == 2
    assert send(batch(0))["base_offset"] == 0  # a retry: the original offset, nothing stored
    assert send(batch(7))["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(batch(4, epoch=1))["base_offset"] == 4  # a new epoch starts afresh
    assert send(batch(6, epoch=0))["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert broker.store.max_offset("t", 0) == 6


def test_init_producer_id(ctx: KafkaContext) -> None:
    one = call(
        ctx, ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 1}
    )
    two = call(
        ctx, ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 1}
    )
    assert 0 < one["producer_id"] < two["producer_id"] and one["producer_epoch"] == 0
    txn = call(ctx, ApiKey.INIT_PRODUCER_ID, {"transactional_id": "x", "transaction_timeout_ms": 1})
    assert txn["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_fetch_bounds_and_errors(ctx: KafkaContext, broker: Broker) -> None:
    broker.send("t", [OutgoingMessage(b"rest", keys="k", queue_id=0)])
    at_end = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 1)))
    assert at_end["error_code"] == 0 and at_end["records"] == b""
    beyond = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 5)))
    assert beyond["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE and beyond["records"] is None
    assert fetched(call(ctx, ApiKey.FETCH, fetch_request("nope", 0, 0)))["error_code"] == 3
    assert fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 5, 0)))["error_code"] == 3
    (batch,) = decode_batches(fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 0)))["records"])
    assert [(r.key, r.value) for r in batch.records] == [(b"k", b"rest")]  # sent over "REST"


def test_fetch_long_poll_returns_when_a_message_arrives(ctx: KafkaContext, broker: Broker) -> None:
    def send_later() -> None:
        time.sleep(0.2)
        broker.send("t", [OutgoingMessage(b"late", queue_id=1)])

    threading.Thread(target=send_later).start()
    started = time.monotonic()
    part = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 1, 0, wait_ms=10_000)))
    elapsed = time.monotonic() - started
    assert part["records"] and 0.15 < elapsed < 5


def test_list_offsets(ctx: KafkaContext, broker: Broker) -> None:
    broker.send("t", [OutgoingMessage(b"x", queue_id=0, born_timestamp=ts) for ts in (10, 20, 30)])

    def offsets(ts: int) -> tuple[int, int, int]:
        request = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": ts}]}],
        }
        p = call(ctx, ApiKey.LIST_OFFSETS, request)["topics"][0]["partitions"][0]
        return p["error_code"], p["offset"], p["timestamp"]

    assert offsets(-1) == (0, 3, -1)
    assert offsets(-2) == (0, 0, -1)
    assert offsets(15) == (0, 1, 20)
    assert offsets(30) == (0, 2, 30)
    assert offsets(31) == (0, -1, -1)


def test_metadata_shows_kafka_topics_only(ctx: KafkaContext) -> None:
    everything = call(ctx, ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False})
    assert everything["controller_id"] == 0 and everything["brokers"][0]["port"] == 9092
    assert {t["name"]: len(t["partitions"]) for t in everything["topics"]} == {"a.b": 1, "t": 2}
    one = call(
        ctx,
        ApiKey.METADATA,
        {"topics": [{"name": "nope"}, {"name": "x y"}], "allow_auto_topic_creation": True},
    )
    assert [t["error_code"] for t in one["topics"]] == [3, 17]


def test_metadata_auto_creates_when_enabled(broker: Broker) -> None:
    ctx = KafkaContext(
        broker,
        ListenerConfig(auto_create_topics=True, default_partitions=3),
        versions=supported_versions(),
    )
    reply = call(
        ctx, ApiKey.METADATA, {"topics": [{"name": "new.one"}], "allow_auto_topic_creation": True}
    )
    assert reply["topics"][0]["error_code"] == 0 and len(reply["topics"][0]["partitions"]) == 3
    assert broker.admin.get_topic("new|one").read_queue_nums == 3


def test_create_and_delete_topics(ctx: KafkaContext, broker: Broker) -> None:
    def topic(name: str, n: int = 2, rf: int = 1) -> dict:
        return {
            "name": name,
            "num_partitions": n,
            "replication_factor": rf,
            "assignments": [],
            "configs": [],
        }

    request = {
        "topics": [
            topic("new.t"),
            topic("t"),
            topic("x", rf=3),
            topic("y", n=0),
            topic("bad/name"),
            topic("dflt", n=-1, rf=-1),
        ],
        "timeout_ms": 1000,
        "validate_only": False,
    }
    codes = [t["error_code"] for t in call(ctx, ApiKey.CREATE_TOPICS, request)["topics"]]
    assert codes == [0, 36, 38, 37, 17, 0]
    assert broker.admin.get_topic("new|t").read_queue_nums == 2
    assert broker.admin.get_topic("dflt").read_queue_nums == 1
    reply = call(ctx, ApiKey.DELETE_TOPICS, {"topic_names": ["new.t", "nope"], "timeout_ms": 1})
    assert [r["error_code"] for r in reply["responses"]] == [0, 3]


def test_create_partitions_and_describe_configs(ctx: KafkaContext, broker: Broker) -> None:
    grow = {
        "topics": [
            {"name": "t", "count": 4, "assignments": None},
            {"name": "t", "count": 1, "assignments": None},
        ],
        "timeout_ms": 1,
        "validate_only": False,
    }
    assert [r["error_code"] for r in call(ctx, ApiKey.CREATE_PARTITIONS, grow)["results"]] == [
        0,
        37,
    ]
    assert broker.admin.get_topic("t").read_queue_nums == 4
    request = {
        "resources": [
            {"resource_type": 2, "resource_name": "t", "configuration_keys": ["retention.ms"]},
            {"resource_type": 2, "resource_name": "nope", "configuration_keys": None},
        ],
        "include_synonyms": False,
    }
    results = call(ctx, ApiKey.DESCRIBE_CONFIGS, request)["results"]
    assert [c["name"] for c in results[0]["configs"]] == ["retention.ms"]
    assert results[1]["error_code"] == 3


def commit(ctx: KafkaContext, group: str, offset: int, metadata: str | None = "m") -> int:
    request = {
        "group_id": group,
        "generation_id": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 1,
                        "committed_offset": offset,
                        "committed_metadata": metadata,
                    }
                ],
            }
        ],
    }
    return call(ctx, ApiKey.OFFSET_COMMIT, request)["topics"][0]["partitions"][0]["error_code"]


def test_simple_commit_lands_in_consumer_offsets(ctx: KafkaContext, broker: Broker) -> None:
    assert commit(ctx, "my.group", 5) == 0
    assert broker.get_offsets("my|group") == {"t": {1: 5}}
    assert commit(ctx, "my.group", 5, "x" * 5000) == ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert commit(ctx, "g" * 200, 5) == ErrorCode.INVALID_GROUP_ID
    request = {"group_id": "my.group", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    reply = call(ctx, ApiKey.OFFSET_FETCH, request)
    assert reply["error_code"] == 0
    assert [(p["committed_offset"], p["metadata"]) for p in reply["topics"][0]["partitions"]] == [
        (-1, ""),
        (5, "m"),
    ]
    everything = call(ctx, ApiKey.OFFSET_FETCH, {"group_id": "my.group", "topics": None})
    assert everything["topics"][0]["name"] == "t"
    listed = call(ctx, ApiKey.LIST_GROUPS, {})["groups"]
    assert {"group_id": "my.group", "protocol_type": ""} in listed
    described = call(
        ctx,
        ApiKey.DESCRIBE_GROUPS,
        {"groups": ["my.group", "unknown"], "include_authorized_operations": False},
    )
    assert [g["group_state"] for g in described["groups"]] == ["Empty", "Dead"]


def test_group_handshake_through_handlers(ctx: KafkaContext) -> None:
    async def run() -> tuple[dict, dict]:
        join = {
            "group_id": "g",
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}],
        }
        first = await dispatch(ctx, Call(ApiKey.JOIN_GROUP, 5, 1, "cid", join))
        assert first is not None and first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        assert first["member_id"].startswith("cid-")
        parked = asyncio.ensure_future(
            dispatch(
                ctx, Call(ApiKey.JOIN_GROUP, 5, 2, "cid", join | {"member_id": first["member_id"]})
            )
        )
        for _ in range(100):  # the listener's ticker does this in production
            await asyncio.sleep(0.01)
            ctx.coordinator.tick()
            if parked.done():
                break
        joined = await parked
        assert joined is not None
        sync = {
            "group_id": "g",
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "group_instance_id": None,
            "assignments": [{"member_id": joined["member_id"], "assignment": b"A"}],
        }
        synced = await dispatch(ctx, Call(ApiKey.SYNC_GROUP, 3, 3, "cid", sync))
        assert synced is not None
        return joined, synced

    joined, synced = asyncio.run(run())
    assert joined["error_code"] == 0 and synced["assignment"] == b"A"
    coordinator = call(ctx, ApiKey.FIND_COORDINATOR, {"key": "g", "key_type": 0})
    assert (coordinator["node_id"], coordinator["port"]) == (0, 9092)
    txn = call(ctx, ApiKey.FIND_COORDINATOR, {"key": "t", "key_type": 1})
    assert txn["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
