"""The store's single-writer lock: one writer per directory, across processes and within one,
with the POSIX record lock RocketMQ's ``FileChannel.tryLock`` takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mqcore.errors import StoreLockedError
from mqcore.store.files.lockfile import StoreLock

# A second process trying the lock exactly as a JVM's FileChannel.tryLock(0, 1, false) would
# on Linux: a non-blocking POSIX record lock on byte [0, 1).
TRY_IN_ANOTHER_PROCESS = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
except OSError:
    print("refused")
else:
    print("taken")
"""


def other_process_gets(lock_file: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", TRY_IN_ANOTHER_PROCESS, str(lock_file)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def test_the_lock_excludes_another_process_until_released(tmp_path: Path) -> None:
    lock = StoreLock(tmp_path)
    lock.acquire()
    assert lock.held
    assert other_process_gets(tmp_path / "lock") == "refused"
    lock.release()
    assert not lock.held
    # Read only now: opening and closing the file in the holding process would drop its lock.
    assert (tmp_path / "lock").read_bytes()[:4] == b"lock"  # as RocketMQ writes it
    assert other_process_gets(tmp_path / "lock") == "taken"


def test_a_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    # POSIX record locks belong to the process: without the registry the second lockf would
    # succeed, and closing it would silently drop the first one's lock.
    first = StoreLock(tmp_path)
    first.acquire()
    with pytest.raises(StoreLockedError, match="already open for writing in this process"):
        StoreLock(tmp_path).acquire()
    assert other_process_gets(tmp_path / "lock") == "refused"  # the first still holds
    first.release()
    second = StoreLock(tmp_path)
    second.acquire()
    second.release()


def test_a_lock_held_elsewhere_is_a_readable_error(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
            "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0); print('held', flush=True); sys.stdin.read()",
            str(tmp_path / "lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        lock = StoreLock(tmp_path)
        with pytest.raises(StoreLockedError, match="locked by another process"):
            lock.acquire()
        assert not lock.held
    finally:
        holder.communicate("", timeout=30)
    lock.acquire()  # free once the other process is gone
    lock.release()


def test_release_without_acquire_does_nothing(tmp_path: Path) -> None:
    StoreLock(tmp_path).release()
