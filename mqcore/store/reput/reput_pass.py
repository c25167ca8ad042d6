"""One reput pass in this process: read new CommitLog records, write them through the writer.

The pass picks its form once, by one rule: columns (``dispatch_scan.dispatch_columns`` then
``DispatchWriter.write_columns``: numbers as arrays, no object per record) unless the new
log is small or a per-record listener needs ``DispatchRequest`` objects; else requests in
batches (``CommitLog.iter_dispatch`` then ``DispatchWriter.write_requests``). Both leave the
same files (``tests/mqcore/store/test_store_fast_paths.py``). The column path costs ~200 us
a call whatever its size, the request path ~20 us plus ~8-10 us a record, hence
:data:`COLUMNS_MIN_BYTES`. The caller holds the reput lock; nothing here is durable (the
caller keeps the returned position and publishes it).
"""

from __future__ import annotations

from collections.abc import Sequence

from mqcore.format.record import DispatchRequest
from mqcore.store.commit_log import CommitLog
from mqcore.store.reput import dispatch_scan
from mqcore.store.reput.dispatch_write import DispatchWriter

#: Records dispatched per ``write_requests`` call (ConsumeQueue and index writes batched).
REQUESTS_BATCH = 1024
#: The same for the column path, whose writes cost a fixed amount per batch more than per
#: record.
COLUMNS_BATCH = 4096
#: Less new CommitLog than this goes the request path (module docstring).
COLUMNS_MIN_BYTES = 4 * 1024


def dispatch_pass(
    commit_log: CommitLog,
    writer: DispatchWriter,
    start: int,
    end: int,
    *,
    max_bytes: int,
    delay_levels_ms: Sequence[int],
    per_record: bool,
) -> tuple[int, int]:
    """Dispatch the records from ``start`` up to ``end`` (at most ``max_bytes`` of log).

    Args:
        commit_log: the log read.
        writer: where the ConsumeQueue units and index keys go.
        start: the CommitLog offset of the first record not dispatched.
        end: the offset dispatch may reach (the confirm offset).
        max_bytes: the most CommitLog one pass reads.
        delay_levels_ms: the delay levels (a delayed record's tags code is its due time).
        per_record: a per-record listener is registered (requests, not columns).

    Returns:
        Records dispatched, and the offset reached.
    """
    if not per_record and end - start >= COLUMNS_MIN_BYTES:
        columns, reached = dispatch_scan.dispatch_columns(
            commit_log, start, end, max_bytes, delay_levels_ms
        )
        dispatched = len(columns)
        if dispatched <= COLUMNS_BATCH:
            writer.write_columns(columns)
        else:
            for at in range(0, dispatched, COLUMNS_BATCH):
                writer.write_columns(columns.slice(at, at + COLUMNS_BATCH))
        return dispatched, reached
    count = 0
    reached = start
    batch: list[DispatchRequest] = []
    for item in commit_log.iter_dispatch(start, end, max_bytes, delay_levels_ms):
        if isinstance(item, int):
            writer.write_requests(batch)
            count += len(batch)
            reached = item
            break
        batch.append(item)
        if len(batch) >= REQUESTS_BATCH:
            writer.write_requests(batch)
            count += len(batch)
            batch = []
    return count, reached
