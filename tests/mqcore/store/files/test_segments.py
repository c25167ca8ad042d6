"""MappedFileQueue: load rules, rolling, lookup by offset, truncation, flush, cleanup."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import StoreError, StoreNotWritableError
from mqcore.store.files.segments import MappedFileQueue

SIZE = 4096
RECORD = 128  # 32 records per file


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[MappedFileQueue]:
    q = MappedFileQueue(tmp_path / "commitlog", SIZE, clock=FakeClock())
    q.load()
    yield q
    q.close()


def write_records(q: MappedFileQueue, count: int) -> None:
    for i in range(count):
        mapped = q.last_or_create(q.max_offset)
        mapped.append(bytes([i % 256]) * RECORD)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file())


def test_rolls_across_many_files(queue: MappedFileQueue) -> None:
    write_records(queue, 32 * 10 + 5)
    assert names(queue.directory) == [f"{i * SIZE:020d}" for i in range(11)]
    assert [f.base_offset for f in queue.files] == [i * SIZE for i in range(11)]
    assert all(f.is_full for f in queue.files[:-1])
    assert queue.min_offset == 0
    assert queue.max_offset == (32 * 10 + 5) * RECORD
    assert queue.first() is queue.files[0] and queue.last() is queue.files[-1]


def test_empty_queue(queue: MappedFileQueue) -> None:
    assert queue.files == () and queue.first() is None and queue.last() is None
    assert (queue.min_offset, queue.max_offset, queue.flushed_where) == (0, 0, 0)
    assert queue.find(0) is None
    assert queue.flush(0) is False


def test_first_file_aligned_to_start_offset(queue: MappedFileQueue) -> None:
    mapped = queue.last_or_create(3 * SIZE + 100)
    assert mapped.base_offset == 3 * SIZE
    assert mapped.path.name == f"{3 * SIZE:020d}"
    assert queue.last_or_create(0) is mapped  # not full: reused


def test_find_at_boundaries(queue: MappedFileQueue) -> None:
    write_records(queue, 32 * 3 + 1)
    files = queue.files
    for index, mapped in enumerate(files):
        base = index * SIZE
        assert queue.find(base) is mapped
        assert queue.find(base + SIZE - 1) is mapped
    assert queue.find(-1) is None
    assert queue.find(4 * SIZE) is None  # past the last file's end
    assert queue.find(4 * SIZE - 1) is files[-1]  # inside the last file, beyond its data


def test_find_linear_fallback_for_unaligned_names(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    directory.mkdir()
    for base in (100, 100 + SIZE):
        (directory / f"{base:020d}").write_bytes(b"\0" * SIZE)
    q = MappedFileQueue(directory, SIZE)
    q.load()
    assert q.find(100) is q.files[0]
    assert q.find(SIZE + 50) is q.files[0]  # arithmetic says file 1; the scan corrects it
    assert q.find(SIZE + 100) is q.files[1]
    assert q.find(99) is None
    q.close()


def test_roll_requires_full_last_file(queue: MappedFileQueue) -> None:
    assert queue.roll().base_offset == 0
    queue.files[0].append(b"x")
    with pytest.raises(StoreError, match="not full"):
        queue.roll()
    queue.files[0].append(b"x" * queue.files[0].remaining)
    assert queue.roll().base_offset == SIZE


def test_load_sorts_skips_and_marks_full(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    directory.mkdir()
    for base in (2 * SIZE, 0, SIZE):
        (directory / f"{base:020d}").write_bytes(bytes([base // SIZE]) * SIZE)
    (directory / "sub").mkdir()
    (directory / f"{9 * SIZE:020d}.tmp").write_bytes(b"x")
    (directory / "123").write_bytes(b"x")
    (directory / f"{7 * SIZE:020d}").mkdir(parents=True, exist_ok=True)  # a dir, skipped
    q = MappedFileQueue(directory, SIZE)
    q.load()
    assert [f.base_offset for f in q.files] == [0, SIZE, 2 * SIZE]
    assert all(f.is_full and f.flushed_position == SIZE for f in q.files)
    assert q.max_offset == 3 * SIZE
    assert q.files[2].read(0, 1) == b"\2"
    q.close()


def test_zero_length_last_file_deleted(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    directory.mkdir()
    (directory / f"{0:020d}").write_bytes(b"\0" * SIZE)
    (directory / f"{SIZE:020d}").touch()
    ro = MappedFileQueue(directory, SIZE, readonly=True)
    ro.load()
    assert len(ro.files) == 1 and (directory / f"{SIZE:020d}").exists()  # read-only: kept
    ro.close()
    q = MappedFileQueue(directory, SIZE)
    q.load()
    assert len(q.files) == 1
    assert not (directory / f"{SIZE:020d}").exists()
    q.close()


def test_a_longer_file_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    directory.mkdir()
    (directory / f"{0:020d}").write_bytes(b"\0" * (SIZE + 1))
    q = MappedFileQueue(directory, SIZE)
    with pytest.raises(StoreError, match=r"length 4097 bytes but the configured file size is 4096"):
        q.load()
    assert q.files == ()


@pytest.mark.parametrize("length", [0, 1, SIZE - 1])
def test_a_file_cut_short_is_extended_and_listed(tmp_path: Path, length: int) -> None:
    directory = tmp_path / "q"
    directory.mkdir()
    first = directory / f"{0:020d}"
    first.write_bytes(b"\x07" * length)
    (directory / f"{SIZE:020d}").write_bytes(b"\0" * SIZE)

    ro = MappedFileQueue(directory, SIZE, readonly=True)
    if length == 0:  # nothing to map: read-only tools report it
        with pytest.raises(StoreError, match="length 0 bytes"):
            ro.load()
    else:
        ro.load()
        assert ro.extended_files == [(first, length)]
        assert ro.files[0].file_size == length
        ro.close()
    assert first.stat().st_size == length  # read-only: nothing changes on disk

    q = MappedFileQueue(directory, SIZE)
    q.load()
    assert q.extended_files == [(first, length)]
    assert first.stat().st_size == SIZE
    assert [f.base_offset for f in q.files] == [0, SIZE]
    assert q.files[0].read(0, SIZE) == b"\x07" * length + b"\0" * (SIZE - length)
    q.close()


def test_gap_between_files_refused(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    directory.mkdir()
    for base in (0, 2 * SIZE):
        (directory / f"{base:020d}").write_bytes(b"\0" * SIZE)
    with pytest.raises(StoreError, match="does not follow"):
        MappedFileQueue(directory, SIZE).load()


def test_truncate_dirty_across_file_boundary(queue: MappedFileQueue) -> None:
    write_records(queue, 32 * 4)  # four full files
    held = queue.files[3]
    assert held.hold()  # a reader still holds a file that goes away
    cut = SIZE + 5 * RECORD
    queue.truncate_dirty(cut)
    assert [f.base_offset for f in queue.files] == [0, SIZE]
    assert names(queue.directory) == [f"{0:020d}", f"{SIZE:020d}"]
    assert queue.files[0].is_full
    assert (queue.files[1].wrote_position, queue.files[1].flushed_position) == (5 * RECORD,) * 2
    assert queue.max_offset == cut and queue.flushed_where == cut
    write_records(queue, 27 + 32 * 2)  # the writer re-creates the same names
    assert names(queue.directory) == [f"{i * SIZE:020d}" for i in range(4)]
    held.release()  # the late release unmaps the old file without deleting the new one
    assert held.is_closed
    assert names(queue.directory) == [f"{i * SIZE:020d}" for i in range(4)]
    assert queue.max_offset == 4 * SIZE


def test_truncate_dirty_at_exact_file_start(queue: MappedFileQueue) -> None:
    write_records(queue, 32 * 3)
    queue.truncate_dirty(2 * SIZE)
    assert [f.base_offset for f in queue.files] == [0, SIZE, 2 * SIZE]
    assert queue.files[2].wrote_position == 0
    assert queue.max_offset == 2 * SIZE


def test_flush_moves_file_by_file(queue: MappedFileQueue) -> None:
    write_records(queue, 32 + 4)  # one full file and 4 records in the next
    assert queue.flush(4) is True  # full file: always flushable
    assert queue.flushed_where == SIZE
    assert queue.flush(4) is False  # 4 records = 512 bytes < 4 pages
    assert queue.flushed_where == SIZE
    assert queue.flush(0) is True
    assert queue.flushed_where == SIZE + 4 * RECORD
    assert queue.flush(0) is False


def test_flush_starts_at_first_file_when_behind(queue: MappedFileQueue) -> None:
    mapped = queue.last_or_create(5 * SIZE)
    mapped.append(b"x" * 10)
    assert queue.flush(0) is True
    assert queue.flushed_where == 5 * SIZE + 10


def test_flush_records_store_timestamp_on_thorough_flush(queue: MappedFileQueue) -> None:
    mapped = queue.last_or_create(0)
    mapped.append(b"x")
    mapped.store_timestamp_ms = 42
    queue.flush(1)
    assert queue.store_timestamp_ms == 0
    queue.flush(0)
    assert queue.store_timestamp_ms == 42


def age_files(q: MappedFileQueue, mtimes_ms: list[int]) -> None:
    for mapped, when in zip(q.files, mtimes_ms, strict=True):
        os.utime(mapped.path, ns=(when * 1_000_000, when * 1_000_000))


def delete_expired_by_time(
    q: MappedFileQueue,
    expired_ms: int,
    now_ms: int,
    *,
    clean_immediately: bool,
    max_count: int,
    never_last: bool = True,
) -> int:
    """The cleanup service's time rule over ``delete_first_files_while`` (spec 6.4 step 3)."""
    return q.delete_first_files_while(
        lambda mapped: clean_immediately or now_ms >= mapped.last_modified_ms + expired_ms,
        max_count=max_count,
        never_last=never_last,
    )


