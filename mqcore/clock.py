"""Time, injected.

Every component that needs the time takes a :class:`Clock`, so tests drive time with
:class:`FakeClock` instead of sleeping (Kafka's ``MockTime``).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What the store and the services ask of time."""

    def now_ms(self) -> int:
        """Wall-clock time in epoch milliseconds (store timestamps, file ages)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, deadlines)."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to. Thread-safe."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono = 0.0
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, ms: int) -> None:
        """Move both clocks forward by ``ms`` milliseconds."""
        if ms < 0:
            raise ValueError("a FakeClock only moves forward")
        with self._lock:
            self._now_ms += ms
            self._mono += ms / 1000.0

    def set(self, now_ms: int) -> None:
        """Jump the wall clock (the monotonic clock follows by the same amount if forward)."""
        with self._lock:
            if now_ms > self._now_ms:
                self._mono += (now_ms - self._now_ms) / 1000.0
            self._now_ms = now_ms
