"""The store's single-writer lock, ``<root>/lock`` (spec 5.3).

RocketMQ takes ``FileChannel.tryLock(0, 1, false)``, which on Linux is a POSIX record lock,
so this uses ``fcntl.lockf`` on byte range [0, 1) rather than ``flock``: a RocketMQ broker and
a Cairn broker on the same directory exclude each other. The four ASCII bytes ``lock`` are
written at offset 0 and forced, as RocketMQ does.

POSIX record locks belong to the process, not the file descriptor: a second open of the same
lock file *in the same process* would succeed, and closing any descriptor of it drops the lock.
:class:`StoreLock` therefore also keeps a process-wide registry of held paths.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from mqcore.errors import StoreLockedError

_held: set[str] = set()
_held_guard = threading.Lock()


class StoreLock:
    """Exclusive writer lock on a store directory. Not reentrant."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`StoreLockedError` at once (never waits)."""
        key = str(self.path.resolve())
        with _held_guard:
            if key in _held:
                raise StoreLockedError(
                    f"store {self.path.parent} is already open for writing in this process"
                )
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError:
                os.close(fd)
                raise StoreLockedError(
                    f"store {self.path.parent} is locked by another process "
                    "(a broker is already running on it)"
                ) from None
            os.pwrite(fd, b"lock", 0)
            os.fsync(fd)
            self._fd = fd
            _held.add(key)

    def release(self) -> None:
        if self._fd is None:
            return
        with _held_guard:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
            finally:
                os.close(self._fd)
                self._fd = None
                _held.discard(str(self.path.resolve()))

    @property
    def held(self) -> bool:
        return self._fd is not None
