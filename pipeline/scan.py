"""One scan range to Arrow batches: the walk (``segments``) plus the decoder (``columnar``).

Shared by the Data Source's ``read`` and the jobs' Spark tasks, so every consumer sees the
same rows. Pure Python and pyarrow: runs on executors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from pipeline.columnar import Bounds, decode_chunk
from pipeline.segments import DEFAULT_CHUNK_BYTES, ScanRange, WalkState, iter_chunks

__all__ = ["scan_range"]


def scan_range(
    rng: ScanRange,
    bounds: Bounds,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    state: WalkState | None = None,
    columns: Sequence[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of the records starting in ``rng`` that ``bounds`` accepts (maybe empty ones).

    ``state`` (optional) reports how far the walk got and why it stopped; a record mqcore
    calls corrupt with no size to skip ends the walk there (``reason == "corrupt"``).
    ``columns`` (optional) limits the batches to those columns (``columnar.decode_chunk``).
    """
    state = state if state is not None else WalkState()
    # decode_chunk copies what the batch holds: batches never keep the segment's map alive.
    for chunk in iter_chunks(rng, state, chunk_bytes=chunk_bytes):
        batch, stop_at = decode_chunk(chunk, bounds, columns)
        if stop_at is not None:
            state.stopped = True
            state.reason = "corrupt"
            state.detail = f"corrupt record at {stop_at}: the scan stops there"
            state.next_offset = stop_at
        yield batch
        if state.stopped:
            return