def delete_first_files_below(q: MappedFileQueue, offset: int) -> int:
    """Front files that end at or below ``offset`` (never the last)."""
    return q.delete_first_files_while(lambda mapped: mapped.base_offset + q.file_size <= offset)


def test_delete_expired_by_time_no_holes(queue: MappedFileQueue) -> None:
    write_records(queue, 32 * 5)
    now = 10_000_000
    age_files(queue, [now - 5000, now - 5000, now - 10, now - 5000, now - 5000])
    assert delete_expired_by_time(queue, 1000, now, clean_immediately=False, max_count=10) == 2
    assert [f.base_offset for f in queue.files] == [2 * SIZE, 3 * SIZE, 4 * SIZE]
    assert queue.min_offset == 2 * SIZE
    assert names(queue.directory) == [f"{i * SIZE:020d}" for i in (2, 3, 4)]


def test_delete_expired_by_time_limits(queue: MappedFileQueue) -> None:
    write_records(queue, 32 * 4)
    now = 10_000_000
    age_files(queue, [now - 10] * 4)
    assert delete_expired_by_time(queue, 1000, now, clean_immediately=False, max_count=10) == 0
    assert delete_expired_by_time(queue, 1000, now, clean_immediately=True, max_count=2) == 2
    assert delete_expired_by_time(queue, 1000, now, clean_immediately=True, max_count=10) == 1
    assert len(queue.files) == 1  # never the last
    assert (
        delete_expired_by_time(
            queue, 1000, now, clean_immediately=True, max_count=10, never_last=False
        )
        == 1
    )
    assert len(queue.files) == 0


