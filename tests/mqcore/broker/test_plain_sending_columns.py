"""Broker.send of plain columns (``PlainColumns``, the Kafka listener's produce of large
batches): for any input, the same results, errors (type, field, rule, text), stats and
stored records as a send of the equivalent messages, on twin brokers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.broker.placement import ToQueue
from mqcore.clock import FakeClock
from mqcore.errors import MQError
from mqcore.format.msgid import HostAddress
from mqcore.message import Message
from mqcore.store.put.plain_batch import PlainColumns
from tests.mqcore.broker.conftest import NOW_MS, SMALL_BODIES_STORE
from tests.mqcore.broker.test_plain_sending import _comparable, _stored

HOST = HostAddress("10.1.2.3", 5555)
STORE = SMALL_BODIES_STORE


def _messages(*bodies: bytes, keys: str = "", topic: str = "Orders") -> list[Message]:
    return [Message(topic, b, keys=keys, born_timestamp=7, born_host=HOST) for b in bodies]


# name: (topic, queue_id, messages)
CASES: dict[str, tuple[str, int, list[Message]]] = {
    "keyless": ("Orders", 1, _messages(b"a", b"bb" * 50, bytes(range(100)))),
    "keyed": ("Orders", 0, _messages(b"a", b"b", keys="order-1")),
    "mixed keys": ("Orders", 0, _messages(b"a") + _messages(b"b", keys="ключ-λ")),
    "long keys": ("Orders", 0, _messages(b"x", keys="a" * 7999 + "é")),  # measured exactly
    "no born timestamp": ("Orders", 0, [Message("Orders", b"x", born_host=HOST)]),
    "unknown topic": ("Nope", 0, _messages(b"", topic="Nope")),
    "queue id": ("Orders", 4, _messages(b"x")),
    "queue before body": ("Orders", 9, _messages(b"x", b"")),
    "forbidden": ("ReadOnly", 0, _messages(b"x", topic="ReadOnly")),
    "no messages": ("Orders", 0, []),
    "empty body": ("Orders", 0, _messages(b"")),
    "empty body at 1": ("Orders", 0, _messages(b"x", b"")),
    "large body": ("Orders", 0, _messages(b"x", b"x" * 101)),
    "keys too long": ("Orders", 0, _messages(b"x") + _messages(b"x", keys="k" * 33_000)),
    "separator in keys": ("Orders", 0, _messages(b"x") + _messages(b"x", keys="a\x02b")),
    "pair mark in keys": ("Orders", 0, _messages(b"x") + _messages(b"x", keys="a\x01b")),
    "long ascii keys": ("Orders", 0, _messages(b"x") + _messages(b"x", keys="k" * 9000)),
    "batch bytes": ("Orders", 0, _messages(*[b"x" * 100] * 11)),
    "other topic": ("Orders", 0, _messages(b"x", topic="Other")),
}


def _columns(topic: str, messages: list[Message]) -> PlainColumns:
    return PlainColumns(
        messages[0].topic if messages else topic,
        [m.body for m in messages],
        [m.keys_value() for m in messages],
        [m.born_timestamp for m in messages],
        HOST,
    )


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[Broker, Broker]]:
    brokers = []
    for name in ("messages", "columns"):
        broker = Broker.open(
            tmp_path / name,
            STORE,
            config=BrokerConfig(dispatch_on_send=True, max_batch_bytes=1000),
            clock=FakeClock(NOW_MS),
        )
        for topic in ("Orders", "Other", "ReadOnly"):
            broker.admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
        broker.admin.update_topic("ReadOnly", perm=4)
        brokers.append(broker)
    yield brokers[0], brokers[1]
    for broker in brokers:
        broker.close()


def _outcome(broker: Broker, topic: str, queue_id: int, batch: object) -> tuple[object, ...]:
    try:
        r = broker.send(topic, batch, ToQueue(queue_id))[0]  # type: ignore[arg-type]
    except (MQError, ValueError) as exc:
        return (type(exc), str(exc), getattr(exc, "field", None), getattr(exc, "rule", None))
    return (r.status, r.topic, r.queue_id, r.queue_offset, r.broker_name, r.store_timestamp)


@pytest.mark.parametrize("stopped", [False, True])
def test_columns_send_as_their_messages(twins: tuple[Broker, Broker], stopped: bool) -> None:
    by_messages, by_columns = twins
    if stopped:
        by_messages.stop()
        by_columns.stop()
    outcomes = set()
    for name, (topic, queue_id, messages) in CASES.items():
        expected = _outcome(by_messages, topic, queue_id, messages)
        got = _outcome(by_columns, topic, queue_id, _columns(topic, messages))
        assert got == expected, name
        outcomes.add(expected[0])
        for q in range(4):
            stored = [_comparable(m) for m in _stored(by_columns, "Orders", q)]
            assert stored == [_comparable(m) for m in _stored(by_messages, "Orders", q)], name
        assert by_columns.status().put_total == by_messages.status().put_total, name
    if not stopped:  # the cases reach every kind of answer
        assert len(outcomes) >= 5
        assert by_columns.status().put_total == 13  # the seven batches stored
