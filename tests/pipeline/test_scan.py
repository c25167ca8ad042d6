"""``scan_range`` reads chunks as views of a read-only map of the segment: batches must not\npoint into it, and the map outlives a delete of the file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from pipeline.columnar import Bounds, decode_chunk
from pipeline.scan import scan_range
from pipeline.schema import ARROW_SCHEMA
from pipeline.segments import WalkState, iter_chunks, list_segments, plan_ranges
from tests.pipeline.conftest import mqcore_rows, write_store


def test_batches_outlive_the_reused_read_buffer(mq_store: Path) -> None:
    batches = []
    for rng in plan_ranges(list_segments(mq_store)):
        # Small chunks: each range's buffer is overwritten many times before the rows are read.
        batches.extend(scan_range(rng, Bounds(), chunk_bytes=3000))
    assert len(batches) > 20
    rows = pa.Table.from_batches(batches, schema=ARROW_SCHEMA).to_pylist()
    expected = pa.Table.from_pylist(mqcore_rows(mq_store), schema=ARROW_SCHEMA).to_pylist()
    assert rows == expected


def test_chunks_are_read_only_views_of_one_map(mq_store: Path) -> None:
    rng = plan_ranges(list_segments(mq_store))[0]
    raw = Path(rng.path).read_bytes()
    chunks = list(iter_chunks(rng, WalkState(), chunk_bytes=3000))
    views = [chunk.data for chunk in chunks]
    assert len(views) > 2
    assert all(v.obj is views[0].obj and v.readonly for v in views)
    for chunk in chunks:  # all still valid after the walk: the map lives while views do
        at = chunk.base - rng.base_offset
        assert bytes(chunk.data) == raw[at : at + len(chunk.data)]
    assert not views[0].obj.closed


def test_the_map_is_closed_when_the_scan_keeps_nothing(mq_store: Path) -> None:
    rng = plan_ranges(list_segments(mq_store))[0]
    owners = []
    batches = []
    for chunk in iter_chunks(rng, WalkState(), chunk_bytes=3000):
        owners.append(chunk.data.obj)
        batches.append(decode_chunk(chunk, Bounds())[0])  # copies what it keeps
        del chunk
    assert owners and all(o is owners[0] for o in owners)
    assert owners[0].closed
    assert sum(b.num_rows for b in batches) > 0


def test_a_segment_deleted_mid_scan_is_read_to_its_end(tmp_path: Path) -> None:
    write_store(tmp_path, 400)
    expected = pa.Table.from_pylist(mqcore_rows(tmp_path), schema=ARROW_SCHEMA).to_pylist()
    rows = []
    for rng in plan_ranges(list_segments(tmp_path)):
        state = WalkState()
        for i, batch in enumerate(scan_range(rng, Bounds(), chunk_bytes=3000, state=state)):
            if i == 0:
                Path(rng.path).unlink()  # cleanup: the map keeps the file's bytes
            rows.extend(batch.to_pylist())
        assert state.reason in ("blank", "end_of_data")
    assert rows == expected
