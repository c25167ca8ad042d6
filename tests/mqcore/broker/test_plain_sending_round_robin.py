"""Broker.send of plain store messages round robin (``BY_MESSAGE``): what the reference
path does with the same messages as OutgoingMessage without queue_id or sharding key (queues, offsets, CommitLog order, stored records, errors,
round-robin positions); and store_placed's grouping of a batch mixing delayed messages."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mqcore.broker import (
    Broker,
    BrokerNotStartedError,
    OutgoingMessage,
    SendResult,
    SendStatus,
)
from mqcore.errors import (
    MQError,
    StoreNotWritableError,
)
from mqcore.format.msgid import HostAddress
from mqcore.format.properties import PROPERTY_UNIQ_KEY
from mqcore.message import Message, MessageExt
from mqcore.metadata.topics import SCHEDULE_TOPIC
from tests.mqcore.broker.conftest import SMALL_BODIES_STORE, BrokerFactory

HOST = HostAddress("10.1.2.3", 5555)


def plain(topic: str, body: bytes, keys: str = "") -> Message:
    """What api.send_input.round_robin_messages makes of ``{"body": ..., "keys": [...]}``."""
    return Message(topic, body, keys=keys, born_host=HOST)


def outgoing(body: bytes, keys: str = "") -> OutgoingMessage:
    return OutgoingMessage(body, keys=keys)


def _stored(broker: Broker, topic: str, queues: int) -> list[MessageExt]:
    """Every record of ``topic``, in CommitLog order."""
    found: list[MessageExt] = []
    for q in range(queues):
        offset = 0
        while got := broker.pull("g", topic, q, offset, 256).messages:
            found += got
            offset = got[-1].queue_offset + 1
    return sorted(found, key=lambda m: m.phys_offset)


def _comparable(m: MessageExt) -> tuple[object, ...]:
    props = {k: v for k, v in m.properties.items() if k != PROPERTY_UNIQ_KEY}
    return (
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


def _placement(results: list[SendResult]) -> list[tuple[object, ...]]:
    return [(r.status, r.queue_id, r.queue_offset, r.broker_name, r.delayed) for r in results]


@pytest.mark.parametrize("queues", [1, 3, 8])
@pytest.mark.parametrize("count", [1, 2, 5, 20])
def test_stores_what_send_stores(make_broker: BrokerFactory, queues: int, count: int) -> None:
    broker = make_broker()
    for name in ("Mine", "Theirs"):
        broker.admin.create_topic(name, read_queue_nums=queues, write_queue_nums=queues)
    keys = ["", "order-1", "ключ-λ a", "k" * 9000]  # the last takes the exact measurement
    batch = [(bytes([65 + i % 26]) * (1 + i), keys[i % len(keys)]) for i in range(count)]
    sent: list[SendResult] = []
    for _ in range(2):  # the second batch continues the first one's round robin
        mine = broker.send("Mine", [plain("Mine", b, k) for b, k in batch])
        sent += mine
        theirs = broker.send("Theirs", [outgoing(b, k) for b, k in batch], born_host=HOST)
        assert _placement(mine) == _placement(theirs)
        assert {r.topic for r in mine} == {"Mine"}
        assert all(r.status is SendStatus.SEND_OK for r in mine)
    stored_mine, stored_theirs = _stored(broker, "Mine", queues), _stored(broker, "Theirs", queues)
    assert len(stored_mine) == 2 * count
    # Same records, same queues and offsets, in the same CommitLog order (one put per queue).
    assert [_comparable(m) for m in stored_mine] == [_comparable(m) for m in stored_theirs]
    by_offset = {r.offset_msg_id: r for r in sent}
    for m in stored_mine:
        r = by_offset[m.offset_msg_id]
        assert (r.msg_id, r.queue_id, r.queue_offset) == (m.msg_id, m.queue_id, m.queue_offset)


def test_shares_the_round_robin_with_send(broker: Broker) -> None:
    queues = [r.queue_id for r in broker.send("Orders", [outgoing(b"a")] * 3)]
    queues += [r.queue_id for r in broker.send("Orders", [plain("Orders", b"b")] * 2)]
    queues += [r.queue_id for r in broker.send("Orders", [outgoing(b"c")])]
    assert queues == [0, 1, 2, 3, 0, 1]


Send = Callable[[Broker, str, list[tuple[bytes, str]]], list[SendResult]]


def _send(broker: Broker, topic: str, batch: list[tuple[bytes, str]]) -> list[SendResult]:
    return broker.send(topic, [outgoing(b, k) for b, k in batch], born_host=HOST)


def _round_robin(broker: Broker, topic: str, batch: list[tuple[bytes, str]]) -> list[SendResult]:
    return broker.send(topic, [plain(topic, b, k) for b, k in batch])


def _error(send: Send, broker: Broker, topic: str, batch: list[tuple[bytes, str]]) -> object:
    with pytest.raises(MQError) as info:
        send(broker, topic, batch)
    e = info.value
    return type(e), getattr(e, "field", None), getattr(e, "rule", None), str(e)


BIG = 101  # the store below takes bodies of up to 100 bytes
ERRORS: list[tuple[str, str, list[tuple[bytes, str]]]] = [
    ("Orders", "empty", []),
    ("Orders", "body empty, lone message", [(b"", "")]),
    ("Orders", "body too large, second message", [(b"x", ""), (b"x" * BIG, "")]),
    ("Orders", "properties too large", [(b"x", ""), (b"x", "k" * 33_000)]),
    ("Orders", "properties before the next body", [(b"x", "k" * 33_000), (b"", "")]),
    ("Orders", "batch bytes", [(b"x" * 60, "")] * 3),
    ("Nope", "unknown topic, before the body", [(b"", "")]),
    ("bad topic!", "topic name", [(b"x", "")]),
    (SCHEDULE_TOPIC, "system topic", [(b"x", "")]),
    ("ReadOnly", "topic not writable, before the body", [(b"", "")]),
]


@pytest.mark.parametrize(("topic", "what", "batch"), ERRORS, ids=[e[1] for e in ERRORS])
def test_errors_are_sends(
    make_broker: BrokerFactory, topic: str, what: str, batch: list[tuple[bytes, str]]
) -> None:
    store_config = SMALL_BODIES_STORE
    broker = make_broker(store_config=store_config, max_batch_bytes=150)
    broker.admin.create_topic("Orders", read_queue_nums=8, write_queue_nums=8)
    broker.admin.create_topic("ReadOnly", read_queue_nums=4, write_queue_nums=4)
    broker.admin.update_topic("ReadOnly", perm=4)

    def next_queue() -> int:
        return _send(broker, "Orders", [(b"y", "")])[0].queue_id

    before = next_queue()
    mine = _error(_round_robin, broker, topic, batch)
    between = next_queue()
    assert mine == _error(_send, broker, topic, batch)
    after = next_queue()
    # A refused batch takes the round-robin positions send takes (send always has).
    assert (between - before) % 8 == (after - between) % 8
    stored = sum(broker.store.max_offset(t, q) for t in ("Orders", "ReadOnly") for q in range(8))
    assert stored == 3  # the three probes, nothing of the refused batches


def test_refused_when_not_started_or_not_writable(make_broker: BrokerFactory) -> None:
    broker = make_broker(broker_perm=4)
    broker.admin.create_topic("Orders", read_queue_nums=4)
    assert _error(_round_robin, broker, "Orders", [(b"x", "")]) == _error(
        _send, broker, "Orders", [(b"x", "")]
    )
    broker.stop()
    with pytest.raises(BrokerNotStartedError):
        _round_robin(broker, "Orders", [(b"x", "")])


def test_a_store_refusing_puts(broker: Broker) -> None:
    broker.store.set_writable(False, "disk full")
    with pytest.raises(StoreNotWritableError):
        _round_robin(broker, "Orders", [(b"x", ""), (b"y", "")])
    with pytest.raises(StoreNotWritableError):
        _send(broker, "Orders", [(b"x", ""), (b"y", "")])  # store_placed: the same
    assert broker.store.commit_log.max_offset == 0


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
        broker.send("Orders", [plain("Orders", b"x"), message])
    assert broker.store.commit_log.max_offset == 0


def test_counts_in_the_put_stats(broker: Broker) -> None:
    before = broker.status().put_total
    broker.send("Orders", [plain("Orders", b"x")] * 5)
    assert broker.status().put_total == before + 5


def test_store_placed_groups_a_batch_mixing_delayed_messages(broker: Broker) -> None:
    """Queue 0 of the topic and queue 0 of SCHEDULE_TOPIC_XXXX (delay level 1) are two puts;
    each result names where its message belongs, in the order given."""
    results = broker.send(
        "Orders",
        [
            OutgoingMessage(b"a", queue_id=0),
            OutgoingMessage(b"b", queue_id=0, delay_level=1),
            OutgoingMessage(b"c", queue_id=0),
            OutgoingMessage(b"d", queue_id=1, delay_level=1),
            OutgoingMessage(b"e", queue_id=1),
        ],
    )
    assert [(r.topic, r.queue_id, r.queue_offset, r.delayed) for r in results] == [
        ("Orders", 0, 0, False),
        ("Orders", 0, 0, True),  # its offset in SCHEDULE_TOPIC_XXXX queue 0
        ("Orders", 0, 1, False),
        ("Orders", 1, 1, True),
        ("Orders", 1, 0, False),
    ]
    assert [m.body for m in broker.pull("g", "Orders", 0, 0).messages] == [b"a", b"c"]
    parked = broker.pull(None, SCHEDULE_TOPIC, 0, 0).messages
    assert [m.body for m in parked] == [b"b", b"d"]
    assert [m.msg_id for m in parked] == [results[1].msg_id, results[3].msg_id]
