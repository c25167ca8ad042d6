"""Read-ahead for consumers behind the log: the next Fetch's batch built in the background.

A consumer reading old data (a store-path Fetch, ``handlers/fetch.py``) sends its next
Fetch for exactly the offset where the last answer ended, and only after it has received
and handled that answer. Built on demand, the broker's work and the client's work take
turns; built ahead, they overlap: right after answering up to offset ``Y`` the listener
starts building the batch from ``Y`` with the same limits in one background thread, and the
Fetch for ``Y`` takes it (waiting if it is still being built) instead of reading the store.

What :class:`ReadAhead` keeps is a future per (partition, offset); :meth:`ReadAhead.take`
hands it out once. Keyed by offset too, so consumers of one partition at different offsets
(two groups catching up) do not throw each other's builds away. Whether the built batch
still fits the request (its size against the new limit) and still matches the store (the
first record's CommitLog position: the CommitLog only grows, so the same position is the
same record) is the caller's check. At most ``max_entries`` builds are kept (the least
recently started go first) and only for limits up to ``max_limit`` bytes, so it holds at
most ``max_entries * max_limit`` bytes.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

DEFAULT_MAX_ENTRIES = 16
DEFAULT_MAX_LIMIT = 4 * 1024 * 1024

Key = tuple[str, int, int]  # (store topic, partition, offset)


class ReadAhead[T]:
    """Background builds of the next batch per partition (see the module docstring)."""

    def __init__(
        self, max_entries: int = DEFAULT_MAX_ENTRIES, max_limit: int = DEFAULT_MAX_LIMIT
    ) -> None:
        self.max_entries = max_entries
        self.max_limit = max_limit
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, Future[T]] = OrderedDict()
        # One thread: read-ahead uses the time a consumer spends between Fetches, it must
        # not compete with the Fetches themselves.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kafka-read-ahead")

    def start(self, key: Key, limit: int, build: Callable[[], T]) -> Future[T] | None:
        """Start ``build()`` (a batch of at most ``limit`` bytes) as the batch at ``key``;
        its future, or None if not started (``limit`` over ``max_limit``, or one for
        ``key`` is already under way or done)."""
        if limit > self.max_limit or self.max_entries <= 0:
            return None
        with self._lock:
            if key in self._entries:
                return None
            try:
                future = self._executor.submit(build)
            except RuntimeError:  # shut down
                return None
            self._entries[key] = future
            while len(self._entries) > self.max_entries:
                _, dropped = self._entries.popitem(last=False)
                dropped.cancel()
        return future

    def take(self, key: Key) -> Future[T] | None:
        """The build at ``key``, removed; None if there is none."""
        with self._lock:
            return self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def close(self) -> None:
        """Drop every entry and stop the thread (a build under way finishes first)."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for future in entries:
            future.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
