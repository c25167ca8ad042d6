"""MappedFile: sparse creation, positions, reads, flush ranges, refcounted teardown."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import SegmentFullError, StoreClosedError, StoreError, StoreNotWritableError
from mqcore.store.files import libc
from mqcore.store.files.mapped_file import FLUSH_PAGE_BYTES, MappedFile, parse_base_offset

SIZE = 16 * 4096


@pytest.fixture
def mf(tmp_path: Path) -> Iterator[MappedFile]:
    mapped = MappedFile(tmp_path / f"{SIZE * 3:020d}", SIZE)
    yield mapped
    mapped.close()


class RecordingMsync:
    """Records the msync ranges ``flush`` asks for (offsets into the mapping), then syncs
    them through the real ``libc.msync`` or, where there is none, ``mmap.flush``."""

    def __init__(self, mm: mmap.mmap) -> None:
        self.mm = mm
        self.base = libc.map_address(mm)
        self.real = libc.msync()
        self.calls: list[tuple[int, int]] = []

    def __call__(self, address: int, length: int, flags: int) -> int:
        self.calls.append((address - self.base, length))
        if self.real is None:
            self.mm.flush(address - self.base, length)
            return 0
        return self.real(address, length, flags)


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_created_at_full_size_with_its_blocks_reserved(mf: MappedFile) -> None:
    st = os.stat(mf.path)
    assert st.st_size == SIZE
    assert _allocated(mf.path) >= SIZE  # the default reserves the whole file up front
    assert mf.reserved_position == SIZE
    assert mf.base_offset == SIZE * 3
    assert (mf.wrote_position, mf.flushed_position, mf.remaining) == (0, 0, SIZE)
    assert not mf.is_full
    assert mf.read(0, 0) == b"" and not any(mf.buffer[:SIZE])  # reserved blocks read as zeros


def test_a_chunked_file_reserves_ahead_of_its_appends(tmp_path: Path) -> None:
    page = mmap.PAGESIZE
    mapped = MappedFile(tmp_path / f"{0:020d}", SIZE, reserve_chunk_bytes=2 * page)
    try:
        assert mapped.reserved_position == 2 * page
        assert 2 * page <= _allocated(mapped.path) < SIZE  # the rest is still a hole
        mapped.append(b"a" * (2 * page))  # exactly up to the mark: no new reservation
        assert mapped.reserved_position == 2 * page
        mapped.append(b"b")  # one byte past it: the next chunk first
        assert mapped.reserved_position == 4 * page
        mapped.append(b"c" * (3 * page))  # a big append takes every chunk it needs
        assert mapped.reserved_position == 6 * page
        assert _allocated(mapped.path) >= 6 * page
        assert mapped.read(2 * page, 2) == b"bc"
        mapped.append(b"d" * (mapped.remaining))  # capped at the file size
        assert mapped.reserved_position == SIZE and mapped.is_full
    finally:
        mapped.close()


def test_a_chunk_is_a_whole_number_of_pages_within_the_file(tmp_path: Path) -> None:
    small = MappedFile(tmp_path / f"{0:020d}", SIZE, reserve_chunk_bytes=100)
    big = MappedFile(tmp_path / f"{SIZE:020d}", SIZE, reserve_chunk_bytes=10 * SIZE)
    assert small.reserve_chunk_bytes == mmap.PAGESIZE
    assert big.reserve_chunk_bytes == SIZE
    small.close()
    big.close()


def test_reopened_file_reserves_again_from_its_recovered_end(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}"
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY))
    os.truncate(path, SIZE)  # a sparse file, as older versions left them
    mapped = MappedFile(path, SIZE, reserve_chunk_bytes=mmap.PAGESIZE)
    try:
        assert _allocated(path) == 0  # opening an existing file writes and reserves nothing
        mapped.set_positions(100)  # recovery: everything below 100 was read back
        assert mapped.reserved_position == 100
        mapped.append(b"x")
        # From the page holding the end: the rest of that page and one chunk past it.
        assert mapped.reserved_position == 100 + mmap.PAGESIZE
        assert _allocated(path) >= mmap.PAGESIZE
    finally:
        mapped.close()


def test_name_must_be_decimal(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a decimal offset"):
        MappedFile(tmp_path / "abc", SIZE)
    assert parse_base_offset("20240101120000000") == 20240101120000000


def test_existing_file_of_wrong_size_refused(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}"
    path.write_bytes(b"x" * 100)
    with pytest.raises(StoreError, match="expected 65536"):
        MappedFile(path, SIZE)


def test_append_read_and_full(mf: MappedFile) -> None:
    assert mf.append(b"hello") == 0
    assert mf.append(bytearray(b"world")) == 5
    assert mf.read(0, 10) == b"helloworld"
    assert isinstance(mf.read(0, 10), bytes)
    with pytest.raises(ValueError, match="beyond wrote position"):
        mf.read(8, 3)
    with pytest.raises(SegmentFullError):
        mf.append(b"\0" * (SIZE - 9))
    assert mf.wrote_position == 10  # nothing written by the failed append
    mf.append(memoryview(b"\1" * (SIZE - 10)))
    assert mf.is_full and mf.remaining == 0
    with pytest.raises(SegmentFullError):
        mf.append(b"!")


def test_fill_to_end_claims_the_rest(mf: MappedFile) -> None:
    mf.append(b"a" * 100)
    assert mf.fill_to_end(b"12345678") == 100
    assert mf.is_full
    assert mf.read(100, 8) == b"12345678"
    assert mf.read(108, 4) == b"\0" * 4


def test_write_at_does_not_move_positions(mf: MappedFile) -> None:
    mf.append(b"0123456789")
    mf.write_at(2, b"ab")
    assert mf.wrote_position == 10
    assert mf.read(0, 10) == b"01ab456789"
    with pytest.raises(ValueError):
        mf.write_at(SIZE - 1, b"xy")


def test_reopen_keeps_content(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}"
    first = MappedFile(path, SIZE)
    first.append(b"persisted")
    first.flush(0)
    first.close()
    again = MappedFile(path, SIZE)
    again.set_positions(SIZE)
    assert again.read(0, 9) == b"persisted"
    again.close()


def test_set_positions(mf: MappedFile) -> None:
    mf.set_positions(300)
    assert (mf.wrote_position, mf.flushed_position) == (300, 300)
    with pytest.raises(ValueError):
        mf.set_positions(SIZE + 1)


def test_flush_least_pages_rules(mf: MappedFile, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = RecordingMsync(mf.buffer)
    monkeypatch.setitem(libc._functions, "msync", recorder)
    mf.append(b"x" * (3 * FLUSH_PAGE_BYTES + 10))
    assert mf.flush(4) == 0  # 3 dirty pages < 4
    assert recorder.calls == []
    mf.append(b"x" * FLUSH_PAGE_BYTES)
    assert mf.flush(4) == 4 * FLUSH_PAGE_BYTES + 10
    assert recorder.calls == [(0, 4 * FLUSH_PAGE_BYTES + 10)]
    mf.append(b"y")
    assert mf.flush(1) == 4 * FLUSH_PAGE_BYTES + 10  # same page: not flushable with 1
    assert mf.flush(0) == 4 * FLUSH_PAGE_BYTES + 11  # any dirty byte with 0
    # Only the dirty range, from the page holding the old flushed position.
    assert recorder.calls[-1] == (4 * mmap.PAGESIZE, 11 + 4 * FLUSH_PAGE_BYTES - 4 * mmap.PAGESIZE)
    assert mf.flush(0) == mf.flushed_position
    assert len(recorder.calls) == 2  # nothing dirty: no msync
    mf.append(b"z" * mf.remaining)
    assert mf.flush(100) == SIZE  # full files are always flushable
    calls = len(recorder.calls)
    assert mf.flush(100) == SIZE
    assert len(recorder.calls) == calls  # full and clean: no msync


def test_view_holds_and_releases(mf: MappedFile) -> None:
    mf.append(b"abcdef")
    with mf.view(1, 3) as view:
        assert bytes(view) == b"bcd"
        assert mf.holders == 1
    assert mf.holders == 0
    with pytest.raises(ValueError):
        bytes(view)  # released on exit
    mf.close()
    assert mf.is_closed  # no export left behind


def test_view_refcount_prevents_destroy(mf: MappedFile) -> None:
    clock = FakeClock()
    mf.append(b"payload")
    with mf.view(0, 7) as view:
        assert mf.destroy(120_000, clock) is False
        assert not mf.path.exists()  # name freed at once
        assert not mf.is_closed
        assert bytes(view) == b"payload"  # pages live on until the unmap
        assert mf.hold() is False
    assert mf.is_closed  # the last release unmapped
    assert mf.destroy(120_000, clock) is True
    with pytest.raises(StoreClosedError):
        mf.read(0, 1)
    with pytest.raises(StoreClosedError):
        with mf.view(0, 1):
            pass


def test_destroy_forced_after_interval(mf: MappedFile) -> None:
    clock = FakeClock()
    mf.append(b"abc")
    assert mf.hold()
    assert mf.destroy(1000, clock) is False
    clock.advance(999)
    assert mf.destroy(1000, clock) is False
    clock.advance(1)
    assert mf.destroy(1000, clock) is True
    assert mf.is_closed
    with pytest.raises(StoreClosedError):
        mf.read(0, 1)
    mf.release()  # late holder: harmless


def test_destroy_without_holders_is_immediate(mf: MappedFile) -> None:
    assert mf.destroy(0, FakeClock()) is True
    assert mf.is_closed and not mf.path.exists()
    assert mf.flush(0) == 0


def test_release_without_hold(mf: MappedFile) -> None:
    with pytest.raises(StoreError, match="without hold"):
        mf.release()


def test_close_with_holder_defers_unmap(mf: MappedFile) -> None:
    assert mf.hold()
    assert mf.close() is False
    assert mf.path.exists()  # close never deletes
    mf.release()
    assert mf.is_closed


def test_buffer_unpack_from(mf: MappedFile) -> None:
    import struct

    mf.append(struct.pack(">q", -5))
    assert mf.hold()
    try:
        assert struct.unpack_from(">q", mf.buffer, 0) == (-5,)
    finally:
        mf.release()


def test_last_modified_ms(mf: MappedFile) -> None:
    os.utime(mf.path, ns=(1_700_000_000_123_000_000, 1_700_000_000_123_000_000))
    assert mf.last_modified_ms == 1_700_000_000_123


def test_read_only_open_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / f"{4096:020d}"
    writer = MappedFile(path, 4096)
    writer.append(b"original")
    writer.flush(0)
    writer.close()

    ro = MappedFile.open_readonly(path, 4096)
    assert ro.readonly and ro.is_full and ro.base_offset == 4096
    assert ro.read(0, 8) == b"original"
    for attempt in (
        lambda: ro.append(b"x"),
        lambda: ro.write_at(0, b"x"),
        lambda: ro.fill_to_end(b"x"),
        lambda: ro.destroy(0, FakeClock()),
    ):
        with pytest.raises(StoreNotWritableError):
            attempt()
    assert ro.flush(0) == ro.flushed_position
    with pytest.raises(TypeError):
        ro.buffer[0:1] = b"X"  # the mapping itself is ACCESS_READ
    ro.close()
    assert path.read_bytes()[:8] == b"original"


def test_read_only_open_checks_length(tmp_path: Path) -> None:
    empty = tmp_path / f"{0:020d}"
    empty.touch()
    with pytest.raises(StoreError):
        MappedFile.open_readonly(empty)
    sized = tmp_path / f"{4096:020d}"
    sized.write_bytes(b"\0" * 100)
    with pytest.raises(StoreError):
        MappedFile.open_readonly(sized, 4096)
    ro = MappedFile.open_readonly(sized)
    assert ro.file_size == 100
    ro.close()
