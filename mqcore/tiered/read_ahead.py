"""Read-ahead cache for sequential cold reads (spec 10: RocketMQ's read-ahead cache, 4096
messages / 16 MiB, entries expire 15 s after they were read).

A cold read fetches more than it was asked for (``read_ahead_batch`` messages); the rest
waits here, keyed by queue and offset, for the consumer's next pull, which then costs no
backend read. Bounded by message count and bytes (oldest insert evicted first) and by age.
Thread-safe (one lock).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from mqcore.clock import Clock
from mqcore.store.consume_queue import Unit

_Key = tuple[str, int, int]


class ReadAheadCache:
    """``(topic, queue_id, queue_offset) -> (unit, record)`` with count, byte and age bounds."""

    def __init__(self, clock: Clock, max_count: int, max_bytes: int, expire_ms: int) -> None:
        self.clock = clock
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.expire_ms = expire_ms
        self.hits = 0
        self.misses = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[_Key, tuple[Unit, bytes, int]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def put(self, topic: str, queue_id: int, entries: list[tuple[Unit, bytes]]) -> None:
        """Cache records read ahead (evicting the oldest past the bounds)."""
        if not self.max_count or not self.max_bytes:
            return
        expires = self.clock.now_ms() + self.expire_ms
        with self._lock:
            for unit, raw in entries:
                key = (topic, queue_id, unit.queue_offset)
                old = self._entries.pop(key, None)
                if old is not None:
                    self._bytes -= len(old[1])
                self._entries[key] = (unit, raw, expires)
                self._bytes += len(raw)
            while self._entries and (
                len(self._entries) > self.max_count or self._bytes > self.max_bytes
            ):
                _, (_, raw, _) = self._entries.popitem(last=False)
                self._bytes -= len(raw)

    def take(
        self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int
    ) -> list[tuple[Unit, bytes]]:
        """Consecutive cached records from ``offset`` (removed from the cache: a consumer
        reads an offset once), at most ``max_count`` and, past the first, ``max_bytes``.
        Empty on a miss."""
        now = self.clock.now_ms()
        out: list[tuple[Unit, bytes]] = []
        total = 0
        with self._lock:
            while len(out) < max_count:
                key = (topic, queue_id, offset + len(out))
                found = self._entries.get(key)
                if found is None:
                    break
                unit, raw, expires = found
                if expires < now or (out and total + len(raw) > max_bytes):
                    if expires < now:
                        del self._entries[key]
                        self._bytes -= len(raw)
                    break
                del self._entries[key]
                self._bytes -= len(raw)
                out.append((unit, raw))
                total += len(raw)
            if out:
                self.hits += 1
            else:
                self.misses += 1
        return out
