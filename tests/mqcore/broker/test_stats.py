"""Per-second rates over the last minute."""

from __future__ import annotations

from mqcore.broker.stats import RateCounter
from mqcore.clock import FakeClock


def test_rate_over_the_last_minute() -> None:
    clock = FakeClock(1_000_000)
    counter = RateCounter(clock)
    for _ in range(60):
        counter.add(2)
        clock.advance(1_000)
    assert counter.rate() == 2.0
    counter.add(100)  # the current second is not counted yet
    assert counter.rate() == 2.0
    clock.advance(1_000)
    assert counter.rate() == (59 * 2 + 100) / 60
    clock.advance(120_000)
    assert counter.rate() == 0.0
    assert counter.total == 220


def test_totals_by_key_add_up_to_the_total_and_outlive_the_window() -> None:
    clock = FakeClock(1_000_000)
    counter = RateCounter(clock)
    counter.add(3, "orders")
    counter.add(2, "payments")
    clock.advance(120_000)  # long past the rate's window: totals are since start
    counter.add(4, "orders")
    counter.add(5)  # no key: the total only
    assert counter.totals_by_key() == {"orders": 7, "payments": 2}
    assert counter.total == 14
    copy = counter.totals_by_key()
    copy["orders"] = 0  # a copy: the counter's own totals are not changed through it
    assert counter.totals_by_key()["orders"] == 7
