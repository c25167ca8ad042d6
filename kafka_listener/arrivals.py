"""Waiting for records to be dispatched, woken once per burst (Fetch long polls, Produce acks).

A Fetch with nothing to return waits until a record for one of its partitions is
dispatched by reput; a Produce answers once its records are readable. Both park here:

* :meth:`Arrivals.on_arrivals` is a store *arrivals* listener
  (``MessageStore.add_arrivals_listener``), called on the reput thread once per dispatch
  batch with the queues that grew (``mqcore.store.reput.arrivals``): a dict lookup per queue, and
  reput stays on its fast path (a per-record listener would push it onto the slow one).
* A waiter is woken with **one** ``loop.call_soon_threadsafe`` per burst: the first batch
  of a burst marks it ``signalled`` and schedules the wake-up; later batches see the mark
  and go on (an attribute read per waiter, no lock). The waiter clears the mark before it
  re-checks the queues, so an arrival after that check wakes it again.

No lost wake-ups: a waiter registers *before* it checks, and reput writes the
ConsumeQueue units of a dispatch batch *before* it calls the listeners, so either the
check sees the record or the listener sees the (unsignalled) waiter.

A waiter also re-checks every ``recheck_s`` by itself (records dispatched by another
process, whose arrivals this one does not hear about).

Thread-safety: ``on_arrivals`` runs on the reput thread; ``wait`` runs on any event loop
(one per test, one per listener in the broker).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence

from mqcore.store.store import MessageStore

QueueKey = tuple[str, int]
QueueRef = tuple[str, int, int]  # (store topic, queue id, offset): ready when max > offset


class _Waiter:
    __slots__ = ("loop", "event", "signalled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.event = asyncio.Event()
        self.signalled = False

    def fire(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:  # the loop is closed: its waiter is gone with it
            pass


class Arrivals:
    """Parked Kafka requests keyed by ``(store topic, queue id)``."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._lock = threading.Lock()  # taken to change _waiters, never by on_arrivals
        # Tuples, replaced (not changed) under the lock, so that on_arrivals can read them
        # without it while waiters come and go.
        self._waiters: dict[QueueKey, tuple[_Waiter, ...]] = {}
        self.wakeups = 0  # wake-ups scheduled (tests: a burst costs one per waiter)

    # -- reput side ------------------------------------------------------------------------

    def on_arrivals(self, arrivals: Mapping[QueueKey, int]) -> None:
        """Arrivals listener: wake whoever waits on a queue of the batch. Never raises.

        Lock-free: only the reput thread sets ``signalled``; a waiter resets it before
        each check, so reading a stale True here can only skip a wake-up the waiter's
        coming check makes unnecessary (the record is in the ConsumeQueue already)."""
        waiters = self._waiters
        if not waiters:
            return
        for key in arrivals:
            for waiter in waiters.get(key, ()):
                if not waiter.signalled:
                    waiter.signalled = True
                    self.wakeups += 1
                    waiter.fire()

    # -- waiting side ----------------------------------------------------------------------

    def ready(self, refs: Sequence[QueueRef], every: bool) -> bool:
        """Whether any (``every``: each) queue has a record at or past its offset."""
        max_offset = self.store.max_offset
        check = all if every else any
        return check(max_offset(topic, queue_id) > offset for topic, queue_id, offset in refs)

    async def wait(
        self, refs: Sequence[QueueRef], timeout_s: float, recheck_s: float, *, every: bool = False
    ) -> bool:
        """Wait until :meth:`ready` or ``timeout_s`` passes; returns the last check.

        Args:
            refs: ``(store topic, queue id, offset)``.
            timeout_s: the longest wait.
            recheck_s: check at least this often without a wake-up.
            every: wait for every queue (Produce) rather than any (Fetch).
        """
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop)
        keys = {(topic, queue_id) for topic, queue_id, _ in refs}
        with self._lock:
            for key in keys:
                self._waiters[key] = (*self._waiters.get(key, ()), waiter)
        try:
            deadline = loop.time() + timeout_s
            while True:
                waiter.signalled = False  # before the check: a later arrival fires again
                if self.ready(refs, every):
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                try:
                    await asyncio.wait_for(waiter.event.wait(), min(remaining, recheck_s))
                except TimeoutError:
                    pass
                waiter.event.clear()
        finally:
            with self._lock:
                for key in keys:
                    rest = tuple(w for w in self._waiters.get(key, ()) if w is not waiter)
                    if rest:
                        self._waiters[key] = rest
                    else:
                        self._waiters.pop(key, None)

    @property
    def waiting(self) -> int:
        """Distinct parked waiters (tests)."""
        with self._lock:
            return len({w for group in self._waiters.values() for w in group})
