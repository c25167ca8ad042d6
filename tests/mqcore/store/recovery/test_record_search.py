"""record_search: finding records again in a segment file with pread, and its data regions.

Segment files are written by hand: records made with ``encode_record`` at chosen positions,
garbage, zeros and holes (sparse files), so that every case is where the test says.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from mqcore.format.msgid import HostAddress
from mqcore.format.record import encode_blank, encode_record
from mqcore.store.recovery import record_search
from mqcore.store.recovery.record_search import SegmentFile

SIZE = 64 * 1024
BASE = 5 * SIZE  # the segment's first byte in the CommitLog


def record(phys: int, body: bytes = b"payload " * 10) -> bytes:
    return encode_record(
        topic="orders",
        queue_id=1,
        flag=0,
        queue_offset=7,
        phys_offset=phys,
        sys_flag=0,
        born_timestamp=1,
        born_host=HostAddress("10.0.0.1", 1),
        store_timestamp=2,
        store_host=HostAddress("10.0.0.2", 2),
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        properties=b"",
    )


def segment(tmp_path: Path, parts: dict[int, bytes], length: int = SIZE) -> SegmentFile:
    path = tmp_path / f"{BASE:020d}"
    with open(path, "wb") as f:
        f.truncate(length)  # sparse
        for pos, data in parts.items():
            f.seek(pos)
            f.write(data)
    return SegmentFile(path, SIZE)


def test_data_regions_skip_holes_and_nonzero_end_finds_the_last_byte(tmp_path: Path) -> None:
    with segment(tmp_path, {0: b"a" * 100, 40_000: b"b" * 10}) as f:
        regions = f.data_regions(0, SIZE)
        assert regions[0][0] == 0 and regions[-1][1] >= 40_010
        assert all(a < b for a, b in regions)
        # A hole between the two writes is not listed (filesystems with SEEK_DATA).
        assert not any(a <= 20_000 < b for a, b in regions) or len(regions) == 1
        assert f.nonzero_end(0, SIZE) == 40_010
        assert f.nonzero_end(100, 40_000) == 100
        assert f.data_end() >= 40_010
        assert f.read(SIZE - 4, 100) == bytes(4)  # clipped to the segment, zeros past data


def test_a_short_file_reads_as_zeros_to_the_segment_size(tmp_path: Path) -> None:
    with segment(tmp_path, {0: b"x" * 10}, length=1000) as f:
        assert f.length == 1000
        assert f.read(5, 10) == b"xxxxx" + bytes(5)
        assert f.read(990, 20) == bytes(20)
        assert f.nonzero_end(0, SIZE) == 10
        assert f.find_valid(0, SIZE, BASE) is None


def test_valid_at_needs_the_crc_and_its_own_phys_offset(tmp_path: Path) -> None:
    good = record(BASE + 300)
    elsewhere = record(BASE + 12345)  # a copy of a record at another offset
    damaged = bytearray(record(BASE + 3000))
    damaged[90] ^= 0xFF  # a body byte: the CRC no longer matches
    parts = {300: good, 1000: elsewhere, 3000: bytes(damaged), SIZE - 500: encode_blank(500)}
    with segment(tmp_path, parts) as f:
        assert f.valid_at(300, BASE) == "record"
        assert f.valid_at(1000, BASE) is None
        assert f.valid_at(3000, BASE) is None
        assert f.valid_at(SIZE - 500, BASE) == "blank"
        assert f.valid_at(SIZE - 400, BASE) is None
        assert f.find_valid(0, SIZE, BASE) == (300, "record")
        assert f.find_valid(301, SIZE, BASE) == (SIZE - 500, "blank")


@pytest.mark.parametrize("shift", range(-6, 7))
def test_a_record_is_found_across_chunk_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shift: int
) -> None:
    monkeypatch.setattr(record_search, "CHUNK_BYTES", 4096)
    at = 8192 + shift  # its magic (at + 4) on either side of a chunk boundary
    garbage = random.Random(shift).randbytes(at - 100).replace(b"\xda", b"\x00")
    with segment(tmp_path, {100: garbage, at: record(BASE + at)}) as f:
        assert f.find_valid(101, SIZE, BASE) == (at, "record")
        assert f.find_valid(101, at, BASE) is None  # the range's end is exclusive


def test_resume_after_prefers_pos_plus_totalsize_but_never_skips_a_record(
    tmp_path: Path,
) -> None:
    a = record(BASE)
    b = record(BASE + len(a))
    c = record(BASE + len(a) + len(b))
    bad = bytearray(a)
    bad[95] ^= 1  # body: a bad CRC, TOTALSIZE intact
    with segment(tmp_path, {0: bytes(bad), len(a): b, len(a) + len(b): c}) as f:
        assert f.resume_after(0, BASE) == (len(a), "record")
    # TOTALSIZE grown to land on c: b, in between, is found first.
    grown = bytearray(a)
    grown[0:4] = (len(a) + len(b)).to_bytes(4, "big")
    with segment(tmp_path, {0: bytes(grown), len(a): b, len(a) + len(b): c}) as f:
        assert f.resume_after(0, BASE) == (len(a), "record")
    # An implausible TOTALSIZE: found by its magic.
    huge = bytearray(a)
    huge[0:4] = (10 * SIZE).to_bytes(4, "big")
    with segment(tmp_path, {0: bytes(huge), len(a): b}) as f:
        assert f.resume_after(0, BASE) == (len(a), "record")
    # Nothing after it: None (a torn tail).
    with segment(tmp_path, {0: bytes(bad)}) as f:
        assert f.resume_after(0, BASE) is None


def test_write_zeros(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"z" * 5000)
    with SegmentFile(path, 5000, writable=True) as f:
        f.write_zeros(1000, 3000)
    assert path.read_bytes() == b"z" * 1000 + bytes(3000) + b"z" * 1000
    assert os.path.getsize(path) == 5000
