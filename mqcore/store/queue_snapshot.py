"""``<root>/queue_offsets``: every queue's next queue offset, and the CommitLog offset it holds at.

The ConsumeQueues are derived files: they can be deleted, cut short or damaged while the
CommitLog keeps every record. The next queue offset of each queue (what a put gets) must not
come from them alone, or a lost ConsumeQueue directory would make its queue start again at 0
and hand out offsets that acknowledged messages already hold. This file is the second
witness: a small snapshot of the writer's queue offset table (``CommitLog.queue_offsets``,
assigned at append time) together with the CommitLog offset it was taken at.

Layout (big-endian; one ``struct.Struct`` each)::

    header  (SNAPSHOT_HEADER)
    offset  width  field
         0      4  magic          b"CQOS"
         4      2  version        1
         6      2  reserved       0
         8      8  log_offset     CommitLog end when the table was copied: every record
                                  below it is counted in the entries
        16      4  entry_count
        20      4  crc            CRC-32 of the header with this field zero, then the entries

    entry   (SNAPSHOT_ENTRY), ``entry_count`` times, then the topic's UTF-8 bytes
    offset  width  field
         0      4  queue_id
         4      8  next_offset    one past the highest queue offset of any record below
                                  ``log_offset``
        12      8  last_phys_end  end (offset + size) of the queue's last record in the
                                  CommitLog, -1 if unknown: below the CommitLog's start, the
                                  queue's records are all expired and its files may be gone
        20      2  topic_length

Invariants:
    * Taken under the CommitLog's put lock, so ``next_offset`` values and ``log_offset`` agree:
      a record at or past ``log_offset`` was appended after the copy.
    * At start (``derived_start.py``) the table is ``max(ConsumeQueue ends, next_offset,
      1 + queue offset of every record in [log_offset, end))``: offsets never go back, and
      the scan after ``log_offset`` costs what was written since the last snapshot (nothing
      after a clean close).
    * A snapshot whose ``log_offset`` lies past the recovered CommitLog end (a power loss
      under async flush took the tail) is not used: its counts include lost records.

Crash behaviour: written like the checkpoint (``queue_offsets.tmp``, fsync, rename, fsync the
directory), so the file is always a whole old or a whole new snapshot; the CRC catches a
damaged one, which is then ignored (the ConsumeQueues alone decide, as before this file
existed) and rewritten at the next snapshot. Deleting a topic marks its entries as expired
(``last_phys_end`` 0): a deleted topic must not be taken for a lost ConsumeQueue and rebuilt,
and a topic created again under its name goes on from its offsets, after a restart too.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mqcore.store.files.mapped_file import fsync_directory

log = logging.getLogger(__name__)

FILE_NAME = "queue_offsets"
MAGIC = b"CQOS"
VERSION = 1

SNAPSHOT_HEADER = struct.Struct(
    ">"
    "4s"  # magic b"CQOS"
    "H"  # version
    "H"  # reserved
    "q"  # log_offset: CommitLog end when the table was copied
    "I"  # entry_count
    "I"  # crc: CRC-32 of the header (crc zero) and the entries
)
SNAPSHOT_ENTRY = struct.Struct(
    ">"
    "i"  # queue_id
    "q"  # next_offset
    "q"  # last_phys_end: end of the queue's last record, -1 if unknown
    "H"  # topic_length, then the topic's UTF-8 bytes
)

type QueueKey = tuple[str, int]

#: One lock per store directory: a snapshot write and a topic deletion never interleave.
_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class QueueEntry:
    next_offset: int
    last_phys_end: int = -1


@dataclass
class QueueOffsetSnapshot:
    """What the file holds: ``log_offset`` and each queue's :class:`QueueEntry`."""

    log_offset: int
    entries: dict[QueueKey, QueueEntry] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        body = bytearray()
        for (topic, queue_id), entry in sorted(self.entries.items()):
            raw = topic.encode()
            body += SNAPSHOT_ENTRY.pack(queue_id, entry.next_offset, entry.last_phys_end, len(raw))
            body += raw
        head = SNAPSHOT_HEADER.pack(MAGIC, VERSION, 0, self.log_offset, len(self.entries), 0)
        crc = zlib.crc32(body, zlib.crc32(head))
        return SNAPSHOT_HEADER.pack(MAGIC, VERSION, 0, self.log_offset, len(self.entries), crc) + (
            bytes(body)
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> QueueOffsetSnapshot:
        """Decode a file image.

        Raises:
            ValueError: not a snapshot, another version, a CRC mismatch or a cut entry.
        """
        if len(data) < SNAPSHOT_HEADER.size:
            raise ValueError(f"{len(data)} bytes, shorter than the header")
        magic, version, _reserved, log_offset, count, crc = SNAPSHOT_HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"not a version {VERSION} snapshot (magic {magic!r}, v{version})")
        head = SNAPSHOT_HEADER.pack(magic, version, _reserved, log_offset, count, 0)
        if zlib.crc32(data[SNAPSHOT_HEADER.size :], zlib.crc32(head)) != crc:
            raise ValueError("CRC mismatch")
        entries: dict[QueueKey, QueueEntry] = {}
        pos = SNAPSHOT_HEADER.size
        for _ in range(count):
            queue_id, next_offset, last_phys_end, length = SNAPSHOT_ENTRY.unpack_from(data, pos)
            pos += SNAPSHOT_ENTRY.size
            topic = data[pos : pos + length].decode()
            pos += length
            entries[(topic, queue_id)] = QueueEntry(next_offset, last_phys_end)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} bytes after the last entry")
        return cls(log_offset, entries)


