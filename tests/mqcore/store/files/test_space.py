"""Disk space: reserving a file's blocks before writing through a mapping, a full disk as a
``DiskFullError``, and finding where written data ends without reading holes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mqcore.errors import DiskFullError
from mqcore.store.files import space
from tests.support.tmpfs import PAGE, mounted_tmpfs

MIB = 1 << 20


def sparse_file(path: Path, size: int, writes: dict[int, bytes]) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
        for pos, data in writes.items():
            f.seek(pos)
            f.write(data)
    return path


def test_reserve_allocates_blocks_without_writing_or_growing(tmp_path: Path) -> None:
    path = sparse_file(tmp_path / "seg", 8 * MIB, {})
    before = os.stat(path).st_blocks
    fd = os.open(path, os.O_RDWR)
    try:
        space.reserve(fd, MIB, 4 * MIB, path)
        space.reserve(fd, 0, 0, path)  # nothing to do
    finally:
        os.close(fd)
    st = os.stat(path)
    assert st.st_size == 8 * MIB
    assert (st.st_blocks - before) * 512 >= 4 * MIB
    assert path.read_bytes() == bytes(8 * MIB)


def test_reserve_on_a_full_file_system_raises_disk_full(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "small", 16 * PAGE) as mount:
        path = sparse_file(mount / "seg", 64 * PAGE, {})
        fd = os.open(path, os.O_RDWR)
        try:
            with pytest.raises(DiskFullError, match=r"^disk full: reserving .* failed \("):
                space.reserve(fd, 0, 64 * PAGE, path)
        finally:
            os.close(fd)


def test_disk_full_is_told_from_other_errors() -> None:
    assert space.is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert space.is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not space.is_disk_full(OSError(errno.EIO, "Input/output error"))
    assert not space.is_disk_full(ValueError("no"))
    error = space.disk_full_error(OSError(errno.ENOSPC, "x"), "appending to seg")
    assert str(error) == f"disk full: appending to seg failed ({os.strerror(errno.ENOSPC)})"


def test_data_ranges_and_nonzero_end_skip_holes(tmp_path: Path) -> None:
    path = sparse_file(tmp_path / "seg", 16 * MIB, {MIB: b"a" * 100, 9 * MIB: b"b\0\0"})
    ranges = space.data_ranges(path, 0, 16 * MIB)
    assert ranges and all(0 <= a < b <= 16 * MIB for a, b in ranges)
    covered = [(a, b) for a, b in ranges if a <= MIB < b or a <= 9 * MIB < b]
    assert len(covered) == 2  # both written places are data; the rest may be holes
    assert space.nonzero_end(path, 0, 16 * MIB) == 9 * MIB + 1
    assert space.nonzero_end(path, 0, 9 * MIB) == MIB + 100
    assert space.nonzero_end(path, 2 * MIB, 9 * MIB) == 2 * MIB  # nothing there
    assert space.data_ranges(path, 10 * MIB, 16 * MIB) == []


def test_usage_ratio_measures_the_nearest_existing_parent(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "small", 100 * PAGE) as mount:
        empty = space.usage_ratio(str(mount / "not" / "yet"))
        sparse_file(mount / "fill", 50 * PAGE, {i * PAGE: b"x" for i in range(50)})
        half = space.usage_ratio(str(mount))
    assert empty == 0.0
    assert 0.5 <= half <= 0.52  # ceil to the percent, as RocketMQ


def test_used_ratio_is_dfs_use_percent_and_the_partition_is_named(tmp_path: Path) -> None:
    """What the overview shows is the guard's figure: used / (used + available), rounded up
    as df's Use% is; and the partition's mount point and type."""
    st = os.statvfs(tmp_path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    assert space.used_ratio(used, usable) == space.usage_ratio(str(tmp_path))
    assert space.used_ratio(1, 2) == 0.34 and space.used_ratio(0, 0) == 0.0
    mount, fs_type = space.partition_of(tmp_path / "not" / "yet")
    assert os.path.ismount(mount) and str(tmp_path).startswith(mount)
    assert fs_type != ""
