"""Per-second counters averaged over the last minute (messages put / got per second).

A counter also keeps its total since start per key (the broker keys gets by topic: the
messages delivered per topic that ``/metrics`` exposes), under the same lock as the
buckets, so counting by key costs one dict update, not a second lock.

One-second buckets in a ring of 61 (the 60 seconds averaged plus the current one), indexed by
``now_ms // 1000``; a bucket is reset when its second comes round again. ``rate()`` averages the 60 seconds before the current one, so
a half-filled current second does not pull the figure down. Thread-safe.
"""

from __future__ import annotations

import threading

from mqcore.clock import Clock

WINDOW_S = 60
_SLOTS = WINDOW_S + 1


class RateCounter:
    """Counts events and reports events per second over the last :data:`WINDOW_S` seconds."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._counts = [0] * _SLOTS
        self._seconds = [-1] * _SLOTS
        self._by_key: dict[str, int] = {}
        self.total = 0

    def add(self, count: int = 1, key: str | None = None) -> None:
        """Count ``count`` events now, and towards ``key``'s total when one is given."""
        second = self._clock.now_ms() // 1000
        slot = second % _SLOTS
        with self._lock:
            if self._seconds[slot] != second:
                self._seconds[slot] = second
                self._counts[slot] = 0
            self._counts[slot] += count
            self.total += count
            if key is not None:
                self._by_key[key] = self._by_key.get(key, 0) + count

    def totals_by_key(self) -> dict[str, int]:
        """Each key's total since start (a copy)."""
        with self._lock:
            return dict(self._by_key)

    def rate(self) -> float:
        """Events per second over the 60 whole seconds before the current one."""
        now = self._clock.now_ms() // 1000
        with self._lock:
            total = sum(
                count
                for count, second in zip(self._counts, self._seconds, strict=True)
                if now - WINDOW_S <= second < now
            )
        return total / WINDOW_S
