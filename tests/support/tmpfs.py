"""Real small file systems for full-disk tests: a tmpfs mounted for the test, and a filler
file that uses up its space.

``mount -t tmpfs`` needs root (the CI containers run as root); where it fails, the tests
that need one skip, saying why. tmpfs counts space in pages, so "free" here is a multiple
of the page size.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PAGE = os.sysconf("SC_PAGE_SIZE")


@contextmanager
def mounted_tmpfs(directory: Path, size_bytes: int, *options: str) -> Iterator[Path]:
    """``directory`` with a fresh tmpfs of ``size_bytes`` (and mount ``options``, e.g.
    ``nr_inodes=64``) mounted on it for the block; skips the test when mounting is
    impossible (not root, no ``mount``)."""
    directory.mkdir(parents=True, exist_ok=True)
    opts = ",".join([f"size={size_bytes}", *options])
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(directory)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc}): full-disk tests need root")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()} (needs root)")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=30)


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def fill(directory: Path, leave_bytes: int = 0, name: str = "filler") -> Path:
    """Take every free byte of ``directory``'s file system but ``leave_bytes`` (rounded up
    to pages) with one file of reserved blocks; returns it (delete it to free the space)."""
    path = directory / name
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        chunk = 1 << 30
        while chunk >= PAGE:
            want = free_bytes(directory) - leave_bytes
            step = min(chunk, want - want % PAGE)
            if step < PAGE:
                chunk //= 2
                continue
            try:
                os.posix_fallocate(fd, size, step)
                size += step
            except OSError:
                chunk //= 2
    finally:
        os.close(fd)
    return path


def shrink(filler: Path, free_bytes_wanted: int) -> None:
    """Give ``free_bytes_wanted`` (rounded up to pages) back from a :func:`fill` file."""
    size = filler.stat().st_size
    cut = -(-free_bytes_wanted // PAGE) * PAGE
    os.truncate(filler, max(0, size - cut))
