"""BrokerAdmin (``broker.admin``): topic and group administration, queue status."""

from __future__ import annotations

import pytest

from mqcore.broker import Broker, OutgoingMessage, PullStatus
from mqcore.clock import FakeClock
from mqcore.errors import ConflictError, NotFoundError, ValidationError


def test_topic_lifecycle(broker: Broker) -> None:
    info = broker.admin.create_topic(
        "Payments", write_queue_nums=2, attributes={"message.type": "NORMAL"}
    )
    assert (info.read_queue_nums, info.write_queue_nums, info.perm, info.kind) == (
        2,
        2,
        6,
        "normal",
    )
    assert info.readable and info.writable and info.broker_name == "broker-a"
    assert broker.admin.create_topic("Defaults").read_queue_nums == 8
    with pytest.raises(ConflictError):
        broker.admin.create_topic("Payments")
    with pytest.raises(ValidationError) as info_error:
        broker.admin.create_topic("SCHEDULE_TOPIC_XXXX")
    assert info_error.value.rule == "system_topic"
    with pytest.raises(ValidationError):
        broker.admin.create_topic("Bad", read_queue_nums=0)

    assert broker.admin.update_topic("Payments", perm=4).perm == 4
    with pytest.raises(ValidationError) as unknown:
        broker.admin.update_topic("Payments", colour="red")
    assert unknown.value.rule == "unknown_field"

    names = [t.name for t in broker.admin.list_topics(include_system=False)]
    assert names == ["Defaults", "Orders", "Payments"]
    assert "TBW102" in [t.name for t in broker.admin.list_topics()]
    persisted = (broker.store.root / "config" / "topics.json").read_text()
    assert '"Payments"' in persisted


def test_delete_topic_removes_queues_and_offsets(broker: Broker) -> None:
    broker.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
    broker.commit_offset("G", "Orders", 0, 1)
    broker.admin.delete_topic("Orders")
    with pytest.raises(NotFoundError):
        broker.admin.get_topic("Orders")
    assert broker.get_offsets("G") == {}
    assert broker.store.queues.queues("Orders") == {}
    broker.admin.create_topic("Orders", read_queue_nums=1)
    assert broker.pull("G", "Orders", 0, 0).status is PullStatus.NO_NEW_MSG


def test_topic_and_queue_status(broker: Broker, clock: FakeClock) -> None:
    broker.send("Orders", [OutgoingMessage(b"a", queue_id=1)])
    clock.advance(500)
    broker.send("Orders", [OutgoingMessage(b"b", queue_id=1)])
    status = broker.admin.topic_status("Orders")
    assert [q.queue_id for q in status.queues] == [0, 1, 2, 3]
    q1 = status.queues[1]
    assert (q1.min_offset, q1.max_offset, q1.last_store_timestamp) == (0, 2, clock.now_ms())
    assert status.queues[0].last_store_timestamp == 0
    assert status.message_count == 2
    assert broker.admin.queue_status("Orders", 1) == q1
    with pytest.raises(ValidationError):
        broker.admin.queue_status("Orders", -1)


def test_group_lifecycle(broker: Broker) -> None:
    group = broker.admin.create_group("Billing", retry_max_times=5)
    assert (group.retry_max_times, group.retry_queue_nums, group.consume_enable) == (5, 1, True)
    assert not group.system and group.group_retry_policy == {"type": "CUSTOMIZED"}
    with pytest.raises(ValidationError) as unknown:
        broker.admin.create_group("Other", colour="red")
    assert unknown.value.rule == "unknown_field"
    with pytest.raises(ConflictError):
        broker.admin.create_group("Billing")
    assert not broker.admin.update_group("Billing", consume_enable=False).consume_enable
    broker.commit_offset("Billing", "Orders", 0, 0)
    assert broker.admin.get_group("Billing").topics == ("Orders",)
    assert "TOOLS_CONSUMER" in [g.name for g in broker.admin.list_groups()]
    broker.admin.delete_group("Billing")
    with pytest.raises(NotFoundError):
        broker.admin.get_group("Billing")
    assert broker.get_offsets("Billing") == {}
    with pytest.raises(ValidationError):
        broker.admin.delete_group("TOOLS_CONSUMER")
