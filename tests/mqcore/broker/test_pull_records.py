"""Broker.pull_records: the group-less pull of raw record views, with pull's checks and
status mapping."""

from __future__ import annotations

import pytest

from mqcore.broker import Broker, NoPermissionError, OutgoingMessage, PullStatus
from mqcore.errors import NotFoundError, ValidationError


def test_views_match_what_pull_returns(broker: Broker) -> None:
    broker.send("Orders", [OutgoingMessage(f"m{i}".encode(), queue_id=0) for i in range(5)])
    status, got = broker.pull_records("Orders", 0, 1, 3, 1 << 20)
    pulled = broker.pull(None, "Orders", 0, 1, 3)
    assert status is pulled.status is PullStatus.FOUND
    assert [v.queue_offset for v in got.records] == [1, 2, 3]
    assert [v.message() for v in got.records] == list(pulled.messages)
    assert (got.next_offset, got.min_offset, got.max_offset) == (4, 0, 5)


def test_statuses_are_pulls(broker: Broker) -> None:
    assert broker.pull_records("Orders", 1, 0, 32, 1 << 20)[0] is PullStatus.NO_NEW_MSG
    assert broker.pull_records("Orders", 1, 5, 32, 1 << 20)[0] is PullStatus.OFFSET_ILLEGAL
    broker.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
    status, got = broker.pull_records("Orders", 0, 1, 32, 1 << 20)
    assert (status, got.next_offset, got.records) == (PullStatus.NO_NEW_MSG, 1, [])
    assert broker.pull_records("Orders", 0, 7, 32, 1 << 20)[0] is PullStatus.OFFSET_ILLEGAL


def test_max_bytes_returns_at_least_one(broker: Broker) -> None:
    broker.send("Orders", [OutgoingMessage(b"x" * 100, queue_id=0) for _ in range(3)])
    assert len(broker.pull_records("Orders", 0, 0, 32, 1)[1].records) == 1


def test_checks_are_pulls(broker: Broker) -> None:
    with pytest.raises(NotFoundError):
        broker.pull_records("Nope", 0, 0, 32, 1 << 20)
    with pytest.raises(ValidationError) as info:
        broker.pull_records("Orders", 4, 0, 32, 1 << 20)
    assert info.value.field == "queue_id"
    with pytest.raises(ValidationError):
        broker.pull_records("Orders", 0, -1, 32, 1 << 20)
    with pytest.raises(ValidationError):
        broker.pull_records("Orders", 0, 0, broker.config.max_pull_count + 1, 1 << 20)
    broker.admin.update_topic("Orders", perm=2)
    with pytest.raises(NoPermissionError) as refused:
        broker.pull_records("Orders", 0, 0, 32, 1 << 20)
    assert refused.value.rule == "topic_not_readable"
