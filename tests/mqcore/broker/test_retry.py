"""Retry and dead letters (spec 9): %RETRY%<group> after the level's delay, then %DLQ%<group>
after retry_max_times, and resending a dead letter to its original topic."""

from __future__ import annotations

import pytest

from mqcore.broker import (
    Broker,
    NoPermissionError,
    OutgoingMessage,
    PullStatus,
    SendBackAction,
    delay_delivery,
)
from mqcore.clock import FakeClock
from mqcore.errors import NotFoundError
from mqcore.message import MessageExt
from mqcore.metadata.topics import SCHEDULE_TOPIC


def _only(broker: Broker, group: str, topic: str, offset: int) -> MessageExt:
    result = broker.pull(group, topic, 0, offset)
    assert result.status is PullStatus.FOUND, result
    (message,) = result.messages
    return message


def test_retry_then_dlq_then_resend(broker: Broker, clock: FakeClock) -> None:
    broker.admin.create_group("G", retry_max_times=2)
    (sent,) = broker.send("Orders", [OutgoingMessage(b"work", tag="T", queue_id=0)])
    first = _only(broker, "G", "Orders", 0)

    # Failure 1: level 3 + 0 = 10 s, parked in SCHEDULE_TOPIC_XXXX for %RETRY%G.
    back = broker.send_back("G", first.offset_msg_id)
    assert (back.action, back.reconsume_times, back.delay_level) == (SendBackAction.RETRY, 1, 3)
    assert back.send is not None and back.send.delayed and back.send.topic == "%RETRY%G"
    retry_topic = broker.admin.get_topic("%RETRY%G")
    assert (retry_topic.read_queue_nums, retry_topic.perm) == (1, 6)
    clock.advance(9_999)
    delay_delivery.step(broker)
    assert broker.pull("G", "%RETRY%G", 0, 0).status is PullStatus.NO_NEW_MSG
    clock.advance(1)
    delay_delivery.step(broker)
    retry1 = _only(broker, "G", "%RETRY%G", 0)
    assert retry1.reconsume_times == 1 and retry1.body == b"work" and retry1.tags == "T"
    assert retry1.msg_id == sent.msg_id
    assert retry1.properties["RETRY_TOPIC"] == "Orders"
    assert retry1.properties["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id
    assert retry1.born_timestamp == first.born_timestamp

    # Failure 2 (by msgId this time): level 3 + 1 = 30 s.
    back = broker.send_back("G", sent.msg_id)
    assert (back.action, back.reconsume_times, back.delay_level) == (SendBackAction.RETRY, 2, 4)
    clock.advance(30_000)
    delay_delivery.step(broker)
    retry2 = _only(broker, "G", "%RETRY%G", 1)
    assert retry2.reconsume_times == 2
    assert retry2.properties["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id  # kept, not replaced

    # Failure 3: reconsume_times (2) >= retry_max_times (2): dead letter, not delayed.
    back = broker.send_back("G", retry2.offset_msg_id)
    assert (back.action, back.reconsume_times, back.delay_level) == (SendBackAction.DLQ, 3, 0)
    dlq_topic = broker.admin.get_topic("%DLQ%G")
    assert (dlq_topic.read_queue_nums, dlq_topic.perm, dlq_topic.kind) == (1, 6, "dlq")
    dead = _only(broker, "G", "%DLQ%G", 0)
    assert dead.reconsume_times == 3 and dead.msg_id == sent.msg_id
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == "Orders"

    # Resend: a fresh copy in Orders with the same msgId.
    resent = broker.resend_from_dlq("G", dead.offset_msg_id)
    assert resent.topic == "Orders" and resent.msg_id == sent.msg_id
    copy = broker.get_message(resent.offset_msg_id)
    assert copy is not None and copy.reconsume_times == 0 and copy.body == b"work"
    assert "RETRY_TOPIC" not in copy.properties and copy.tags == "T"


def test_negative_level_goes_straight_to_dlq(broker: Broker) -> None:
    (sent,) = broker.send("Orders", [OutgoingMessage(b"poison")])
    back = broker.send_back("G", sent.offset_msg_id, delay_level=-1)
    assert back.action is SendBackAction.DLQ
    assert _only(broker, "G", "%DLQ%G", 0).body == b"poison"


def test_explicit_level_and_max_override(broker: Broker) -> None:
    (sent,) = broker.send("Orders", [OutgoingMessage(b"m")])
    back = broker.send_back("G", sent.offset_msg_id, delay_level=1)
    assert back.delay_level == 1 and broker.store.max_offset(SCHEDULE_TOPIC, 0) == 1
    back = broker.send_back("G", sent.offset_msg_id, max_reconsume_times=0)
    assert back.action is SendBackAction.DLQ


def test_group_without_retry_queues_drops(broker: Broker) -> None:
    broker.admin.create_group("NoRetry", retry_queue_nums=0)
    (sent,) = broker.send("Orders", [OutgoingMessage(b"m")])
    back = broker.send_back("NoRetry", sent.offset_msg_id)
    assert (back.action, back.send) == (SendBackAction.DROPPED, None)


def test_unknown_message(broker: Broker) -> None:
    with pytest.raises(NotFoundError) as info:
        broker.send_back("G", "0" * 32)
    assert info.value.field == "msg_id"


def test_read_only_retry_topic_is_refused(broker: Broker) -> None:
    (sent,) = broker.send("Orders", [OutgoingMessage(b"m")])
    broker.send_back("G", sent.offset_msg_id)  # creates %RETRY%G
    broker.admin.update_topic("%RETRY%G", perm=4)
    with pytest.raises(NoPermissionError) as info:
        broker.send_back("G", sent.offset_msg_id)
    assert info.value.field == "retry_topic"


def test_resend_errors(broker: Broker) -> None:
    with pytest.raises(NotFoundError) as info:
        broker.resend_from_dlq("G", "whatever")
    assert info.value.rule == "no_dlq"
    (sent,) = broker.send("Orders", [OutgoingMessage(b"m")])
    broker.send_back("G", sent.offset_msg_id, delay_level=-1)
    with pytest.raises(NotFoundError) as info:
        broker.resend_from_dlq("G", sent.offset_msg_id)  # the original, not the DLQ record
    assert info.value.rule == "not_in_dlq"
