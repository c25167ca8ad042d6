"""Admin calls issue 21 added, from confluent-kafka's AdminClient (librdkafka) and, for
OffsetDelete (which confluent-kafka's Python API lacks), kafka-python's: OffsetDelete
removes one topic's offsets and spares the topics a live group subscribes to, DeleteGroups,
and CreateTopics refusing configs with the broker's message (librdkafka shows it, kafkajs
does not)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic

from ..harness import RunningListener
from .conftest import eventually

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.errors import GroupSubscribedToTopicError, NoError

pytestmark = pytest.mark.e2e


def admin(running: RunningListener) -> AdminClient:
    return AdminClient({"bootstrap.servers": running.bootstrap})


def create(client: AdminClient, topic: str, **configs: str) -> None:
    new = NewTopic(topic, num_partitions=2, config=configs)
    for future in client.create_topics([new]).values():
        future.result(10)


def test_offset_delete_removes_one_topics_offsets(
    running: RunningListener, names: Callable[[str], str]
) -> None:
    client = admin(running)
    orders, payments, group = names("orders"), names("payments"), names("billing")
    create(client, orders)
    create(client, payments)
    offsets = [TP(orders, 0, 3), TP(orders, 1, 4), TP(payments, 0, 7)]
    request = ConsumerGroupTopicPartitions(group, offsets)
    for future in client.alter_consumer_group_offsets([request]).values():
        future.result(10)
    store_group = group.replace(".", "|")
    assert running.broker is not None
    assert running.broker.get_offsets(store_group) == {
        orders.replace(".", "|"): {0: 3, 1: 4},
        payments.replace(".", "|"): {0: 7},
    }
    python_admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    try:
        result = python_admin.delete_group_offsets(
            group, [TopicPartition(orders, 0), TopicPartition(orders, 1)]
        )
    finally:
        python_admin.close()
    assert result == {TopicPartition(orders, 0): NoError, TopicPartition(orders, 1): NoError}
    assert running.broker.get_offsets(store_group) == {payments.replace(".", "|"): {0: 7}}
    # The group, now with offsets on one topic only, is deleted whole.
    [deleted] = client.delete_consumer_groups([group]).values()
    deleted.result(10)
    assert running.broker.get_offsets(store_group) == {}
    [missing] = client.delete_consumer_groups([group]).values()
    with pytest.raises(KafkaException) as info:
        missing.result(10)
    assert info.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize(
    ("configs", "says"),
    [
        ({"no.such.config": "1"}, "unknown topic config 'no.such.config'"),
        ({"cleanup.policy": "compact"}, "cleanup.policy=compact is not supported"),
        ({"retention.ms": "1000"}, "retention.ms=1000 is not supported"),
    ],
)
def test_create_topics_refuses_what_cairn_cannot_honour(
    running: RunningListener, names: Callable[[str], str], configs: dict[str, str], says: str
) -> None:
    client = admin(running)
    topic = names("configured")
    with pytest.raises(KafkaException) as info:
        create(client, topic, **configs)
    error = info.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert says in error.str()
    assert topic not in client.list_topics(timeout=10).topics


def test_offset_delete_spares_topics_a_live_group_subscribes_to(
    running: RunningListener, names: Callable[[str], str]
) -> None:
    client = admin(running)
    orders, payments, group = names("orders"), names("payments"), names("live")
    create(client, orders)
    create(client, payments)
    request = ConsumerGroupTopicPartitions(group, [TP(orders, 0, 1), TP(payments, 0, 2)])
    for future in client.alter_consumer_group_offsets([request]).values():
        future.result(10)
    consumer = KafkaConsumer(orders, bootstrap_servers=running.bootstrap, group_id=group)
    python_admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    try:

        def joined() -> bool:
            consumer.poll(timeout_ms=100)
            return bool(consumer.assignment())

        eventually(joined, what="the consumer joined its group")
        result = python_admin.delete_group_offsets(
            group, [TopicPartition(orders, 0), TopicPartition(payments, 0)]
        )
        assert result == {
            TopicPartition(orders, 0): GroupSubscribedToTopicError,
            TopicPartition(payments, 0): NoError,
        }
        assert running.broker is not None
        assert running.broker.get_offsets(group.replace(".", "|")) == {
            orders.replace(".", "|"): {0: 1}
        }
    finally:
        python_admin.close()
        consumer.close()
