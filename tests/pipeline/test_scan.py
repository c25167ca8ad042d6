"""``scan_range`` reads every chunk into one reused buffer: batches must not point into it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from pipeline.columnar import Bounds
from pipeline.scan import scan_range
from pipeline.schema import ARROW_SCHEMA
from pipeline.segments import WalkState, iter_chunks, list_segments, plan_ranges
from tests.pipeline.conftest import mqcore_rows


def test_batches_outlive_the_reused_read_buffer(mq_store: Path) -> None:
    batches = []
    for rng in plan_ranges(list_segments(mq_store)):
        # Small chunks: each range's buffer is overwritten many times before the rows are read.
        batches.extend(scan_range(rng, Bounds(), chunk_bytes=3000))
    assert len(batches) > 20
    rows = pa.Table.from_batches(batches, schema=ARROW_SCHEMA).to_pylist()
    expected = pa.Table.from_pylist(mqcore_rows(mq_store), schema=ARROW_SCHEMA).to_pylist()
    assert rows == expected


def test_reused_chunks_are_views_of_one_buffer(mq_store: Path) -> None:
    rng = plan_ranges(list_segments(mq_store))[0]
    fresh = [bytes(c.data) for c in iter_chunks(rng, WalkState(), chunk_bytes=3000)]
    views = []
    for chunk in iter_chunks(rng, WalkState(), chunk_bytes=3000, reuse_buffer=True):
        assert bytes(chunk.data) == fresh[len(views)]  # each one right while it is current
        views.append(chunk.data)
    assert len(views) == len(fresh) > 2
    assert all(v.obj is views[0].obj for v in views)  # one buffer: earlier views are stale
