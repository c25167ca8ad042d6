"""The rebuilds' strict walks (rebuild_walk.py) on real stores with bytes changed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.errors import StoreError
from mqcore.format.record import DispatchRequest
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.recovery import rebuild_walk
from mqcore.store.reput.dispatch_scan import dispatch_columns

CONFIG = StoreConfig(commitlog_file_size=16 * 1024, consume_queue_file_entries=50)
COUNT = 200


def fill(root: Path) -> list[tuple[int, int]]:
    """COUNT records over several segments; their (phys, size)."""
    with MessageStore(root, CONFIG) as store:
        results = [
            store.put_message(Message("T", b"x" * (1 + i % 50), keys=[f"k{i}"]))
            for i in range(COUNT)
        ]
    return [(r.phys_offset, r.wrote_bytes) for r in results]


def xor(root: Path, phys: int, at: int, mask: int) -> None:
    size = CONFIG.commitlog_file_size
    with open(root / "commitlog" / f"{phys // size * size:020d}", "r+b") as f:
        f.seek(phys % size + at)
        old = f.read(1)[0]
        f.seek(phys % size + at)
        f.write(bytes([old ^ mask]))


def walked(store: MessageStore, max_bytes: int) -> list[int]:
    """The phys offsets of the records both walks give, in steps of ``max_bytes``."""
    end = store.commit_log.max_offset
    levels = store.delay_levels_ms
    by_columns: list[int] = []
    offset = store.commit_log.min_offset
    while offset < end:
        columns, offset = rebuild_walk.columns(store.commit_log, offset, end, max_bytes, levels)
        by_columns += columns.phys_offsets.tolist()
    by_requests: list[int] = []
    offset = store.commit_log.min_offset
    while offset < end:
        for item in rebuild_walk.requests(store.commit_log, offset, end, max_bytes, levels):
            if isinstance(item, DispatchRequest):
                by_requests.append(item.phys_offset)
            else:
                offset = item
    assert by_columns == by_requests
    return by_columns


@pytest.mark.parametrize("max_bytes", [4096, 1 << 30])
def test_a_flipped_totalsize_is_quarantined_and_walked_past_not_skipped_by(
    tmp_path: Path, max_bytes: int
) -> None:
    records = fill(tmp_path)
    phys, size = records[30]  # the first segment: no recovery rescans it after a clean exit
    with MessageStore(tmp_path, CONFIG) as store:
        xor(tmp_path, phys, 2, 0x02)  # after the start: TOTALSIZE + 512
        reput_walk, _ = dispatch_columns(
            store.commit_log, 0, store.commit_log.max_offset, 1 << 30, store.delay_levels_ms
        )
        skipped = {p for p, _ in records} - set(reput_walk.phys_offsets.tolist())
        assert len(skipped) > 1  # reput's rule would skip good records after it
        assert walked(store, max_bytes) == [p for p, _ in records if p != phys]
        [entry] = store.quarantine.ranges
        assert (entry.offset, entry.length, entry.found_by) == (phys, size, "rebuild")


def test_a_corrupt_record_nothing_valid_follows_stops_the_walk_with_an_error(
    tmp_path: Path,
) -> None:
    records = fill(tmp_path)
    with MessageStore(tmp_path, CONFIG) as store:
        phys, _ = records[-5]
        end = store.commit_log.max_offset
        segment = store.commit_log.segments.find(phys)
        assert segment is not None
        with open(segment.path, "r+b") as f:  # the last records zeroed: no valid one follows
            f.seek(phys - segment.base_offset)
            f.write(bytes(end - phys))
        with pytest.raises(StoreError, match=f"cannot be walked past {phys}"):
            rebuild_walk.columns(store.commit_log, 0, end, 1 << 30, store.delay_levels_ms)
        assert store.quarantine.ranges == ()
