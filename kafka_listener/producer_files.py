"""The files of idempotent producers' state: read them at start, append to the journal,
write snapshots (formats in ``producer_journal.py``).

Layout (``<store>/kafka/producers/``)::

    00000000000000000006.snapshot   older generation: deleted once 7's snapshot is written
    00000000000000000006.journal
    00000000000000000007.snapshot   the state when generation 7 began
    00000000000000000007.journal    appended to since (the live journal)
    *.tmp                           a snapshot being written (removed at start)

Generations (Kafka's producer snapshots are named by log offset the same way): a new one
begins at every start and whenever the journal outgrows the snapshot (compaction). It
begins by switching appends to a new journal, ``G + 1``; the snapshot of the state at
that switch is then written to ``G + 1.snapshot.tmp``, synced and renamed, and only then
are generation ``G``'s files deleted. So at any moment the newest complete snapshot plus
the journals of its generation and later hold every entry, whatever was interrupted:
:func:`load_files` reads exactly that.

Durability: :meth:`JournalWriter.append` writes (one ``write`` per entry: a kill -9 never
loses it, the page cache keeps it); :meth:`JournalWriter.sync_until` makes the journal
durable up to an entry (``fdatasync``, one for every caller waiting meanwhile: group
commit as the CommitLog's ``flush_until`` does); a timer syncs whatever was appended within
``sync_interval_s`` (the CommitLog's async flush period) even when nobody waits.

Thread-safety: a :class:`JournalWriter` is thread-safe; :func:`load_files` and
:func:`write_snapshot` are plain functions for one caller.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from mqcore.errors import StoreError

from .producer_journal import (
    FILE_HEAD,
    JOURNAL_MAGIC,
    Entry,
    JournalFormatError,
    decode_entries,
    decode_file_head,
    decode_snapshot,
    encode_file_head,
    encode_snapshot,
)

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
JOURNAL_SUFFIX = ".journal"
TMP_SUFFIX = ".tmp"


def file_name(generation: int, suffix: str) -> str:
    return f"{generation:020d}{suffix}"


def _generations(directory: Path, suffix: str) -> list[int]:
    found = []
    for path in directory.glob(f"*{suffix}"):
        stem = path.name[: -len(suffix)]
        if len(stem) == 20 and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Loaded:
    """What :func:`load_files` found.

    Attributes:
        generation: the newest generation seen (-1: no files yet).
        entries: the snapshot's entries, then every later journal's, in order.
        problems: damage found (a snapshot that does not decode, a journal entry that
            fails its CRC before further entries); the entries after it are missing.
        torn_bytes: bytes of torn journal tails ignored (a crash mid-append).
    """

    generation: int = -1
    entries: list[Entry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    torn_bytes: int = 0


def load_files(directory: Path) -> Loaded:
    """Read the newest complete snapshot and the journals of its generation and later
    (see the module docstring). Removes leftover ``*.tmp`` files.

    Raises:
        OSError: the directory cannot be read.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for tmp in directory.glob(f"*{TMP_SUFFIX}"):
        tmp.unlink(missing_ok=True)
    loaded = Loaded()
    snapshots = _generations(directory, SNAPSHOT_SUFFIX)
    journals = _generations(directory, JOURNAL_SUFFIX)
    loaded.generation = max([*snapshots, *journals], default=-1)
    base = -1
    for generation in reversed(snapshots):
        path = directory / file_name(generation, SNAPSHOT_SUFFIX)
        try:
            found, entries = decode_snapshot(path.read_bytes())
        except JournalFormatError as exc:
            loaded.problems.append(f"{path.name}: {exc}")
            continue
        if found != generation:
            loaded.problems.append(f"{path.name}: holds generation {found}")
            continue
        base, loaded.entries = generation, entries
        break
    for generation in journals:
        if generation >= base:
            _read_journal(directory / file_name(generation, JOURNAL_SUFFIX), loaded)
    return loaded


def _read_journal(path: Path, loaded: Loaded) -> None:
    data = path.read_bytes()
    if not data.strip(b"\x00"):
        return  # created, head not yet written (or zeros): nothing in it
    try:
        decode_file_head(data, JOURNAL_MAGIC)
    except JournalFormatError as exc:
        if len(data) >= FILE_HEAD.size:
            loaded.problems.append(f"{path.name}: {exc}")
        return
    decoded = decode_entries(data, FILE_HEAD.size)
    loaded.entries += decoded.entries
    loaded.torn_bytes += decoded.torn_bytes
    if decoded.damage is not None:
        loaded.problems.append(f"{path.name}: {decoded.damage}")


def write_snapshot(directory: Path, generation: int, entries: list[Entry]) -> Path:
    """Write generation ``generation``'s snapshot whole: temporary file, fsync, rename,
    directory fsync.

    Raises:
        OSError: the file cannot be written (disk full, ...); nothing is renamed then.
    """
    path = directory / file_name(generation, SNAPSHOT_SUFFIX)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    data = encode_snapshot(generation, entries)
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(directory)
    return path


