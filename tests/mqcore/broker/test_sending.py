"""Send: spec 11 validation (one error per rule, in order), queue choice, perm, auto-create."""

from __future__ import annotations

import pytest

from mqcore.broker import (
    Broker,
    BrokerNotStartedError,
    NoPermissionError,
    OutgoingMessage,
    PullStatus,
    SendStatus,
)
from mqcore.errors import MessageIllegalError, NotFoundError, ValidationError
from mqcore.format.hashing import java_string_hash
from mqcore.format.msgid import HostAddress
from tests.mqcore.broker.conftest import SMALL_BODIES_STORE, BrokerFactory

MSG = OutgoingMessage(b"payload")


def _total(broker: Broker, topic: str) -> int:
    return broker.admin.topic_status(topic).message_count


# -- spec 11, broker steps in order ---------------------------------------------------------


def test_refused_before_start_and_after_stop(broker: Broker) -> None:
    broker.stop()
    with pytest.raises(BrokerNotStartedError) as info:
        broker.send("Orders", [MSG])
    assert info.value.rule == "not_started"


def test_broker_without_write_perm_refuses(make_broker: BrokerFactory) -> None:
    broker = make_broker(broker_perm=4)
    with pytest.raises(NoPermissionError) as info:
        broker.send("TBW102", [MSG])
    assert (info.value.field, info.value.rule) == ("broker", "broker_not_writable")


@pytest.mark.parametrize(
    ("topic", "rule"),
    [("", "blank"), ("bad topic", "characters"), ("t" * 128, "max_length")],
)
def test_topic_name_rules(broker: Broker, topic: str, rule: str) -> None:
    with pytest.raises(ValidationError) as info:
        broker.send(topic, [MSG])
    assert (info.value.field, info.value.rule) == ("topic", rule)
    assert str(info.value).startswith("topic: ")


@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"])
def test_system_topics_are_not_for_producers(broker: Broker, topic: str) -> None:
    with pytest.raises(NoPermissionError) as info:
        broker.send(topic, [MSG])
    assert info.value.rule == "not_allowed_send"


def test_unknown_topic_is_not_found_when_auto_create_is_off(broker: Broker) -> None:
    with pytest.raises(NotFoundError) as info:
        broker.send("Nope", [OutgoingMessage(b"")])  # the topic rule comes before the body's
    assert (info.value.field, info.value.rule) == ("topic", "not_found")
    assert "does not exist" in str(info.value)


def test_auto_create_copies_tbw102_defaults(make_broker: BrokerFactory) -> None:
    broker = make_broker(auto_create_topics=True, default_topic_queue_nums=4)
    (result,) = broker.send("Fresh", [MSG])
    topic = broker.admin.get_topic("Fresh")
    tbw = broker.admin.get_topic("TBW102")
    assert topic.write_queue_nums == topic.read_queue_nums == min(4, tbw.write_queue_nums)
    assert topic.perm == tbw.perm & ~1 == 6
    assert result.topic == "Fresh"


def test_retry_topics_are_created_on_send(broker: Broker) -> None:
    broker.send("%RETRY%GroupX", [MSG])
    info = broker.admin.get_topic("%RETRY%GroupX")
    assert (info.read_queue_nums, info.perm, info.kind) == (1, 6, "retry")


def test_queue_id_range(broker: Broker) -> None:
    with pytest.raises(ValidationError) as info:
        broker.send("Orders", [OutgoingMessage(b"x", queue_id=4)])
    assert (info.value.field, info.value.rule) == ("queue_id", "range")
    with pytest.raises(ValidationError) as info:
        broker.send("Orders", [MSG, OutgoingMessage(b"x", queue_id=9)])
    assert info.value.field == "messages[1].queue_id"


def test_write_forbidden_topic_is_refused(broker: Broker) -> None:
    broker.admin.update_topic("Orders", perm=4)
    with pytest.raises(NoPermissionError) as info:
        broker.send("Orders", [MSG])
    assert (info.value.field, info.value.rule) == ("topic", "topic_not_writable")


# -- spec 11, message rules -----------------------------------------------------------------


def test_no_messages(broker: Broker) -> None:
    with pytest.raises(ValidationError) as info:
        broker.send("Orders", [])
    assert (info.value.field, info.value.rule) == ("messages", "empty")


def test_empty_body(broker: Broker) -> None:
    with pytest.raises(MessageIllegalError) as info:
        broker.send("Orders", [OutgoingMessage(b"")])
    assert (info.value.field, info.value.rule) == ("body", "empty")


