"""kafka-python 3.0 (pure Python) against the listener: admin, produce, consume, groups.

kafka-python can compress with gzip only here: its snappy, lz4 and zstd codecs need
python-snappy, lz4 and zstandard, which Cairn does not install (aiokafka and
confluent-kafka cover those codecs).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator

import pytest

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    from kafka.errors import TopicAlreadyExistsError

from ..harness import RunningListener
from .conftest import eventually

pytestmark = pytest.mark.e2e


@pytest.fixture
def admin(running: RunningListener) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    yield client
    client.close()


def create(admin: KafkaAdminClient, topic: str, partitions: int = 2) -> str:
    admin.create_topics([NewTopic(topic, partitions, 1)])
    return topic


def consume(consumer: KafkaConsumer, count: int, timeout_s: float = 20) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got += records
    return got


def test_admin_topics_and_configs(running, admin, names: Callable[[str], str]) -> None:
    topic = create(admin, names("adm"), 3)
    assert topic in admin.list_topics()
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, 1, 1)])
    assert running.broker.admin.get_topic(topic.replace(".", "|")).read_queue_nums == 3
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], config_filter="all")
    assert "retention.ms" in str(configs)
    admin.delete_topics([topic])
    assert topic not in admin.list_topics()


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_produce_and_consume_assigned(running, admin, names, acks, compression) -> None:
    topic = create(admin, names("pc"))
    producer = KafkaProducer(
        bootstrap_servers=running.bootstrap, acks=acks, compression_type=compression, linger_ms=5
    )
    for i in range(50):
        producer.send(
            topic,
            key=b"key-%d" % i,
            value=b"value-%d" % i * 20,
            headers=[("n", str(i).encode()), ("empty", b"")],
            partition=i % 2,
        )
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=running.bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 1)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = consume(consumer, 25)
    consumer.close()
    assert [r.offset for r in got] == list(range(25))
    first = got[0]
    assert (first.key, first.value) == (b"key-1", b"value-1" * 20)
    assert first.headers == [("n", b"1"), ("empty", b"")]
    # One stored message per record: REST and the console find it by key.
    found = running.broker.query_by_key(topic.replace(".", "|"), "key-1", 0, 2**62)
    assert [m.body for m in found] == [b"value-1" * 20]


def test_fetch_from_the_middle_of_a_produced_batch(running, admin, names) -> None:
    topic = create(admin, names("mid"), 1)
    producer = KafkaProducer(bootstrap_servers=running.bootstrap, linger_ms=50)
    for i in range(100):
        producer.send(topic, b"v%d" % i)
    producer.flush()
    producer.close()
    assert running.listener is not None
    (first, _), *_ = running.listener.ctx.batch_cache.run(topic.replace(".", "|"), 0, 37, 1, 1)
    assert first.base < 37  # offset 37 is inside a cached batch
    consumer = KafkaConsumer(bootstrap_servers=running.bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 37)  # inside the one cached batch: the client skips what precedes it
    got = consume(consumer, 63)
    consumer.close()
    assert [(r.offset, r.value) for r in got] == [(i, b"v%d" % i) for i in range(37, 100)]


def test_idempotent_default_producer(running, admin, names) -> None:
    topic = create(admin, names("idem"), 1)
    producer = KafkaProducer(bootstrap_servers=running.bootstrap)  # idempotent by default
    offsets = [producer.send(topic, b"m%d" % i).get(10).offset for i in range(5)]
    producer.close()
    assert offsets == [0, 1, 2, 3, 4]


def test_group_subscribe_commit_and_offset_reset(running, admin, names) -> None:
    topic, group = create(admin, names("grp")), names("g")
    producer = KafkaProducer(bootstrap_servers=running.bootstrap)
    for i in range(20):
        producer.send(topic, b"m%d" % i, partition=i % 2)
    producer.flush()
    started = time.monotonic()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=running.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    got = consume(consumer, 20)
    assert len(got) == 20 and time.monotonic() - started < 3  # group formed within 3 s
    consumer.commit()
    assert consumer.committed(TopicPartition(topic, 0)) == 10
    consumer.close()
    assert running.broker.get_offsets(group.replace(".", "|")) == {
        topic.replace(".", "|"): {0: 10, 1: 10}
    }
    # "latest": a new group starts at the end and sees only what comes after it joined.
    late = KafkaConsumer(
        topic,
        bootstrap_servers=running.bootstrap,
        group_id=names("late"),
        auto_offset_reset="latest",
    )
    eventually(lambda: late.poll(timeout_ms=100) == {} and late.assignment(), what="join")
    eventually(lambda: all(late.position(tp) == 10 for tp in late.assignment()), what="reset")
    producer.send(topic, b"after", partition=0)
    producer.flush()
    assert [r.value for r in consume(late, 1)] == [b"after"]
    late.close()
    producer.close()
    groups = {g["group_id"] for g in admin.list_groups()}
    assert group in groups
    described = admin.describe_groups([group])
    assert described[group]["group_state"] == "Empty"


def test_second_consumer_splits_partitions(running, admin, names) -> None:
    topic, group = create(admin, names("split"), 4), names("g")

    def consumer() -> KafkaConsumer:
        return KafkaConsumer(
            topic, bootstrap_servers=running.bootstrap, group_id=group, auto_offset_reset="earliest"
        )

    first = consumer()
    eventually(
        lambda: first.poll(timeout_ms=100) is not None and len(first.assignment()) == 4,
        what="first consumer owns all partitions",
    )
    second = consumer()

    def split() -> bool:
        first.poll(timeout_ms=50)
        second.poll(timeout_ms=50)
        return len(first.assignment()) == len(second.assignment()) == 2

    eventually(split, what="rebalance")
    assert first.assignment().isdisjoint(second.assignment())
    described = admin.describe_groups([group])[group]
    assert described["group_state"] == "Stable" and len(described["members"]) == 2
    second.close()
    first.close()


def test_offsets_for_times(running, admin, names) -> None:
    topic = create(admin, names("ts"), 1)
    producer = KafkaProducer(bootstrap_servers=running.bootstrap)
    for ts in (1_000, 2_000, 3_000):
        producer.send(topic, b"at-%d" % ts, timestamp_ms=ts)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=running.bootstrap)
    tp = TopicPartition(topic, 0)
    found = consumer.offsets_for_times({tp: 1_500})[tp]
    assert (found.offset, found.timestamp) == (1, 2_000)
    assert consumer.offsets_for_times({tp: 9_000})[tp] is None
    assert consumer.end_offsets([tp])[tp] == 3
    consumer.close()


def test_unknown_topic_is_an_error_not_a_hang(running, names) -> None:
    consumer = KafkaConsumer(bootstrap_servers=running.bootstrap)
    try:
        assert not consumer.partitions_for_topic(names("missing"))
    finally:
        consumer.close()
