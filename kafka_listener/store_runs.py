"""One queue's consecutive records read raw from the local store, as one CommitLog copy.

``Broker.pull_records`` gives a ``RecordView`` per record: a ConsumeQueue ``Unit``, a
copy of the record and the view object, ~1.5 us a record before any encoding. The Fetch
store path only needs the record bytes and where each one starts, so :func:`read_run`
reads the ConsumeQueue units of up to ``max_count`` records as one ``bytes`` (numpy
columns, never a Python object per unit) and the CommitLog from the first record's start
to the last one's end as one more: a queue's records sit close together in the log (a
produced batch is stored contiguously, one put), so that copy is mostly the records
themselves. ``run_records.encode_run`` encodes from it.

Same reads as ``queries.get_records`` (``mqcore/store``): the units come from the queue's
file that holds ``offset`` (a run never crosses a ConsumeQueue file end), each file is
held (``MappedFile.hold``) while it is copied, and a record is readable only below its
CommitLog file's ``wrote_position``. The run stops at the store-bytes limit (the first
record always counts), at the end of the CommitLog file holding its first record, before a
unit that does not lie after the previous record in the log, before a blank unit (a gap in
the queue), before a unit pointing into a quarantined CommitLog range, and before a record
of another queue (``_sane``: QUEUEID and topic; ``run_records.encode_run`` checks the rest
of the header against the unit: magic, TOTALSIZE, QUEUEOFFSET). Whatever this reader does
not serve (a store that follows another process's derived files, an offset outside
[min, max), fewer than ``MIN_RUN_RECORDS`` records to read, a first unit or record it would
stop before) it leaves to ``Broker.pull_records``, which skips what must not be served
(``queries._scan``: with a logged error, quarantining a damaged record), reports the status
or raises the error: :func:`read_run` returns None. Body CRCs are not checked here (a cost
per record the run encoder avoids; ``get_messages`` checks them).

Thread-safety: a plain function over thread-safe store parts; call it from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mqcore.broker.broker import Broker
from mqcore.broker.pulling import check_pull
from mqcore.errors import StoreClosedError
from mqcore.format.layout import HEADER_SIZES, MIN_RECORD_SIZE, QUEUE_ID_POSITION
from mqcore.store.consume_queue import BLANK_SIZE, CQ_UNIT, CQ_UNIT_SIZE, ConsumeQueue
from mqcore.store.files.mapped_file import MappedFile
from mqcore.store.recovery.quarantine import Quarantine

from .run_records import Int64s, leading

# CQ_UNIT as a numpy record: phys_offset, size, tags_code.
_UNIT = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
assert _UNIT.itemsize == CQ_UNIT_SIZE and CQ_UNIT.format == ">qiq"
# The CommitLog copy may hold other queues' records between this queue's: at most this
# many times the store bytes asked for (plus one record), so a sparse queue stays bounded.
_SPAN_FACTOR = 4
# encode_run costs ~180 us a run whatever its length (numpy calls), RecordViews and
# ViewBatch ~3 us a record: below this many records (a consumer at the tail) views win.
MIN_RUN_RECORDS = 64


@dataclass(frozen=True, slots=True)
class RawRun:
    """Records ``offset``, ``offset + 1``, ... of one queue: ``data[positions[i]:][:sizes[i]]``
    is record ``offset + i`` as the ConsumeQueue locates it (not checked here)."""

    offset: int
    data: bytes  # CommitLog bytes from the first record's start to the last one's end
    positions: Int64s  # each record's start in data, increasing, records apart
    sizes: Int64s  # each record's size (its ConsumeQueue unit's)
    first_phys: int  # the first record's CommitLog position
    min_offset: int  # the queue's, when read
    max_offset: int

    def __len__(self) -> int:
        return len(self.sizes)


def read_run(
    broker: Broker, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int
) -> RawRun | None:
    """Up to ``max_count`` records from ``offset``, their store sizes within ``max_bytes``
    (the first always), or None when ``Broker.pull_records`` must serve this read.

    Raises:
        MQError: ``Broker.pull_records``' checks (unknown topic, no permission, queue id
            out of range).
    """
    store = broker.store
    if store.follows_derived_files or max_count <= 0 or offset < 0:
        return None
    check_pull(broker.metadata, broker.config, None, topic, queue_id)
    queue = store.queues.get(topic, queue_id)
    if queue is None:
        return None
    low, high = queue.min_offset, queue.max_offset
    if not low <= offset < high:
        return None
    count = min(max_count, high - offset)
    if count < MIN_RUN_RECORDS:
        return None
    units = _units(queue, offset, count)
    if units is None:
        return None
    phys = units["phys"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    n = max(1, int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")))
    phys, sizes = phys[:n], sizes[:n]
    n = leading((sizes > 0) & (sizes != BLANK_SIZE))
    n = min(n, 1 + leading(phys[1:n] >= phys[: n - 1] + sizes[: n - 1]))
    quarantine = store.commit_log.quarantine
    if n and quarantine.ranges:
        n = leading(~_quarantined(quarantine, phys[:n], sizes[:n]))
    if n == 0:
        return None
    phys, sizes = phys[:n], sizes[:n]
    span_limit = max(int(sizes[0]), max_bytes * _SPAN_FACTOR)
    copied = _copy(store.commit_log.segments.find(int(phys[0])), phys, sizes, span_limit)
    if copied is None:
        return None
    data, n = copied
    positions = phys[:n] - phys[0]
    n = _sane(data, positions, sizes[:n], topic.encode(), queue_id)
    if n == 0:
        return None
    broker.count_gets(n, topic)
    return RawRun(offset, data, positions[:n], sizes[:n], int(phys[0]), low, high)


def _quarantined(quarantine: Quarantine, phys: Int64s, sizes: Int64s) -> np.ndarray:
    """Whether each record ``[phys, phys + size)`` overlaps a quarantined range."""
    ranges = quarantine.ranges
    starts = np.array([r.offset for r in ranges], np.int64)
    ends = np.array([r.end for r in ranges], np.int64)
    i = np.searchsorted(starts, phys + sizes - 1, side="right") - 1
    hit: np.ndarray = (i >= 0) & (ends[np.maximum(i, 0)] > phys)
    return hit


_V1_IPV4_HEADER = HEADER_SIZES[0]
_BODY_LENGTH_POSITION = _V1_IPV4_HEADER - 4  # BODYLENGTH ends the header


def _sane(data: bytes, positions: Int64s, sizes: Int64s, topic: bytes, queue_id: int) -> int:
    """How many leading records of the copy have this QUEUEID and, where a V1 record with
    IPv4 hosts holds it, this topic. The rest of the framing (magic, TOTALSIZE, host
    widths, QUEUEOFFSET) is ``run_records.encode_run``'s: it stops at a record that fails
    it, as at any record this check cannot place the topic of, and ``Broker.pull_records``
    checks that one in full."""
    n = leading(sizes >= MIN_RECORD_SIZE)
    if n == 0:
        return 0
    rel, size = positions[:n], sizes[:n]
    i4 = np.ndarray((len(data) - 3,), ">i4", data, 0, (1,))
    body = i4[rel + _BODY_LENGTH_POSITION]
    at = rel + _V1_IPV4_HEADER + body  # the topic length byte
    width = len(topic)
    ok = (
        (i4[rel + QUEUE_ID_POSITION] == queue_id)
        & (body >= 0)
        & (at + 1 + width + 2 <= rel + size)  # the topic, then PROPERTIESLENGTH
    )
    n = leading(ok)
    if n == 0:
        return 0
    at = at[:n]
    ok = np.frombuffer(data, np.uint8)[at] == width
    if width:
        fields = np.ndarray((len(data) - width + 1,), f"S{width}", data, 0, (1,))
        ok &= fields[at + 1] == topic
    return leading(ok)


def _units(queue: ConsumeQueue, offset: int, count: int) -> np.ndarray | None:
    """The units of ``count`` records from ``offset`` within one ConsumeQueue file (as
    ``ConsumeQueue.units`` reads them), or None when there are none."""
    byte_offset = offset * CQ_UNIT_SIZE
    mapped = queue.segments.find(byte_offset)
    if mapped is None or not mapped.hold():
        return None
    try:
        pos = byte_offset - mapped.base_offset
        end = min(mapped.wrote_position, pos + count * CQ_UNIT_SIZE)
        end -= (end - pos) % CQ_UNIT_SIZE
        if end <= pos:
            return None
        data = mapped.read(pos, end - pos)
    except StoreClosedError:
        return None
    finally:
        mapped.release()
    return np.frombuffer(data, _UNIT)


def _copy(
    segment: MappedFile | None, phys: Int64s, sizes: Int64s, span_limit: int
) -> tuple[bytes, int] | None:
    """The CommitLog bytes from the first record's start to the end of the last record
    that lies in ``segment`` below its written end and within ``span_limit`` bytes, and
    how many records that is; None when not even the first one does."""
    if segment is None or not segment.hold():
        return None
    try:
        start = int(phys[0]) - segment.base_offset
        ends = phys + sizes - segment.base_offset
        limit = min(segment.wrote_position, start + span_limit)
        n = int(np.searchsorted(ends, limit, side="right"))  # ends increase
        if start < 0 or n == 0:
            return None
        return segment.read(start, int(ends[n - 1]) - start), n
    except StoreClosedError:
        return None
    finally:
        segment.release()
