"""Broker.send of plain store messages to one queue (``ToQueue``, the Kafka listener's
produce path): the reference path's rules, errors and stored records."""

from __future__ import annotations

import pytest

from mqcore.broker import (
    Broker,
    BrokerNotStartedError,
    NoPermissionError,
    OutgoingMessage,
    SendStatus,
)
from mqcore.broker.placement import ToQueue
from mqcore.broker.plain_sending import is_plain_batch
from mqcore.broker.sending import ColumnSendResults
from mqcore.errors import MessageIllegalError, NotFoundError, ValidationError
from mqcore.format.msgid import HostAddress
from mqcore.format.properties import PROPERTY_UNIQ_KEY
from mqcore.message import Message, MessageExt
from mqcore.store.put.plain_batch import PlainColumns
from tests.mqcore.broker.conftest import SMALL_BODIES_STORE, BrokerFactory

HOST = HostAddress("10.1.2.3", 5555)


def plain(body: bytes, keys: str = "", topic: str = "Orders", ts: int | None = 7) -> Message:
    return Message(topic, body, keys=keys, born_timestamp=ts, born_host=HOST)


def _stored(broker: Broker, topic: str, queue_id: int) -> list[MessageExt]:
    return list(broker.pull("g", topic, queue_id, 0, 64).messages)


def _comparable(m: MessageExt) -> tuple[object, ...]:
    props = {k: v for k, v in m.properties.items() if k != PROPERTY_UNIQ_KEY}
    return (
        m.topic,
        m.queue_id,
        m.queue_offset,
        m.body,
        m.tags,
        m.keys,
        props,
        m.flag,
        m.sys_flag,
        m.born_timestamp,
        m.born_host,
        m.reconsume_times,
    )


@pytest.mark.parametrize(
    "keys", ["", "order-1", "ключ-λ", "k" * 9000, "a" * 7999 + "é"], ids=repr
)  # the last three take the exact properties measurement
def test_stores_what_send_stores(make_broker: BrokerFactory, keys: str) -> None:
    broker = make_broker()
    broker.admin.create_topic("Orders", read_queue_nums=4, write_queue_nums=4)
    broker.admin.create_topic("Other", read_queue_nums=4, write_queue_nums=4)
    bodies = [b"a", b"bb" * 50, bytes(range(256))]
    result = broker.send("Orders", [plain(b, keys) for b in bodies], ToQueue(2))[0]
    sent = broker.send(
        "Other",
        [OutgoingMessage(b, keys=keys, queue_id=2, born_timestamp=7) for b in bodies],
        born_host=HOST,
    )
    assert result.status is SendStatus.SEND_OK and not result.delayed
    assert (result.topic, result.queue_id, result.queue_offset) == ("Orders", 2, 0)
    mine, theirs = _stored(broker, "Orders", 2), _stored(broker, "Other", 2)
    assert [_comparable(m)[1:] for m in mine] == [_comparable(m)[1:] for m in theirs]
    assert mine[0].msg_id == result.msg_id and mine[0].offset_msg_id == result.offset_msg_id
    assert sent[0].queue_offset == 0
    again = broker.send("Orders", [plain(b"x")], ToQueue(2))[0]
    assert again.queue_offset == 3  # consecutive offsets per batch


def test_without_born_timestamp_the_store_time_is_used(make_broker: BrokerFactory) -> None:
    broker = make_broker()
    broker.admin.create_topic("Orders", read_queue_nums=1)
    broker.send("Orders", [plain(b"x", ts=None)], ToQueue(0))
    (stored,) = _stored(broker, "Orders", 0)
    assert stored.born_timestamp == broker.clock.now_ms()


def test_refused_before_start(broker: Broker) -> None:
    broker.stop()
    with pytest.raises(BrokerNotStartedError):
        broker.send("Orders", [plain(b"x")], ToQueue(0))


def test_unknown_topic(broker: Broker) -> None:
    with pytest.raises(NotFoundError) as info:
        broker.send("Nope", [plain(b"", topic="Nope")], ToQueue(0))  # topic before body
    assert (info.value.field, info.value.rule) == ("topic", "not_found")


def test_queue_id_range(broker: Broker) -> None:
    with pytest.raises(ValidationError) as info:
        broker.send("Orders", [plain(b"x")], ToQueue(4))
    assert (info.value.field, info.value.rule) == ("queue_id", "range")
    with pytest.raises(ValidationError) as info:
        broker.send("Orders", [plain(b"x"), plain(b"")], ToQueue(9))  # queue before body
    assert info.value.field == "messages[0].queue_id"


