"""Consumer offsets, lag (messages and ms), offset resets with dry run, list_offsets."""

from __future__ import annotations

import pytest

from mqcore.broker import Broker, OutgoingMessage, offsets_persist
from mqcore.clock import FakeClock
from mqcore.errors import NotFoundError, ValidationError
from tests.mqcore.broker.conftest import NOW_MS, BrokerFactory


def _send_spaced(broker: Broker, clock: FakeClock, count: int, queue_id: int = 0) -> None:
    """``count`` messages on one queue, stored 1 s apart from NOW_MS on."""
    for i in range(count):
        broker.send("Orders", [OutgoingMessage(f"m{i}".encode(), queue_id=queue_id)])
        clock.advance(1_000)


def test_lag_in_messages_and_ms(broker: Broker, clock: FakeClock) -> None:
    _send_spaced(broker, clock, 5)  # stored at NOW, NOW+1s, ... NOW+4s; clock now NOW+5s
    broker.commit_offset("G", "Orders", 0, 2)
    clock.advance(10_000)
    lag = broker.admin.group_lag("G")
    by_queue = {q.queue_id: q for q in lag.queues}
    assert sorted(by_queue) == [0, 1, 2, 3]
    q0 = by_queue[0]
    assert (q0.broker_offset, q0.consumer_offset, q0.lag) == (5, 2, 3)
    assert q0.oldest_unconsumed_timestamp == NOW_MS + 2_000
    assert q0.lag_ms == clock.now_ms() - (NOW_MS + 2_000) == 13_000
    assert (by_queue[1].lag, by_queue[1].lag_ms, by_queue[1].consumer_offset) == (0, 0, None)
    assert lag.total_lag == 3 and lag.max_lag_ms == 13_000 and q0.broker_name == "broker-a"

    broker.commit_offset("G", "Orders", 0, 5)
    caught_up = broker.admin.group_lag("G", "Orders").queues[0]
    assert (caught_up.lag, caught_up.lag_ms) == (0, 0)


def test_lag_of_a_queue_never_committed_counts_from_min(broker: Broker, clock: FakeClock) -> None:
    _send_spaced(broker, clock, 2, queue_id=3)
    broker.commit_offset("G", "Orders", 0, 0)
    q3 = broker.admin.group_lag("G").queues[3]
    assert (q3.consumer_offset, q3.lag) == (None, 2)


def test_offsets_are_persisted(make_broker: BrokerFactory) -> None:
    broker = make_broker()
    broker.admin.create_topic("Orders", read_queue_nums=2)
    broker.commit_offset("G", "Orders", 1, 7)
    assert broker.get_offsets("G") == {"Orders": {1: 7}}
    offsets_persist.step(broker)
    text = (broker.store.root / "config" / "consumerOffset.json").read_text()
    assert '"Orders@G":{1:7' in text
    broker.close()
    assert make_broker().get_offsets("G", "Orders") == {"Orders": {1: 7}}


def test_commit_checks(broker: Broker) -> None:
    with pytest.raises(NotFoundError):
        broker.commit_offset("G", "Nope", 0, 1)
    with pytest.raises(ValidationError) as info:
        broker.commit_offset("G", "Orders", 4, 1)
    assert (info.value.field, info.value.rule) == ("queue_id", "range")
    with pytest.raises(ValidationError) as info:
        broker.commit_offset("G", "Orders", 0, -3)  # -2, -1: Kafka's placeholders (issue 21)
    assert info.value.field == "offset"


def test_reset_earliest_latest_with_dry_run(broker: Broker, clock: FakeClock) -> None:
    _send_spaced(broker, clock, 4, queue_id=0)
    _send_spaced(broker, clock, 2, queue_id=1)
    broker.commit_offset("G", "Orders", 0, 3)

    plans = broker.admin.reset_offsets("G", "Orders", to="earliest", dry_run=True)
    assert [(p.queue_id, p.old_offset, p.new_offset, p.lag_before, p.lag_after) for p in plans] == [
        (0, 3, 0, 1, 4),
        (1, None, 0, 2, 2),
        (2, None, 0, 0, 0),
        (3, None, 0, 0, 0),
    ]
    assert broker.get_offsets("G", "Orders") == {"Orders": {0: 3}}  # the dry run changed nothing

    latest = broker.admin.reset_offsets("G", "Orders", to="latest")
    assert [(p.new_offset, p.lag_after) for p in latest[:2]] == [(4, 0), (2, 0)]
    assert broker.get_offsets("G", "Orders") == {"Orders": {0: 4, 1: 2, 2: 0, 3: 0}}


def test_reset_to_timestamp(broker: Broker, clock: FakeClock) -> None:
    _send_spaced(broker, clock, 5)  # NOW .. NOW+4s
    plans = broker.admin.reset_offsets("G", "Orders", timestamp_ms=NOW_MS + 2_500)
    assert plans[0].new_offset == 3  # first message stored at or after the time
    exact = broker.admin.reset_offsets("G", "Orders", timestamp_ms=NOW_MS + 2_000, dry_run=True)
    assert exact[0].new_offset == 2
    future = broker.admin.reset_offsets("G", "Orders", timestamp_ms=NOW_MS + 60_000, dry_run=True)
    assert future[0].new_offset == 5
    assert broker.get_offsets("G")["Orders"][0] == 3


def test_reset_explicit_offsets_are_clamped(broker: Broker, clock: FakeClock) -> None:
    _send_spaced(broker, clock, 3)
    plans = broker.admin.reset_offsets("G", "Orders", offsets={0: 1, 2: 50})
    assert [(p.queue_id, p.new_offset) for p in plans] == [(0, 1), (2, 0)]
    assert broker.get_offsets("G", "Orders")["Orders"] == {0: 1, 2: 0}


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({}, "one_target"),
        ({"to": "earliest", "timestamp_ms": 5}, "one_target"),
        ({"to": "middle"}, "choice"),
        ({"timestamp_ms": -1}, "range"),
        ({"offsets": {9: 1}}, "queue_range"),
        ({"offsets": {0: -1}}, "range"),
    ],
)
def test_reset_rules(broker: Broker, kwargs: dict[str, object], rule: str) -> None:
    with pytest.raises(ValidationError) as info:
        broker.admin.reset_offsets("G", "Orders", **kwargs)  # type: ignore[arg-type]
    assert info.value.rule == rule


def test_list_offsets(broker: Broker, clock: FakeClock) -> None:
    _send_spaced(broker, clock, 3)
    assert broker.list_offsets("Orders", 0, "earliest") == 0
    assert broker.list_offsets("Orders", 0, "latest") == 3
    assert broker.list_offsets("Orders", 0, NOW_MS + 1_000) == 1
    assert broker.list_offsets("Orders", 0, NOW_MS + 99_000) == 3
    assert broker.list_offsets("Orders", 1, NOW_MS) == 0
    with pytest.raises(ValidationError):
        broker.list_offsets("Orders", 0, -5)
    with pytest.raises(ValidationError):
        broker.list_offsets("Orders", 9, "latest")
