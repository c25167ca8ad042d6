"""``libc.msync_range``: the C library's msync (which runs without the GIL), its errors,
and ``mmap.flush`` where the C function is missing."""

from __future__ import annotations

import errno
import mmap
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.store.files import libc

SIZE = 1 << 20


@pytest.fixture
def mapping(tmp_path: Path) -> Iterator[mmap.mmap]:
    path = tmp_path / "segment"
    path.write_bytes(bytes(SIZE))
    with path.open("r+b") as f, mmap.mmap(f.fileno(), SIZE) as mm:
        yield mm


@pytest.mark.skipif(libc.msync() is None, reason="no msync in the C library")
def test_msync_range_goes_through_the_c_library(
    mapping: mmap.mmap, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = libc.msync()
    assert real is not None
    calls: list[tuple[int, int, int]] = []

    def recording(address: int, length: int, flags: int) -> int:
        calls.append((address, length, flags))
        return real(address, length, flags)

    monkeypatch.setitem(libc._functions, "msync", recording)
    mapping[4096:4100] = b"data"
    address = libc.msync_range(mapping, None, 4096, 8192)
    assert address == libc.map_address(mapping)
    assert calls == [(address + 4096, 8192, libc.MS_SYNC)]
    assert libc.msync_range(mapping, address, 0, SIZE) == address  # the address is kept
    assert (tmp_path / "segment").read_bytes()[4096:4100] == b"data"


@pytest.mark.skipif(libc.msync() is None, reason="no msync in the C library")
def test_a_failed_msync_raises_with_its_errno(mapping: mmap.mmap) -> None:
    with pytest.raises(OSError) as info:
        libc.msync_range(mapping, None, 1, 10)  # not page-aligned
    assert info.value.errno == errno.EINVAL


def test_without_the_c_function_mmap_flushes(
    mapping: mmap.mmap, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(libc._functions, "msync", None)
    mapping[0:4] = b"abcd"
    assert libc.msync_range(mapping, None, 0, 4096) is None
    assert (tmp_path / "segment").read_bytes()[:4] == b"abcd"
