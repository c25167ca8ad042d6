"""Recently produced record batches, kept to answer Fetch without rebuilding them.

A Produce stores a batch as individual messages (one per record, so the console and key
lookups see each), and a Fetch normally rebuilds a batch from those messages: a store
read and decode per message, then a record encode. Consumers mostly read what was just
produced, so the listener keeps the produced batch bytes, with ``base_offset`` set to
the first stored offset (not covered by the CRC, so the batch stays valid), and serves
them as they are, which is what Kafka itself does with its log.

What makes it safe:

* An entry covers exactly the offsets its records were stored at: ``Broker.send``
  appends a batch contiguously, so records ``[base, end)`` are the batch's records and
  nothing else. Records the store got another way (REST, RocketMQ) are never cached.
* A hit is checked against the store before it is served (``handlers/fetch.py``): the
  message at ``base`` must still be the one the Produce stored (its ``UNIQ_KEY``), and
  ``end`` must not pass the queue's max offset. A queue whose offsets started again, or
  files removed by retention, fail that check; the queue's entries are then dropped and
  the Fetch reads the store. Entries that follow a checked one are served unchecked
  when they were put after it (see :meth:`BatchCache.run`): one store read per fetch,
  however small the batches.
* Entries of one queue never overlap: a new entry overlapping an old one means the
  queue's offsets started again, and the old entries go.
* Memory is bounded: ``max_bytes`` in all, oldest entries evicted first.

Thread-safety: every method takes the cache's lock (Produce and Fetch run in worker
threads).
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from dataclasses import dataclass

QueueKey = tuple[str, int]


@dataclass(frozen=True, slots=True, eq=False)
class CachedBatch:
    """One stored batch: records ``[base, end)``, ``data`` the batch with ``base_offset``
    = ``base``; ``first_id`` the UNIQ_KEY the store gave the message at ``base``."""

    base: int
    end: int
    data: bytes
    first_id: str
    compression: int


class _Queue:
    __slots__ = ("bases", "entries", "serials")

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.entries: list[CachedBatch] = []
        self.serials: list[int] = []  # insertion order, see BatchCache.run

    def index_of(self, entry: CachedBatch) -> int:
        i = bisect.bisect_left(self.bases, entry.base)
        if i < len(self.entries) and self.entries[i] is entry:
            return i
        return -1


class BatchCache:
    """Produced batches by ``(store topic, queue id)``, at most ``max_bytes`` in all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._queues: dict[QueueKey, _Queue] = {}
        self._order: deque[tuple[QueueKey, CachedBatch]] = deque()  # oldest first
        self._bytes = 0
        self._serial = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def put(self, topic: str, queue_id: int, entry: CachedBatch) -> None:
        """Keep a stored batch (drops the queue's entries it overlaps: see module doc)."""
        size = len(entry.data)
        if size > self.max_bytes or entry.end <= entry.base:
            return
        key = (topic, queue_id)
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue()
            i = bisect.bisect_left(queue.bases, entry.base)
            if (i > 0 and queue.entries[i - 1].end > entry.base) or (
                i < len(queue.bases) and queue.bases[i] < entry.end
            ):
                self._drop_locked(key)
                queue = self._queues[key] = _Queue()
                i = 0
            self._serial += 1
            queue.bases.insert(i, entry.base)
            queue.entries.insert(i, entry)
            queue.serials.insert(i, self._serial)
            self._order.append((key, entry))
            self._bytes += size
            while self._bytes > self.max_bytes and self._order:
                old_key, old = self._order.popleft()
                old_queue = self._queues.get(old_key)
                j = old_queue.index_of(old) if old_queue is not None else -1
                if old_queue is not None and j >= 0:
                    del old_queue.bases[j]
                    del old_queue.entries[j]
                    del old_queue.serials[j]
                    self._bytes -= len(old.data)
                    if not old_queue.entries:
                        del self._queues[old_key]

    def run(
        self, topic: str, queue_id: int, offset: int, max_bytes: int, max_records: int
    ) -> list[tuple[CachedBatch, bool]]:
        """The entry holding ``offset`` and the entries that follow it without a gap, as
        many as fit ``max_bytes`` and ``max_records`` (the first one always); [] on a miss.

        Each comes with whether it must be checked against the store before it is
        served: the first one, and any put before it. A later one needs no check once
        the first passed: the store still holding the first entry's message means its
        offsets have not started again since that put, so not since any later put either.
        """
        with self._lock:
            queue = self._queues.get((topic, queue_id))
            if queue is None:
                return []
            i = bisect.bisect_right(queue.bases, offset) - 1
            if i < 0 or queue.entries[i].end <= offset:
                return []
            first = queue.entries[i]
            first_serial = queue.serials[i]
            found = [(first, True)]
            size, records, end = len(first.data), first.end - offset, first.end
            for entry, serial in zip(queue.entries[i + 1 :], queue.serials[i + 1 :], strict=True):
                if entry.base != end:
                    break
                size += len(entry.data)
                records += entry.end - entry.base
                if size > max_bytes or records > max_records:
                    break
                found.append((entry, serial < first_serial))
                end = entry.end
            return found

    def drop(self, topic: str, queue_id: int) -> None:
        """Forget a queue's entries (they no longer match the store)."""
        with self._lock:
            self._drop_locked((topic, queue_id))

    def drop_topic(self, topic: str) -> None:
        """Forget every queue of a topic (deleted)."""
        with self._lock:
            for key in [k for k in self._queues if k[0] == topic]:
                self._drop_locked(key)

    def _drop_locked(self, key: QueueKey) -> None:
        queue = self._queues.pop(key, None)
        if queue is not None:
            self._bytes -= sum(len(e.data) for e in queue.entries)
            # Release the dropped bytes now rather than when they reach the eviction end
            # (drops are rare: a topic deleted, or a stale entry found).
            self._order = deque(item for item in self._order if item[0] != key)
