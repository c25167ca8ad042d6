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
