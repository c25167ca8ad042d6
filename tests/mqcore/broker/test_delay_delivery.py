"""Delay levels (spec 9): parked in SCHEDULE_TOPIC_XXXX, delivered only when due."""

from __future__ import annotations

from mqcore.broker import Broker, OutgoingMessage, PullStatus, delay_delivery, offsets_persist
from mqcore.clock import FakeClock
from mqcore.metadata.topics import SCHEDULE_TOPIC
from tests.mqcore.broker.conftest import BrokerFactory


def _delivered(broker: Broker) -> int:
    return int(delay_delivery.step(broker).detail["delivered"])


def test_delivered_only_when_due(broker: Broker, clock: FakeClock) -> None:
    (sent,) = broker.send(
        "Orders", [OutgoingMessage(b"later", tag="T", keys=["k"], queue_id=1, delay_level=3)]
    )
    assert sent.delayed and (sent.topic, sent.queue_id) == ("Orders", 1)
    assert broker.store.max_offset(SCHEDULE_TOPIC, 2) == 1  # level 3 -> queue 2
    assert broker.pull("g", "Orders", 1, 0).status is PullStatus.NO_NEW_MSG

    assert _delivered(broker) == 0
    clock.advance(9_999)
    assert _delivered(broker) == 0
    clock.advance(1)
    assert _delivered(broker) == 1

    result = broker.pull("g", "Orders", 1, 0)
    (message,) = result.messages
    assert message.body == b"later" and message.tags == "T" and message.keys == ("k",)
    assert message.msg_id == sent.msg_id  # the UNIQ_KEY survives the move
    assert "DELAY" not in message.properties
    assert message.properties["REAL_TOPIC"] == "Orders" and message.properties["REAL_QID"] == "1"
    assert message.store_timestamp == clock.now_ms()
    assert broker.metadata.delay_offsets.get(3) == 1
    assert _delivered(broker) == 0  # never twice


def test_levels_are_independent_and_clamped(broker: Broker, clock: FakeClock) -> None:
    broker.send("Orders", [OutgoingMessage(b"2h", queue_id=0, delay_level=99)])
    broker.send("Orders", [OutgoingMessage(b"1s", queue_id=0, delay_level=1)])
    assert broker.store.max_offset(SCHEDULE_TOPIC, 17) == 1  # clamped to level 18
    clock.advance(1_000)
    assert _delivered(broker) == 1
    assert [m.body for m in broker.pull("g", "Orders", 0, 0).messages] == [b"1s"]
    clock.advance(2 * 3_600_000)
    assert _delivered(broker) == 1
    assert [m.body for m in broker.pull("g", "Orders", 0, 1).messages] == [b"2h"]


def test_due_messages_are_delivered_in_order_up_to_a_budget(
    broker: Broker, clock: FakeClock
) -> None:
    broker.send(
        "Orders", [OutgoingMessage(bytes([i]), queue_id=0, delay_level=1) for i in range(5)]
    )
    clock.advance(1_000)
    first = delay_delivery.step(broker, max_messages=3)
    assert first.detail["delivered"] == 3 and first.progressed
    assert _delivered(broker) == 2
    assert [m.body for m in broker.pull("g", "Orders", 0, 0).messages] == [
        bytes([i]) for i in range(5)
    ]


def test_progress_survives_a_restart(make_broker: BrokerFactory, clock: FakeClock) -> None:
    broker = make_broker()
    broker.admin.create_topic("Orders", read_queue_nums=1)
    broker.send(
        "Orders", [OutgoingMessage(b"a", delay_level=1), OutgoingMessage(b"b", delay_level=2)]
    )
    clock.advance(1_000)
    assert _delivered(broker) == 1
    offsets_persist.step(broker)
    broker.close()

    again = make_broker()
    assert again.metadata.delay_offsets.get(1) == 1
    clock.advance(4_000)
    assert _delivered(again) == 1  # only level 2's message; level 1 is not redelivered
    assert [m.body for m in again.pull("g", "Orders", 0, 0).messages] == [b"a", b"b"]
