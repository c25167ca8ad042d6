"""Arrivals: what a dispatch batch added to each queue, for listeners that need no more.

A store listener (``MessageStore.add_listener``) receives one ``DispatchRequest`` per
record, so while one is registered reput must build those objects (the request path, ~1.3x
slower than the rows of ``dispatch_scan.py``) and call it per record. Most listeners only
want to know *which queues grew*: the broker's long-poll notifier, the Kafka fetch waiters.
They register with ``MessageStore.add_arrivals_listener`` instead and get one
:data:`Arrivals` mapping per dispatch batch (up to ``_DISPATCH_BATCH`` records):
``(topic, queue_id) -> the highest queue offset dispatched to that queue in the batch``.
Reput then keeps the rows path when no per-record listener is registered.

The mapping is handed over *after* the batch's ConsumeQueue units are written, as the
per-record listeners are, so a waiter that registers before it re-checks its queue can never
miss an arrival. Records that take no queue unit (prepared or rolled-back transactions)
are not arrivals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from mqcore.format.layout import TRANSACTION_TYPE_MASK
from mqcore.format.record import DispatchRequest

QueueKey = tuple[str, int]
Arrivals = Mapping[QueueKey, int]
"""``(topic, queue_id) -> highest queue offset dispatched`` for one dispatch batch."""
ArrivalsListener = Callable[[Arrivals], None]

#: The SYSFLAG bit of PREPARED (0x4) and ROLLBACK (0xC): such records get no queue unit.
_PREPARED = 0x4
assert _PREPARED & TRANSACTION_TYPE_MASK == _PREPARED


def arrivals_of_columns(
    topics: Iterable[str], queue_ids: Iterable[int], queue_offsets: Iterable[int]
) -> dict[QueueKey, int]:
    """Columns of queued records in dispatch order. Queue offsets only grow within a queue,
    so the last one seen per queue is its highest: one dict build, no comparisons."""
    return dict(zip(zip(topics, queue_ids, strict=True), queue_offsets, strict=True))


def arrivals_of_requests(requests: Iterable[DispatchRequest]) -> dict[QueueKey, int]:
    """The same for dispatch requests (the request path and the broker role's follow)."""
    return {
        (r.topic, r.queue_id): r.queue_offset
        for r in requests
        if not r.sys_flag & _PREPARED  # PREPARED and ROLLBACK take no queue unit
    }