def test_held_file_stops_cleanup_until_forced(tmp_path: Path) -> None:
    clock = FakeClock()
    q = MappedFileQueue(tmp_path / "q", SIZE, clock=clock)
    write_records(q, 32 * 3)
    first = q.files[0]
    assert first.hold()
    assert delete_expired_by_time(q, 0, 0, clean_immediately=True, max_count=10) == 0
    assert q.files[0] is first and not first.is_available
    assert q.min_offset == SIZE  # the first file is being destroyed
    clock.advance(120_000)
    assert delete_expired_by_time(q, 0, 0, clean_immediately=True, max_count=10) == 2
    assert first.is_closed
    first.release()
    q.close()


def test_held_file_released_before_retry(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "q", SIZE, clock=FakeClock())
    write_records(q, 32 * 2)
    first = q.files[0]
    first.hold()
    assert delete_first_files_below(q, SIZE) == 0
    first.release()  # the last holder unmaps
    assert first.is_closed
    assert delete_first_files_below(q, SIZE) == 1
    q.close()


def test_delete_first_files_below(queue: MappedFileQueue) -> None:
    write_records(queue, 32 * 4)
    assert delete_first_files_below(queue, 2 * SIZE - 1) == 1
    assert delete_first_files_below(queue, 2 * SIZE) == 1
    assert delete_first_files_below(queue, 100 * SIZE) == 1  # never the last
    assert [f.base_offset for f in queue.files] == [3 * SIZE]


def test_delete_last_and_destroy(queue: MappedFileQueue) -> None:
    write_records(queue, 32 * 2)
    queue.flush(0)
    queue.flush(0)
    removed = queue.delete_last()
    assert removed is not None and removed.base_offset == SIZE
    assert queue.flushed_where == SIZE
    queue.destroy()
    assert not queue.directory.exists()


def test_read_only_queue_refuses_writes(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "q", SIZE)
    write_records(q, 40)
    q.close()
    ro = MappedFileQueue(tmp_path / "q", SIZE, readonly=True)
    ro.load()
    assert len(ro.files) == 2 and all(f.readonly for f in ro.files)
    with pytest.raises(StoreNotWritableError):
        ro.last_or_create(2 * SIZE)
    with pytest.raises(StoreNotWritableError):
        delete_first_files_below(ro, SIZE)
    assert ro.flush(0) is False
    # Truncation of a read-only queue only moves the in-memory end of data (tools use it
    # to see what recovery would keep); no file is touched.
    before = {p.name: p.read_bytes() for p in (tmp_path / "q").iterdir()}
    ro.truncate_dirty(SIZE + 10)
    assert ro.max_offset == SIZE + 10
    assert [f.wrote_position for f in ro.files] == [SIZE, 10]
    ro.close()
    assert {p.name: p.read_bytes() for p in (tmp_path / "q").iterdir()} == before
