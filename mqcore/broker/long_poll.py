"""Long polling: park a pull until a message for its queue is dispatched, or time runs out.

The broker registers :meth:`ArrivalNotifier.on_arrivals` as the store's arrivals listener
once (``mqcore.store.reput.arrivals``: one call per dispatch batch naming the queues that grew, so
reput keeps its fast path). Waiters register under the ``(topic, queue_id)`` keys they care
about (one for a pull, several for :meth:`Broker.wait_for_messages`); when reput dispatches a
record for one of those keys, the notifier sets their ``threading.Event``. (The Kafka
listener parks its fetches on the event loop with its own ``kafka_listener.arrivals``.)

No lost wake-ups: a waiter registers *before* it re-checks its queues, and reput writes the
ConsumeQueue unit *before* it calls the listeners. So either the listener sees the waiter
(and fires it) or the waiter's re-check sees the unit.

A waiter also re-checks every ``recheck_s`` on its own, so that records dispatched by another
process (reput run by Celery, whose notifications this process does not hear) are found
within that interval. Timeouts are real time: a long poll blocks a real thread or task, so
a FakeClock could never end it.

Thread-safety: every method may be called from any thread; ``on_arrivals`` runs on the reput
thread and costs one dict lookup per queue of the batch when nobody waits on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

QueueKey = tuple[str, int]


class _Waiter:
    """One parked caller (a pull, or a wait on several queues)."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = threading.Event()

    def fire(self) -> None:
        self.event.set()


class ArrivalNotifier:
    """Waiters keyed by ``(topic, queue_id)``, fired when a record for that queue arrives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[QueueKey, set[_Waiter]] = {}
        self._closed = False

    # -- notifications ------------------------------------------------------------------------

    def on_arrivals(self, arrivals: Mapping[QueueKey, int]) -> None:
        """Store arrivals listener: wake, once, whoever waits on a queue that grew in the
        dispatch batch. Never raises."""
        waiting = self._waiters
        if not waiting:  # unlocked fast path; see the module docstring
            return
        keys = [key for key in arrivals if key in waiting]
        if not keys:
            return
        with self._lock:
            waiters = {w for key in keys for w in self._waiters.get(key, ())}
        for waiter in waiters:
            waiter.fire()

    def close(self) -> None:
        """Wake every waiter for good (broker stopping); later waits return at once."""
        with self._lock:
            self._closed = True
            waiters = {w for group in self._waiters.values() for w in group}
        for waiter in waiters:
            waiter.fire()

    def reopen(self) -> None:
        with self._lock:
            self._closed = False

    @property
    def waiting(self) -> int:
        """How many distinct waiters are parked (for status pages and tests)."""
        with self._lock:
            return len({w for group in self._waiters.values() for w in group})

    # -- waiting ------------------------------------------------------------------------------

    def wait(
        self,
        keys: Iterable[QueueKey],
        ready: Callable[[], bool],
        timeout_s: float,
        recheck_s: float,
    ) -> bool:
        """Block until ``ready()`` is true or ``timeout_s`` passes.

        Args:
            keys: the queues whose arrivals may make ``ready()`` true.
            ready: cheap check of the condition (reads in-memory queue offsets).
            timeout_s: the longest wait.
            recheck_s: re-check at least this often without a notification.

        Returns:
            The last value of ``ready()``.
        """
        waiter = _Waiter()
        event = waiter.event
        self._register(keys, waiter)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if ready():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                event.wait(min(remaining, recheck_s))
                event.clear()
        finally:
            self._unregister(waiter)

    def _register(self, keys: Iterable[QueueKey], waiter: _Waiter) -> None:
        with self._lock:
            for key in keys:
                self._waiters.setdefault(key, set()).add(waiter)

    def _unregister(self, waiter: _Waiter) -> None:
        with self._lock:
            for key in [k for k, group in self._waiters.items() if waiter in group]:
                group = self._waiters[key]
                group.discard(waiter)
                if not group:
                    del self._waiters[key]