def test_body_too_large_names_the_batch_position(make_broker: BrokerFactory) -> None:
    store_config = SMALL_BODIES_STORE
    broker = make_broker(store_config=store_config)
    broker.admin.create_topic("T", read_queue_nums=1)
    with pytest.raises(MessageIllegalError) as info:
        broker.send("T", [MSG, OutgoingMessage(b"x" * 101)])
    assert (info.value.field, info.value.rule) == ("messages[1].body", "max_size")
    assert str(info.value).startswith("messages[1].body: must be at most 100 bytes")
    assert _total(broker, "T") == 0  # nothing stored when one message is bad


def test_negative_delay_level(broker: Broker) -> None:
    with pytest.raises(ValidationError) as info:
        broker.send("Orders", [OutgoingMessage(b"x", delay_level=-1)])
    assert (info.value.field, info.value.rule) == ("delay_level", "range")


def test_reserved_property_names(broker: Broker) -> None:
    with pytest.raises(ValidationError) as info:
        broker.send("Orders", [OutgoingMessage(b"x", properties={"UNIQ_KEY": "mine"})])
    assert (info.value.field, info.value.rule) == ("properties", "reserved_name")


def test_properties_too_large(broker: Broker) -> None:
    with pytest.raises(MessageIllegalError) as info:
        broker.send("Orders", [OutgoingMessage(b"x", properties={"big": "v" * 33_000})])
    assert (info.value.field, info.value.rule) == ("properties", "max_size")


def test_batch_bytes(make_broker: BrokerFactory) -> None:
    broker = make_broker(max_batch_bytes=10)
    broker.admin.create_topic("T", read_queue_nums=1)
    with pytest.raises(MessageIllegalError) as info:
        broker.send("T", [OutgoingMessage(b"123456"), OutgoingMessage(b"123456")])
    assert (info.value.field, info.value.rule) == ("messages", "max_batch_bytes")


# -- queue choice, ids --------------------------------------------------------------------------


def test_same_sharding_key_same_queue(broker: Broker) -> None:
    keys = ["order-1", "order-2", "customer-77", "x"]
    first = {k: broker.send("Orders", [OutgoingMessage(b"a", sharding_key=k)])[0] for k in keys}
    for key in keys:
        again = broker.send("Orders", [OutgoingMessage(b"b", sharding_key=key)])[0]
        assert again.queue_id == first[key].queue_id == abs(java_string_hash(key)) % 4


def test_round_robin_without_key(broker: Broker) -> None:
    results = broker.send("Orders", [OutgoingMessage(b"m") for _ in range(8)])
    assert [r.queue_id for r in results] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [r.queue_offset for r in results] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_explicit_queue_batch_is_contiguous(broker: Broker) -> None:
    results = broker.send("Orders", [OutgoingMessage(bytes([i]), queue_id=2) for i in range(5)])
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert all(r.status is SendStatus.SEND_OK and r.broker_name == "broker-a" for r in results)
    pulled = broker.pull("g", "Orders", 2, 0)
    assert [m.body for m in pulled.messages] == [bytes([i]) for i in range(5)]


def test_both_ids_find_the_message(broker: Broker) -> None:
    host = HostAddress("10.1.2.3", 5555)
    (result,) = broker.send(
        "Orders",
        [OutgoingMessage(b"body", tag="TagA", keys=["k1", "k2"], properties={"p": "v"})],
        born_host=host,
    )
    by_uniq = broker.get_message(result.msg_id)
    by_offset = broker.get_message(result.offset_msg_id)
    assert by_uniq is not None and by_offset is not None
    assert by_uniq.phys_offset == by_offset.phys_offset
    assert by_offset.msg_id == result.msg_id and by_offset.offset_msg_id == result.offset_msg_id
    assert by_offset.tags == "TagA" and by_offset.keys == ("k1", "k2")
    assert by_offset.user_properties() == {"p": "v"}
    assert by_offset.born_host == host
    assert [m.body for m in broker.query_by_key("Orders", "k2", 0, 2**62)] == [b"body"]


def test_send_without_dispatch_is_seen_after_reput(make_broker: BrokerFactory) -> None:
    broker = make_broker(dispatch_on_send=False)
    broker.admin.create_topic("T", read_queue_nums=1)
    broker.send("T", [MSG])
    assert broker.pull("g", "T", 0, 0).status is PullStatus.NO_NEW_MSG
    broker.store.dispatch_until_caught_up()
    assert broker.pull("g", "T", 0, 0).status is PullStatus.FOUND
