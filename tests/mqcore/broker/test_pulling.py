"""Pull: checks of spec 11 (pull side), status mapping of spec 7.1, tag filters."""

from __future__ import annotations

import pytest

from mqcore.broker import Broker, NoPermissionError, OutgoingMessage, PullStatus
from mqcore.errors import NotFoundError, ValidationError
from mqcore.format.hashing import java_string_hash
from tests.mqcore.broker.conftest import BrokerFactory


def _send(broker: Broker, *tags: str | None, queue_id: int = 0) -> None:
    broker.send(
        "Orders",
        [
            OutgoingMessage(f"{i}:{t}".encode(), tag=t, queue_id=queue_id)
            for i, t in enumerate(tags)
        ],
    )


def test_found_and_next_offset(broker: Broker) -> None:
    _send(broker, "A", "B", "C")
    result = broker.pull("g", "Orders", 0, 0, max_count=2)
    assert result.status is PullStatus.FOUND
    assert [m.queue_offset for m in result.messages] == [0, 1]
    assert (result.next_offset, result.min_offset, result.max_offset) == (2, 0, 3)
    rest = broker.pull("g", "Orders", 0, result.next_offset)
    assert [m.tags for m in rest.messages] == ["C"]


def test_statuses(broker: Broker) -> None:
    assert broker.pull("g", "Orders", 1, 0).status is PullStatus.NO_NEW_MSG  # empty queue
    assert broker.pull("g", "Orders", 1, 5).status is PullStatus.OFFSET_ILLEGAL
    _send(broker, "A")
    at_end = broker.pull("g", "Orders", 0, 1)
    assert (at_end.status, at_end.next_offset) == (PullStatus.NO_NEW_MSG, 1)
    beyond = broker.pull("g", "Orders", 0, 7)
    assert (beyond.status, beyond.next_offset) == (PullStatus.OFFSET_ILLEGAL, 1)


def test_max_bytes_returns_at_least_one(broker: Broker) -> None:
    broker.send("Orders", [OutgoingMessage(b"x" * 100, queue_id=0) for _ in range(3)])
    assert len(broker.pull("g", "Orders", 0, 0, max_bytes=1).messages) == 1


def test_read_forbidden_topic_is_refused(broker: Broker) -> None:
    broker.admin.update_topic("Orders", perm=2)
    with pytest.raises(NoPermissionError) as info:
        broker.pull("g", "Orders", 0, 0)
    assert (info.value.field, info.value.rule) == ("topic", "topic_not_readable")


def test_broker_without_read_perm(make_broker: BrokerFactory) -> None:
    broker = make_broker(broker_perm=2)
    with pytest.raises(NoPermissionError) as info:
        broker.pull("g", "TBW102", 0, 0)
    assert info.value.rule == "broker_not_readable"


def test_group_checks(make_broker: BrokerFactory) -> None:
    broker = make_broker(metadata_options={"auto_create_subscription_group": False})
    broker.admin.create_topic("T", read_queue_nums=1)
    with pytest.raises(NotFoundError) as info:
        broker.pull("unknown", "T", 0, 0)
    assert (info.value.field, info.value.rule) == ("group", "not_found")
    broker.admin.create_group("off", consume_enable=False)
    with pytest.raises(NoPermissionError) as perm:
        broker.pull("off", "T", 0, 0)
    assert perm.value.rule == "consume_disabled"
    assert broker.pull(None, "T", 0, 0).status is PullStatus.NO_NEW_MSG  # group-less reader


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queue_id": 4}, "queue_id"),
        ({"offset": -1}, "offset"),
        ({"max_count": 0}, "max_count"),
        ({"max_count": 5000}, "max_count"),
        ({"wait_ms": -1}, "wait_ms"),
        ({"max_bytes": 0}, "max_bytes"),
    ],
)
def test_argument_ranges(broker: Broker, kwargs: dict[str, int], field: str) -> None:
    args = {"queue_id": 0, "offset": 0} | kwargs
    queue_id, offset = args.pop("queue_id"), args.pop("offset")
    with pytest.raises(ValidationError) as info:
        broker.pull("g", "Orders", queue_id, offset, **args)  # type: ignore[arg-type]
    assert (info.value.field, info.value.rule) == (field, "range")


def test_unknown_topic(broker: Broker) -> None:
    with pytest.raises(NotFoundError):
        broker.pull("g", "Nope", 0, 0)


def test_tag_expressions(broker: Broker) -> None:
    _send(broker, "A", "B", None, "C", "A")
    every = broker.pull("g", "Orders", 0, 0, tag_expression="*")
    assert [m.tags for m in every.messages] == ["A", "B", None, "C", "A"]
    some = broker.pull("g", "Orders", 0, 0, tag_expression="A || C")
    assert [m.tags for m in some.messages] == ["A", "C", "A"]
    assert some.next_offset == 5
    spaced = broker.pull("g", "Orders", 0, 0, tag_expression=" B ||")
    assert [m.tags for m in spaced.messages] == ["B"]


def test_forced_hash_collision_is_rechecked(broker: Broker) -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")
    _send(broker, "BB", "Aa", "BB")
    result = broker.pull("g", "Orders", 0, 0, tag_expression="Aa")
    assert [m.tags for m in result.messages] == ["Aa"]
    only_collisions = broker.pull("g", "Orders", 0, 2, tag_expression="Aa")
    # The store matched by code; the re-check dropped it; the queue end was reached.
    assert (only_collisions.status, only_collisions.messages) == (PullStatus.NO_NEW_MSG, ())
    assert only_collisions.next_offset == 3


def test_filtered_scan_crosses_consume_queue_files(broker: Broker) -> None:
    # 32 units per ConsumeQueue file in the test config: the match sits in the third file.
    _send(broker, *(["X"] * 70 + ["Wanted"]))
    result = broker.pull("g", "Orders", 0, 0, tag_expression="Wanted")
    assert [m.queue_offset for m in result.messages] == [70]


def test_tag_expression_without_tags(broker: Broker) -> None:
    with pytest.raises(ValidationError) as info:
        broker.pull("g", "Orders", 0, 0, tag_expression="||")
    assert info.value.rule == "no_tags"
