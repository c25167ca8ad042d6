"""Time-range browse across the queues of a topic, page by page with a cursor."""

from __future__ import annotations

import pytest

from mqcore.broker import Broker, OutgoingMessage
from mqcore.broker.browse import encode_cursor
from mqcore.clock import FakeClock
from mqcore.errors import NotFoundError, ValidationError
from tests.mqcore.broker.conftest import NOW_MS


def _fill(broker: Broker, clock: FakeClock) -> None:
    """40 messages, 100 ms apart, spread over the 4 queues in a scrambled order."""
    for i in range(40):
        broker.send("Orders", [OutgoingMessage(f"{i:02d}".encode(), queue_id=(i * 3) % 4)])
        clock.advance(100)


def _browse_all(broker: Broker, begin: int, end: int, limit: int) -> tuple[list[bytes], int]:
    bodies: list[bytes] = []
    cursor = None
    pages = 0
    while True:
        page = broker.browse("Orders", begin, end, limit, cursor)
        pages += 1
        bodies += [m.body for m in page.messages]
        assert len(page.messages) <= limit
        if page.exhausted:
            assert page.next_cursor is None
            return bodies, pages
        assert page.next_cursor is not None
        cursor = page.next_cursor


def test_pages_until_exhausted_in_store_time_order(broker: Broker, clock: FakeClock) -> None:
    _fill(broker, clock)
    bodies, pages = _browse_all(broker, NOW_MS, NOW_MS + 10_000, limit=7)
    assert bodies == [f"{i:02d}".encode() for i in range(40)]
    assert pages == 6


def test_range_bounds_are_inclusive(broker: Broker, clock: FakeClock) -> None:
    _fill(broker, clock)
    bodies, _ = _browse_all(broker, NOW_MS + 500, NOW_MS + 1_200, limit=3)
    assert bodies == [f"{i:02d}".encode() for i in range(5, 13)]


def test_empty_range_is_exhausted_at_once(broker: Broker, clock: FakeClock) -> None:
    _fill(broker, clock)
    page = broker.browse("Orders", NOW_MS - 10_000, NOW_MS - 1, 10)
    assert page.messages == () and page.exhausted and page.next_cursor is None


def test_cursor_checks(broker: Broker, clock: FakeClock) -> None:
    _fill(broker, clock)
    first = broker.browse("Orders", NOW_MS, NOW_MS + 10_000, 5)
    assert first.next_cursor is not None
    with pytest.raises(ValidationError) as info:
        broker.browse("Orders", NOW_MS, NOW_MS + 9_000, 5, first.next_cursor)
    assert (info.value.field, info.value.rule) == ("cursor", "mismatch")
    with pytest.raises(ValidationError) as info:
        broker.browse("Orders", NOW_MS, NOW_MS + 10_000, 5, "not-a-cursor!")
    assert info.value.rule == "invalid"
    other = encode_cursor("Other", NOW_MS, NOW_MS + 10_000, {0: 1})
    with pytest.raises(ValidationError):
        broker.browse("Orders", NOW_MS, NOW_MS + 10_000, 5, other)


def test_argument_checks(broker: Broker) -> None:
    with pytest.raises(NotFoundError):
        broker.browse("Nope", 0, 1)
    with pytest.raises(ValidationError) as info:
        broker.browse("Orders", 5, 1)
    assert info.value.rule == "before_end"
    with pytest.raises(ValidationError) as info:
        broker.browse("Orders", 0, 1, limit=0)
    assert (info.value.field, info.value.rule) == ("limit", "range")
