"""confluent-kafka 2.16 (librdkafka) against the listener: admin, codecs, groups, timestamps.

librdkafka probes ApiVersions with v3 first (answered with the v0-layout error), sends raw
(not xerial) snappy, reads at isolation level read_committed (so the last stable offset
must be filled in), and keeps its group coordinator on a connection of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from ..harness import RunningListener
from .conftest import eventually

pytestmark = pytest.mark.e2e


def admin(running: RunningListener) -> AdminClient:
    return AdminClient({"bootstrap.servers": running.bootstrap})


def create(running: RunningListener, topic: str, partitions: int = 2) -> str:
    client = admin(running)  # keep a reference: a collected client cancels its futures
    for future in client.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(10)
    return topic


def consumer(running: RunningListener, **conf: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": running.bootstrap,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "group.id": "assign-only",
            **conf,
        }
    )


def poll(c: Consumer, count: int, timeout_s: float = 20) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg)
        elif msg is not None and msg.error().code() != KafkaError._PARTITION_EOF:
            raise AssertionError(msg.error())
    return got


def test_admin_create_list_grow_delete(running: RunningListener, names) -> None:
    client = admin(running)
    topic = names("adm")
    futures = client.create_topics([NewTopic(topic, num_partitions=2), NewTopic("bad name!", 1)])
    futures[topic].result(10)
    with pytest.raises(Exception, match="TOPIC_EXCEPTION"):
        futures["bad name!"].result(10)
    assert len(client.list_topics(timeout=10).topics[topic].partitions) == 2
    client.create_partitions([NewPartitions(topic, 3)])[topic].result(10)
    assert len(client.list_topics(timeout=10).topics[topic].partitions) == 3
    client.delete_topics([topic])[topic].result(10)
    assert topic not in client.list_topics(timeout=10).topics


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_every_codec(running: RunningListener, names, compression: str, acks: str) -> None:
    topic = create(running, names("codec"), 1)
    producer = Producer(
        {
            "bootstrap.servers": running.bootstrap,
            "compression.type": compression,
            "acks": acks,
            "linger.ms": 5,
            "enable.idempotence": acks == "all",
        }
    )
    for i in range(100):
        producer.produce(
            topic, key=f"k{i}", value=f"value-{i}-" * 10, headers=[("h", b"1"), ("h", None)]
        )
    assert producer.flush(10) == 0
    c = consumer(running)
    c.assign([TopicPartition(topic, 0, 0)])
    got = poll(c, 100)
    c.close()
    assert [m.offset() for m in got] == list(range(100))
    assert got[42].key() == b"k42" and got[42].value() == b"value-42-" * 10
    assert got[42].headers() == [("h", b"1"), ("h", None)]


def test_fetch_from_the_middle_of_a_produced_batch(running: RunningListener, names) -> None:
    # The listener answers with the whole cached batch (as Kafka does); the client skips
    # the records before its position.
    topic = create(running, names("mid"), 1)
    producer = Producer({"bootstrap.servers": running.bootstrap, "linger.ms": 50})
    for i in range(100):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(10) == 0
    assert running.listener is not None
    (first, _), *_ = running.listener.ctx.batch_cache.run(topic.replace(".", "|"), 0, 37, 1, 1)
    assert first.base < 37  # offset 37 is inside a cached batch
    c = consumer(running)
    c.assign([TopicPartition(topic, 0, 37)])
    got = poll(c, 63)
    c.close()
    assert [(m.offset(), m.value()) for m in got] == [(i, b"v%d" % i) for i in range(37, 100)]


def test_subscribe_rebalance_and_commit(running: RunningListener, names) -> None:
    topic, group = create(running, names("grp"), 4), names("g")
    producer = Producer({"bootstrap.servers": running.bootstrap})
    for i in range(40):
        producer.produce(topic, value=b"m%d" % i, partition=i % 4)
    producer.flush(10)
    assigned: dict[str, list[Any]] = {"c1": [], "c2": []}

    def on_assign(name: str) -> Callable[[Any, list[Any]], None]:
        def callback(_consumer: Any, partitions: list[Any]) -> None:
            assigned[name] = partitions

        return callback

    c1 = consumer(running, **{"group.id": group})
    started = time.monotonic()
    c1.subscribe([topic], on_assign=on_assign("c1"))
    assert len(poll(c1, 40)) == 40
    assert time.monotonic() - started < 3  # group formed within 3 s at librdkafka defaults
    c1.commit(asynchronous=False)
    c2 = consumer(running, **{"group.id": group})
    c2.subscribe([topic], on_assign=on_assign("c2"))

    def split() -> bool:
        c1.poll(0.05)
        c2.poll(0.05)
        return len(assigned["c1"]) == len(assigned["c2"]) == 2

    eventually(split, what="rebalance splitting 4 partitions 2/2")
    committed = c2.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
    assert [tp.offset for tp in committed] == [10, 10, 10, 10]
    client = admin(running)
    described = client.describe_consumer_groups([group])[group].result(10)
    assert str(described.state).endswith("STABLE") and len(described.members) == 2
    listed = client.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}
    c2.close()
    c1.close()


def test_offsets_for_times_and_latest_reset(running: RunningListener, names) -> None:
    topic = create(running, names("ts"), 1)
    producer = Producer({"bootstrap.servers": running.bootstrap})
    for ts in (5_000, 6_000, 7_000):
        producer.produce(topic, value=b"x", timestamp=ts)
    producer.flush(10)
    c = consumer(running, **{"group.id": names("g"), "auto.offset.reset": "latest"})
    (found,) = c.offsets_for_times([TopicPartition(topic, 0, 5_500)], timeout=10)
    assert found.offset == 1
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 3)
    c.subscribe([topic])
    got: list[Any] = []

    def received() -> bool:  # keep producing until the consumer, reset to latest, sees one
        producer.produce(topic, value=b"new")
        producer.flush(10)
        got.extend(poll(c, 1, timeout_s=0.2))
        return bool(got)

    eventually(received, what="a message after the reset")
    assert got[0].value() == b"new" and got[0].offset() >= 3  # the 3 old ones were skipped
    c.close()


def test_static_member_restart_takes_its_place_back(running: RunningListener, names) -> None:
    topic, group = create(running, names("static"), 2), names("g")

    def start() -> tuple[Consumer, list[list[int]]]:
        c = consumer(running, **{"group.id": group, "group.instance.id": "worker-1"})
        assigned: list[list[int]] = []
        c.subscribe(
            [topic], on_assign=lambda _c, parts: assigned.append([p.partition for p in parts])
        )
        eventually(lambda: c.poll(0.05) is None and assigned, what="assignment")
        return c, assigned

    first, assigned = start()
    assert assigned == [[0, 1]]
    first.close()  # a static member does not leave the group on close
    second, assigned = start()  # same instance id: it takes the old member's place
    assert assigned == [[0, 1]]
    assert running.listener is not None
    described = running.listener.ctx.coordinator.describe(group)
    assert described["group_state"] == "Stable" and len(described["members"]) == 1
    assert described["members"][0]["group_instance_id"] == "worker-1"
    second.close()