def path_of(root: str | os.PathLike[str]) -> Path:
    return Path(root) / FILE_NAME


def _lock_of(root: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(root.resolve(), threading.Lock())


def read(root: str | os.PathLike[str]) -> QueueOffsetSnapshot | None:
    """The snapshot of the store at ``root``; None when there is none or it is damaged
    (logged: the ConsumeQueues alone then decide the queue offsets)."""
    path = path_of(root)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return QueueOffsetSnapshot.from_bytes(data)
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        log.error("%s is damaged (%s): queue offsets come from the ConsumeQueues alone", path, exc)
        return None


def write(root: str | os.PathLike[str], snapshot: QueueOffsetSnapshot) -> None:
    """Replace the file atomically (temp file, fsync, rename, fsync the directory).

    Raises:
        OSError: the write failed; the previous file is left intact.
    """
    root = Path(root)
    with _lock_of(root):
        _write_locked(root, snapshot)


def _write_locked(root: Path, snapshot: QueueOffsetSnapshot) -> None:
    path = path_of(root)
    tmp = path.with_name(FILE_NAME + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(snapshot.to_bytes())
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(root)


def mark_deleted(root: str | os.PathLike[str], topic: str) -> None:
    """``topic`` was deleted: its entries keep their next offsets (a topic created again
    under the name goes on from them) but say ``last_phys_end`` 0, like a queue whose
    records all expired, so that its missing files are not taken for lost ones and rebuilt
    (which would bring the deleted messages back). Thread-safe with :func:`write`.

    Raises:
        OSError: the file could not be rewritten.
    """
    root = Path(root)
    with _lock_of(root):
        snapshot = read(root)
        if snapshot is None:
            return
        marked = deleted_topic(snapshot, topic)
        if marked != snapshot:
            _write_locked(root, marked)


def deleted_topic(snapshot: QueueOffsetSnapshot, topic: str) -> QueueOffsetSnapshot:
    """``snapshot`` with ``topic``'s entries marked deleted (:func:`mark_deleted`)."""
    return QueueOffsetSnapshot(
        snapshot.log_offset,
        {
            key: QueueEntry(e.next_offset, 0) if key[0] == topic else e
            for key, e in snapshot.entries.items()
        },
    )


def write_if_changed(
    root: str | os.PathLike[str],
    take: Callable[[], QueueOffsetSnapshot],
    last_written: QueueOffsetSnapshot | None,
) -> QueueOffsetSnapshot:
    """``take()`` a snapshot under the file lock and write it unless it equals
    ``last_written``. Returns the snapshot taken (the caller passes it back next time)."""
    root = Path(root)
    with _lock_of(root):
        snapshot = take()
        if last_written is None or snapshot != last_written:
            _write_locked(root, snapshot)
        return snapshot
