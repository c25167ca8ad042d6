"""Why a store refuses puts: one reason per source, each cleared by what set it.

Several things refuse puts independently, and one clearing must not undo another::

    source   set by                                   cleared by
    disk     the disk guard: a partition over the     the disk guard (or, in Celery mode,
             warning ratio (``services/disk.py``)      the worker's flag: ``full_disk.py``)
    space    an append found no space to reserve      the next put after RETRY_S, or the
             CommitLog blocks (ENOSPC, EDQUOT)        disk guard once usage is back under
                                                      the warning ratio
    reput    reput could not write a ConsumeQueue     reput, once it dispatches again
             or IndexFile for lack of space
    abort    the ``abort`` marker could not be        the next put after RETRY_S, if the
             written (a crash would go unnoticed)     marker can be written then
    opened   a read-only or services-role open        never

The store is writable while no source refuses. :data:`DISK_SOURCES` are the ones that mean
"disk full": while any holds, the store shows the condition ``disk-full`` in its health.

Thread-safety: every method is thread-safe (one lock; none is on the put path: the store
keeps ``writable`` as a plain attribute the put path reads).
"""

from __future__ import annotations

import threading
import time

#: Sources that mean the disk is full (health condition ``disk-full``).
DISK_SOURCES = frozenset({"disk", "space", "reput", "abort"})
#: Sources a put retries by itself after this long (the disk guard may not be running).
RETRY_S = 1.0
SELF_RETRIED = frozenset({"space", "abort"})


class Refusals:
    """The reasons puts are refused, by source (module docstring)."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}
        self._lock = threading.Lock()
        self._retry_at = 0.0

    def set(self, source: str, reason: str) -> bool:
        """Refuse for ``source``. Returns whether the source is new (not just a new reason)."""
        with self._lock:
            new = source not in self._reasons
            self._reasons[source] = reason
            return new

    def clear(self, source: str) -> bool:
        """Stop refusing for ``source``. Returns whether it was refusing."""
        with self._lock:
            return self._reasons.pop(source, None) is not None

    def __contains__(self, source: object) -> bool:
        return source in self._reasons

    def __bool__(self) -> bool:
        return bool(self._reasons)

    @property
    def sources(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._reasons)

    @property
    def reason(self) -> str:
        """Every reason, in the order they were first given, ``; ``-joined ("" if none)."""
        with self._lock:
            return "; ".join(self._reasons.values())

    def reasons(self, sources: frozenset[str] | None = None) -> dict[str, str]:
        """The reasons by source (only those in ``sources`` if given)."""
        with self._lock:
            return {
                source: reason
                for source, reason in self._reasons.items()
                if sources is None or source in sources
            }

    def hold_off(self) -> None:
        """No retry before ``RETRY_S`` from now (a put has just found no space)."""
        with self._lock:
            self._retry_at = time.monotonic() + RETRY_S

    def retry_due(self) -> bool:
        """Whether a refused put may look again now: only :data:`SELF_RETRIED` sources
        refuse and ``RETRY_S`` has passed since the last look, which this call starts."""
        with self._lock:
            now = time.monotonic()
            if not set(self._reasons) <= SELF_RETRIED or now < self._retry_at:
                return False
            self._retry_at = now + RETRY_S
            return True