def test_write_forbidden_topic(broker: Broker) -> None:
    broker.admin.update_topic("Orders", perm=4)
    with pytest.raises(NoPermissionError) as info:
        broker.send("Orders", [plain(b"x")], ToQueue(0))
    assert info.value.rule == "topic_not_writable"


def test_no_messages(broker: Broker) -> None:
    with pytest.raises(ValidationError) as info:
        broker.send("Orders", [], ToQueue(0))
    assert (info.value.field, info.value.rule) == ("messages", "empty")


def test_body_rules_name_the_batch_position(make_broker: BrokerFactory) -> None:
    store_config = SMALL_BODIES_STORE
    broker = make_broker(store_config=store_config)
    broker.admin.create_topic("Orders", read_queue_nums=1)
    with pytest.raises(MessageIllegalError) as info:
        broker.send("Orders", [plain(b"x"), plain(b"x" * 101)], ToQueue(0))
    assert (info.value.field, info.value.rule) == ("messages[1].body", "max_size")
    with pytest.raises(MessageIllegalError) as info:
        broker.send("Orders", [plain(b"")], ToQueue(0))
    assert (info.value.field, info.value.rule) == ("body", "empty")
    assert broker.store.max_offset("Orders", 0) == 0


def test_keys_too_long_for_the_properties(broker: Broker) -> None:
    with pytest.raises(MessageIllegalError) as info:
        broker.send("Orders", [plain(b"x"), plain(b"x", keys="k" * 33_000)], ToQueue(0))
    assert (info.value.field, info.value.rule) == ("messages[1].properties", "max_size")
    with pytest.raises(MessageIllegalError):
        broker.send("Orders", [OutgoingMessage(b"x", keys="k" * 33_000)])  # as send says
    assert broker.store.max_offset("Orders", 0) == 0


def test_batch_bytes(make_broker: BrokerFactory) -> None:
    broker = make_broker(max_batch_bytes=10)
    broker.admin.create_topic("T", read_queue_nums=1)
    with pytest.raises(MessageIllegalError) as info:
        broker.send("T", [plain(b"123456", topic="T"), plain(b"123456", topic="T")], ToQueue(0))
    assert (info.value.field, info.value.rule) == ("messages", "max_batch_bytes")


@pytest.mark.parametrize(
    "message",
    [
        Message("Orders", b"x", properties={"p": "v"}),
        Message("Orders", b"x", delay_level=2),
        Message("Other", b"x"),
    ],
    ids=["properties", "delay", "topic"],
)
def test_not_plain_is_a_caller_bug(broker: Broker, message: Message) -> None:
    with pytest.raises(ValueError, match="messages\\[1\\] is not a plain message"):
        broker.send("Orders", [plain(b"x"), message], ToQueue(0))
    assert broker.store.max_offset("Orders", 0) == 0


def test_the_one_rule_choosing_the_path() -> None:
    assert is_plain_batch([plain(b"x")])
    assert is_plain_batch(PlainColumns("Orders", [b"x"], [""], [7], HOST))
    assert not is_plain_batch([OutgoingMessage(b"x")])
    assert not is_plain_batch([])  # the reference path names the error


def test_column_results_are_made_when_read(make_broker: BrokerFactory) -> None:
    broker = make_broker()
    broker.admin.create_topic("Orders", read_queue_nums=1)
    broker.send("Orders", [plain(b"first")], ToQueue(0))  # a queue's first put is general
    results = broker.send("Orders", [plain(b) for b in (b"a", b"b", b"c")], ToQueue(0))
    assert isinstance(results, ColumnSendResults)
    every = list(results)
    assert len(results) == 3 and [r.queue_offset for r in every] == [1, 2, 3]
    assert results[0] == every[0] and results[-1] == every[2] and results[1:] == every[1:]
    assert results == every and results != every[:2]
    assert [r.msg_id for r in every] == [m.msg_id for m in _stored(broker, "Orders", 0)[1:]]
    assert [r.offset_msg_id for r in every] == [
        m.offset_msg_id for m in _stored(broker, "Orders", 0)[1:]
    ]
    with pytest.raises(IndexError):
        results[3]
