"""POSIX directory segment backend (RocketMQ ``PosixFileSegment``): another disk, or a mounted
object store.

Path layout, exactly as spec 10 gives it (``md5`` is the lowercase hex MD5 of the UTF-8 text)::

    {root}/{md5(cluster)[0:8]}_{cluster}/{broker}/{topic}/{queueId}/{TYPE}/{md5(str(base))[0:8]}{base:020d}

where ``TYPE`` is ``COMMIT_LOG``, ``CONSUME_QUEUE`` or ``INDEX`` and ``base`` the segment's
base offset. The MD5 prefix spreads object keys over an object store's partitions.

Seal = an empty marker file next to the segment, named ``<segment file>.sealed`` (chosen over
a read-only mode bit because FUSE-mounted object stores often ignore ``chmod``, and over a
metadata flag so that the backend alone answers ``is_sealed``). Listing skips the markers.

Durability: ``create`` fsyncs the new file and its directory; ``append`` writes at the
expected position with ``os.pwrite`` and fsyncs before returning. A crash mid-append can leave
a partial tail; the next ``append`` then sees a size other than the one it expects and raises
:class:`SegmentPositionError`, and the flat file's resume truncates back to its commit
position. Thread-safety: one lock serialises every method (appends to one queue are serial
anyway; uploads of different queues are I/O-bound and short).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from mqcore.tiered.backend import (
    SegmentBackend,
    SegmentExistsError,
    SegmentId,
    SegmentMissingError,
    SegmentPositionError,
    SegmentSealedError,
    SegmentType,
    check_range,
    check_truncate,
)

SEALED_SUFFIX = ".sealed"
#: File names are 8 hex digits of MD5 plus 20 decimal digits.
_HASH_LENGTH = 8
_NAME_LENGTH = _HASH_LENGTH + 20


def md5_prefix(text: str) -> str:
    """The first 8 lowercase hex digits of MD5 over ``text`` (UTF-8)."""
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:_HASH_LENGTH]


def segment_file_name(base_offset: int) -> str:
    """``{md5(str(base))[0:8]}{base:020d}``."""
    return f"{md5_prefix(str(base_offset))}{base_offset:020d}"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PosixBackend(SegmentBackend):
    """Segments as files under ``root``. Thread-safe (one lock).

    Args:
        root: ``tieredStoreFilePath``.
        cluster: ``brokerClusterName``.
        broker: ``brokerName``.
    """

    def __init__(self, root: str | os.PathLike[str], cluster: str, broker: str) -> None:
        self.root = Path(root)
        self.cluster = cluster
        self.broker = broker
        self.base_dir = self.root / f"{md5_prefix(cluster)}_{cluster}" / broker
        self._lock = threading.Lock()

    def type_dir(self, topic: str, queue_id: int, type: SegmentType) -> Path:
        """The directory holding one queue's segments of one type."""
        return self.base_dir / topic / str(queue_id) / type.name

    def path(self, segment: SegmentId) -> Path:
        """The file of ``segment`` (spec 10 layout)."""
        return self.type_dir(segment.topic, segment.queue_id, segment.type) / segment_file_name(
            segment.base_offset
        )

    def _existing_path(self, segment: SegmentId) -> Path:
        path = self.path(segment)
        if not path.is_file():
            raise SegmentMissingError(segment)
        return path

    def create(self, segment: SegmentId) -> None:
        path = self.path(segment)
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                raise SegmentExistsError(segment) from None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(path.parent)

    def exists(self, segment: SegmentId) -> bool:
        return self.path(segment).is_file()

    def size(self, segment: SegmentId) -> int:
        with self._lock:
            return self._existing_path(segment).stat().st_size

    def read(self, segment: SegmentId, position: int, length: int) -> bytes:
        check_range(position, length)
        try:
            with open(self.path(segment), "rb") as f:
                f.seek(position)
                return f.read(length)
        except FileNotFoundError:
            raise SegmentMissingError(segment) from None

    def append(self, segment: SegmentId, data: bytes, position: int) -> int:
        with self._lock:
            path = self._existing_path(segment)
            if Path(str(path) + SEALED_SUFFIX).exists():
                raise SegmentSealedError(segment)
            fd = os.open(path, os.O_WRONLY)
            try:
                actual = os.fstat(fd).st_size
                if actual != position:
                    raise SegmentPositionError(segment, position, actual)
                view = memoryview(data)
                offset = position
                while view:
                    written = os.pwrite(fd, view, offset)
                    view = view[written:]
                    offset += written
                os.fsync(fd)
                return offset
            finally:
                os.close(fd)

    def seal(self, segment: SegmentId) -> None:
        with self._lock:
            path = self._existing_path(segment)
            marker = Path(str(path) + SEALED_SUFFIX)
            if not marker.exists():
                marker.touch()
                _fsync_dir(path.parent)

    def is_sealed(self, segment: SegmentId) -> bool:
        with self._lock:
            path = self._existing_path(segment)
            return Path(str(path) + SEALED_SUFFIX).exists()

    def truncate(self, segment: SegmentId, size: int) -> None:
        with self._lock:
            path = self._existing_path(segment)
            check_truncate(segment, size, path.stat().st_size)
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            finally:
                os.close(fd)
            Path(str(path) + SEALED_SUFFIX).unlink(missing_ok=True)

    def delete(self, segment: SegmentId) -> None:
        path = self.path(segment)
        with self._lock:
            Path(str(path) + SEALED_SUFFIX).unlink(missing_ok=True)
            path.unlink(missing_ok=True)

    def list_segments(self, topic: str, queue_id: int, type: SegmentType) -> list[int]:
        directory = self.type_dir(topic, queue_id, type)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        bases: list[int] = []
        for name in names:
            digits = name[_HASH_LENGTH:]
            if len(name) == _NAME_LENGTH and digits.isdigit():
                base = int(digits)
                if name == segment_file_name(base):
                    bases.append(base)
        return sorted(bases)