def remove_older(directory: Path, generation: int) -> None:
    """Delete the snapshots and journals of generations before ``generation``."""
    for suffix in (SNAPSHOT_SUFFIX, JOURNAL_SUFFIX):
        for old in _generations(directory, suffix):
            if old < generation:
                (directory / file_name(old, suffix)).unlink(missing_ok=True)


class JournalWriter:
    """Appends entries to the live journal; syncs it (see the module docstring)."""

    def __init__(self, directory: Path, generation: int, sync_interval_s: float) -> None:
        """Create generation ``generation``'s journal (it must not exist).

        Raises:
            OSError: the file cannot be created.
        """
        self.directory = directory
        self.sync_interval_s = sync_interval_s
        self._lock = threading.Lock()  # appends and the switch to a new journal
        self._sync_lock = threading.Lock()  # one fdatasync at a time
        self._timer: threading.Timer | None = None
        self._closed = False
        self.generation = -1
        self._fd = -1
        self._finalizer: weakref.finalize[..., JournalWriter] | None = None
        self.written = 0  # bytes of the live journal
        self._synced = 0  # of the live journal, durable
        self._open(generation)

    def _open(self, generation: int) -> None:
        path = self.directory / file_name(generation, JOURNAL_SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            head = encode_file_head(JOURNAL_MAGIC, generation)
            os.write(fd, head)
            os.fdatasync(fd)
            fsync_directory(self.directory)
        except BaseException:
            os.close(fd)
            raise
        if self._finalizer is not None:
            self._finalizer.detach()
        self._fd, self.generation = fd, generation
        self._finalizer = weakref.finalize(self, os.close, fd)  # if never closed (tests)
        self.written = self._synced = len(head)

    @property
    def synced(self) -> int:
        """Bytes of the live journal known to be on disk."""
        return self._synced

    def append(self, data: bytes) -> tuple[int, int]:
        """Write one or more whole entries at the end of the live journal.

        Returns:
            ``(generation, end)``: where the entries end, for :meth:`sync_until`.

        Raises:
            StoreError: the journal is closed, or the write failed (disk full, ...).
        """
        with self._lock:
            if self._closed:
                raise StoreError("the Kafka producer journal is closed")
            try:
                written = os.write(self._fd, data)
            except OSError as exc:
                raise StoreError(f"cannot write the Kafka producer journal: {exc}") from exc
            if written != len(data):  # a short write on a full disk: cut back
                self._cut_back_locked()
                raise StoreError("cannot write the Kafka producer journal: short write")
            self.written += written
            if self._timer is None and self.sync_interval_s > 0:
                self._timer = threading.Timer(self.sync_interval_s, self._timed_sync)
                self._timer.daemon = True
                self._timer.name = "kafka-producer-journal-sync"
                self._timer.start()
            return self.generation, self.written

    def _cut_back_locked(self) -> None:
        try:
            os.ftruncate(self._fd, self.written)
        except OSError:
            log.exception("cannot cut the Kafka producer journal back to %d", self.written)

    def sync_until(self, position: tuple[int, int]) -> None:
        """Return once the journal is durable up to ``position`` (from :meth:`append`).

        Raises:
            StoreError: fdatasync failed.
        """
        generation, end = position
        if generation != self.generation or self._synced >= end:
            return  # an older journal was synced when it was switched away from
        with self._sync_lock:
            if generation != self.generation or self._synced >= end:
                return
            target = self.written
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                raise StoreError(f"cannot sync the Kafka producer journal: {exc}") from exc
            self._synced = max(self._synced, target)

    def _timed_sync(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed:
                return
            position = (self.generation, self.written)
        try:
            self.sync_until(position)
        except StoreError:
            log.exception("Kafka producer journal: periodic sync failed")

    def switch(self, generation: int) -> None:
        """Sync and close the live journal, then append to a new one, ``generation``.
        The caller makes sure no entry is appended meanwhile (it holds the state's lock).

        Raises:
            OSError: the new journal cannot be created (the old one stays live).
        """
        with self._lock, self._sync_lock:
            if self._closed:
                raise StoreError("the Kafka producer journal is closed")
            os.fdatasync(self._fd)
            old_fd, finalizer = self._fd, self._finalizer
            self._finalizer = None
            try:
                self._open(generation)
            except BaseException:
                self._finalizer = finalizer
                raise
            if finalizer is not None:
                finalizer.detach()
            os.close(old_fd)

    def close(self) -> None:
        """Sync and close (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        with self._sync_lock:
            try:
                os.fdatasync(self._fd)
            except OSError:
                log.exception("Kafka producer journal: sync at close failed")
            if self._finalizer is not None:
                self._finalizer.detach()
            os.close(self._fd)
