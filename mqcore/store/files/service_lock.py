"""Per-service locks, ``<root>/locks/<service>``: one runner per service (STYLE 7).

A service that writes derived files (reput, flush, cleanup, index) runs in exactly one place
at a time: two Celery workers, or a worker and a broker that also runs the services in
process, must never both dispatch into the same ConsumeQueue. Each service therefore takes an
exclusive ``fcntl.flock`` on its own file. A runner that cannot take it does nothing and
reports ``skipped``.

``flock`` rather than the POSIX record lock of ``<root>/lock`` (``lockfile.py``): flock
belongs to the open file description, so two threads of one process (Celery's thread pool)
that open the file separately exclude each other too, and the kernel drops it when the
holder dies, however it dies. The file holds the holder's pid and host name, for humans.

A store opened with ``role="standalone"`` (services in the broker process) takes the locks of
the continuous services for as long as it is open, so a stray worker can never run them
beside it (:class:`ServiceLocks`).
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterable
from pathlib import Path

from mqcore.errors import StoreLockedError

#: The services whose runner must be unique, in the order a standalone store takes them.
CONTINUOUS_SERVICES = ("reput", "flush", "cleanup")


def lock_path(root: str | os.PathLike[str], service: str) -> Path:
    return Path(root) / "locks" / service


class ServiceLock:
    """An exclusive, non-blocking lock on ``<root>/locks/<service>``. Not reentrant across
    instances; one instance is idempotent (``try_acquire`` when held returns True)."""

    def __init__(self, root: str | os.PathLike[str], service: str) -> None:
        self.service = service
        self.path = lock_path(root, service)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if free. Never waits.

        Returns:
            True if this instance holds the lock now, False if another holder has it.

        Raises:
            OSError: the lock file cannot be created.
        """
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return True

    def holder(self) -> str:
        """What the lock file says about its last holder ("pid host"), or ""."""
        try:
            return self.path.read_text().strip()
        except FileNotFoundError:
            return ""

    def release(self) -> None:
        """Drop the lock (no-op if not held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


class ServiceLocks:
    """Several service locks taken together, all or none (a standalone store's)."""

    def __init__(self, root: str | os.PathLike[str], services: Iterable[str]) -> None:
        self.locks = [ServiceLock(root, name) for name in services]

    def acquire_all(self) -> None:
        """Take every lock or none.

        Raises:
            StoreLockedError: another runner (a Celery worker) holds one of them.
        """
        for i, lock in enumerate(self.locks):
            if not lock.try_acquire():
                for taken in self.locks[:i]:
                    taken.release()
                raise StoreLockedError(
                    f"the {lock.service} service of store {lock.path.parent.parent} is run "
                    f"elsewhere (held by {lock.holder() or 'another process'}): a Celery worker "
                    "runs this store's services, so start the broker with CAIRN_SERVICES=celery "
                    "or stop the workers first"
                )

    def release_all(self) -> None:
        for lock in self.locks:
            lock.release()
