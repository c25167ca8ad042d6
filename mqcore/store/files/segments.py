"""An ordered run of equal-size segment files: the CommitLog's and each ConsumeQueue's files.

Directory layout (spec 2.1, 2.2)::

    <directory>/00000000000000000000      first file, base_offset 0
    <directory>/00000000001073741824      base_offset = previous + file_size
    <directory>/...                       anything else (sub-directories, ``*.tmp``) is ignored

Offsets are absolute in the queue's byte space: ``offset`` lies in the file whose
``base_offset <= offset < base_offset + file_size``, at position ``offset - base_offset``
(``offset % file_size`` for the aligned names every writer produces).

Invariants:
    * Files are sorted by ``base_offset`` and adjacent ones differ by exactly ``file_size``;
      no holes: cleanup removes files only from the front, truncation only from the back.
    * Every file but the last is full (after ``load`` every file is, until recovery calls
      ``truncate_dirty``).
    * ``min_offset <= flushed_where <= max_offset`` once the queue has been written to.

Concurrency: the file list is copy-on-write (RocketMQ's ``CopyOnWriteArrayList``). Mutations
(create, truncate, delete) take ``_lock`` and publish a new tuple; readers use whatever tuple
they picked up, so a file they found may be destroyed under them: they ``hold()`` it (or use
``MappedFile.view``) and treat a failed hold as "gone".

Crash behaviour: nothing here is persisted beyond the files. A crash while creating a file
leaves a zero-length last file (deleted by ``load``); a crash during cleanup leaves the
surviving files contiguous because deletion goes strictly front to back.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

from mqcore.clock import Clock, SystemClock
from mqcore.errors import StoreError, StoreNotWritableError
from mqcore.store.files.mapped_file import MappedFile, fsync_directory

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"[0-9]{20}")

#: RocketMQ's ``truncateDirtyFiles`` destroys with a 1 s force interval.
TRUNCATE_FORCE_AFTER_MS = 1000
#: ``destroyMapedFileIntervalForcibly`` (spec 6.4).
CLEANUP_FORCE_AFTER_MS = 120_000
#: Disk blocks a file reserves at a time unless its owner says otherwise (the CommitLog
#: does: ``prefault.reserve_chunk_bytes``). 1 MiB of ConsumeQueue is 52,428 units: a
#: reservation every 52k messages of a queue, ~0.01 ms on ext4, ~0.3 ms on tmpfs.
RESERVE_CHUNK_BYTES = 1 << 20


class MappedFileQueue:
    """The files of one directory, in offset order.

    Thread-safety: one writer thread (``last_or_create``, ``roll``, appends through the files
    it returns, ``truncate_dirty``), one flusher (``flush``) and one cleaner (``delete_*``)
    may run concurrently with any number of readers (``files``, ``first``, ``last``,
    ``find``, ``min_offset``, ``max_offset``). ``load`` and ``close``/``destroy`` are
    single-threaded (startup, shutdown).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        file_size: int,
        *,
        readonly: bool = False,
        clock: Clock | None = None,
        reserve_chunk_bytes: int | None = RESERVE_CHUNK_BYTES,
    ) -> None:
        """Describe the queue; nothing is read until ``load``.

        Args:
            directory: where the files live (created on the first file if missing).
            file_size: every file's size in bytes.
            readonly: map with ``ACCESS_READ``; every mutation raises.
            clock: times forced unmaps (default the system clock).
            reserve_chunk_bytes: disk blocks each file reserves at a time before it is
                written (``MappedFile``): 1 MiB by default (a ConsumeQueue file of 6 MB
                takes its disk as it fills; on tmpfs that is memory); None: a new file whole.
        """
        if file_size <= 0:
            raise ValueError(f"file_size must be > 0, got {file_size}")
        self.directory = Path(directory)
        self.file_size = file_size
        self.readonly = readonly
        self.reserve_chunk_bytes = reserve_chunk_bytes
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._files: tuple[MappedFile, ...] = ()
        self._lock = threading.Lock()
        self._flushed_where = 0
        #: Files ``load`` found cut short, as ``(path, length found)``; extended with zeros.
        self.extended_files: list[tuple[Path, int]] = []
        #: Store time of the last record of the file flushed by the last thorough
        #: (``least_pages == 0``) flush: the CommitLog's physicMsgTimestamp (spec 5.1).
        self.store_timestamp_ms = 0

    def __repr__(self) -> str:
        return f"MappedFileQueue({self.directory}, files={len(self._files)})"

    # -- loading ----------------------------------------------------------------------------

    def load(self) -> None:
        """Map the directory's files (spec 2.2); all are marked full until recovery.

        Startup only, once, before any other thread uses the queue.

        Sorted by name; sub-directories and names that are not 20 digits are skipped; a
        zero-length last file is deleted (left alone when read-only).

        A file shorter than ``file_size`` is extended with zeros (mapped at its own length
        when read-only) and listed in :attr:`extended_files` as ``(path, original length)``.

        Raises:
            StoreError: a file is longer than ``file_size``, or two adjacent files do not
                differ by ``file_size``.
        """
        if not self.directory.is_dir():
            self._files = ()
            return
        paths = sorted(
            entry
            for entry in self.directory.iterdir()
            if _SEGMENT_NAME.fullmatch(entry.name) and entry.is_file()
        )
        if paths and paths[-1].stat().st_size == 0:
            if not self.readonly:
                log.warning("%s: deleting zero-length last file", paths[-1])
                paths[-1].unlink()
            paths.pop()
        self.extended_files = []
        for previous, path in zip([None, *paths], paths, strict=False):
            length = path.stat().st_size
            if length > self.file_size:
                raise StoreError(
                    f"{path}: length {length} bytes but the configured file size is "
                    f"{self.file_size}; check the segment size setting before starting"
                )
            if length < self.file_size:
                # Cut short (a copy that stopped, a damaged disk): what it still holds is
                # good data. Zeros extend it back to its size; the owner decides what the
                # missing part means (the CommitLog recovers up to the last valid record,
                # a derived file is rebuilt).
                self.extended_files.append((path, length))
                if not self.readonly:
                    log.error(
                        "%s: %d bytes instead of %d (cut short); extended with zeros",
                        path, length, self.file_size,
                    )  # fmt: skip
                    os.truncate(path, self.file_size)
            if previous is not None and int(path.name) - int(previous.name) != self.file_size:
                raise StoreError(
                    f"{path}: does not follow {previous.name} by {self.file_size} bytes "
                    "(a file is missing or misnamed)"
                )
        files: list[MappedFile] = []
        try:
            for path in paths:
                if self.readonly:
                    short = path.stat().st_size < self.file_size
                    files.append(MappedFile.open_readonly(path, None if short else self.file_size))
                else:
                    files.append(self._map(path))
                    files[-1].set_positions(self.file_size)
        except BaseException:
            for opened in files:
                opened.close()
            raise
        self._files = tuple(files)

    # -- lookups (any thread) ---------------------------------------------------------------

    @property
    def files(self) -> tuple[MappedFile, ...]:
        """A snapshot of the files, oldest first. Thread-safe."""
        return self._files

    def first(self) -> MappedFile | None:
        """The oldest file, if any. Thread-safe."""
        files = self._files
        return files[0] if files else None

    def last(self) -> MappedFile | None:
        """The newest file, if any. Thread-safe."""
        files = self._files
        return files[-1] if files else None

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset``, or None if it lies outside every file.

        Index arithmetic ``offset // size - first_base // size`` (spec 2.2), with a linear
        scan if that misses (unaligned names). Thread-safe; hold the file before reading it.
        """
        files = self._files
        if not files:
            return None
        size = self.file_size
        if offset < files[0].base_offset or offset >= files[-1].base_offset + size:
            return None
        index = offset // size - files[0].base_offset // size
        if 0 <= index < len(files):
            candidate = files[index]
            if candidate.base_offset <= offset < candidate.base_offset + size:
                return candidate
        for candidate in files:
            if candidate.base_offset <= offset < candidate.base_offset + size:
                return candidate
        return None

    @property
    def min_offset(self) -> int:
        """First readable offset: the first file's base, or the next one's if the first is
        being destroyed (spec 2.2); 0 when empty. Thread-safe."""
        files = self._files
        if not files:
            return 0
        if files[0].is_available:
            return files[0].base_offset
        return files[0].base_offset + self.file_size

    @property
    def max_offset(self) -> int:
        """Last file's base + its wrote position; 0 when empty. Thread-safe."""
        files = self._files
        if not files:
            return 0
        return files[-1].base_offset + files[-1].wrote_position

    @property
    def flushed_where(self) -> int:
        """Offset below which everything has been flushed. Thread-safe (a snapshot)."""
        return self._flushed_where

    # -- writer -----------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.readonly:
            raise StoreNotWritableError(f"{self.directory} is open read-only")

    def _create_locked(self, base_offset: int) -> MappedFile:
        path = self.directory / f"{base_offset:020d}"
        if path.exists():
            raise StoreError(f"{path}: exists but is not part of the loaded queue")
        self.directory.mkdir(parents=True, exist_ok=True)
        created = self._map(path)  # DiskFullError: no file was left behind
        fsync_directory(self.directory)  # the name must survive a power cut like its data
        self._files = (*self._files, created)
        return created

    def _map(self, path: Path) -> MappedFile:
        return MappedFile(path, self.file_size, reserve_chunk_bytes=self.reserve_chunk_bytes)

    def last_or_create(self, start_offset: int) -> MappedFile:
        """The last file if it has room, else a new one (RocketMQ ``getLastMappedFile``).

        An empty queue starts at ``start_offset - start_offset % file_size``; a full last
        file is followed by ``base + file_size``. Writer thread.

        Raises:
            StoreNotWritableError: the queue is read-only.
            DiskFullError: no space for the new file's first blocks (nothing created).
            StoreError, OSError: the file cannot be created.
        """
        last = self.last()
        if last is not None and not last.is_full:
            return last
        self._check_writable()
        with self._lock:
            last = self._files[-1] if self._files else None
            if last is None:
                return self._create_locked(start_offset - start_offset % self.file_size)
            return self._create_locked(last.base_offset + self.file_size)

    def roll(self) -> MappedFile:
        """Create the file after the last one (at 0 for an empty queue). Writer thread.

        Raises:
            StoreError: the last file is not full; a hole in the middle would end recovery
                there and drop everything after it.
            StoreNotWritableError: the queue is read-only.
        """
        last = self.last()
        if last is not None and not last.is_full:
            raise StoreError(f"cannot roll {self.directory}: {last.path.name} is not full")
        return self.last_or_create(0)

    def truncate_dirty(self, offset: int) -> None:
        """Make ``offset`` the end of the queue (recovery, spec 5.6).

        The file holding ``offset`` gets positions ``offset - base``; later files are
        destroyed; earlier ones are left alone. ``flushed_where`` becomes ``offset``: the kept
        bytes were read back from the files. Writer thread, with the flusher stopped.

        On a read-only queue nothing on disk changes: the positions are set in memory only
        and later files stay mapped but hold nothing readable (positions 0), so tools see
        the same end of data that recovery would keep.
        """
        if self.readonly:
            with self._lock:
                for mapped in self._files:
                    end = min(max(offset - mapped.base_offset, 0), self.file_size)
                    mapped.set_positions(end)
                self._flushed_where = offset
            return
        with self._lock:
            kept: list[MappedFile] = []
            for mapped in self._files:
                if mapped.base_offset + self.file_size <= offset:
                    kept.append(mapped)
                elif mapped.base_offset <= offset:
                    mapped.set_positions(offset - mapped.base_offset)
                    kept.append(mapped)
                else:
                    log.info("%s: deleting dirty file beyond %d", mapped.path, offset)
                    mapped.destroy(TRUNCATE_FORCE_AFTER_MS, self._clock)
            self._files = tuple(kept)
            self._flushed_where = offset

    def delete_last(self) -> MappedFile | None:
        """Destroy the newest file (ConsumeQueue truncation, spec 5.8). Writer thread.

        Returns:
            The file removed, if there was one.
        """
        self._check_writable()
        with self._lock:
            if not self._files:
                return None
            last = self._files[-1]
            self._files = self._files[:-1]
            last.destroy(TRUNCATE_FORCE_AFTER_MS, self._clock)
            self._flushed_where = min(self._flushed_where, last.base_offset)
            return last

    # -- flusher ----------------------------------------------------------------------------

    def flush(self, least_pages: int) -> bool:
        """Flush the file holding ``flushed_where`` (spec 6.2). One flusher at a time.

        Before anything was flushed (or after cleanup removed the file it pointed into) the
        first file is used, as RocketMQ's ``returnFirstOnNotFound`` does.

        Returns:
            True if ``flushed_where`` moved forward.

        Raises:
            OSError: msync failed.
        """
        if self.readonly:
            return False
        where = self._flushed_where
        mapped = self.find(where)
        if mapped is None:
            first = self.first()
            if first is None or where >= first.base_offset:
                return False
            mapped = first
        store_timestamp_ms = mapped.store_timestamp_ms
        new_where = mapped.base_offset + mapped.flush(least_pages)
        progressed = new_where > where
        self._flushed_where = max(where, new_where)
        if least_pages == 0:
            self.store_timestamp_ms = store_timestamp_ms
        return progressed

    # -- cleaner ----------------------------------------------------------------------------

    def delete_first_files_while(
        self,
        predicate: Callable[[MappedFile], bool],
        *,
        force_after_ms: int = CLEANUP_FORCE_AFTER_MS,
        max_count: int | None = None,
        never_last: bool = True,
    ) -> int:
        """Destroy files from the front while ``predicate(file)`` holds. Cleaner thread.

        Stops at the first file the predicate rejects or that holders keep mapped (it stays
        first, unavailable, and a later call forces it after ``force_after_ms``): no holes.

        Returns:
            How many files were removed.
        """
        self._check_writable()
        files = self._files
        candidates = files[:-1] if never_last else files
        removed: list[MappedFile] = []
        for mapped in candidates:
            if max_count is not None and len(removed) >= max_count:
                break
            if not predicate(mapped):
                break
            if not mapped.destroy(force_after_ms, self._clock):
                log.info("%s: still held, will retry", mapped.path)
                break
            removed.append(mapped)
        if removed:
            with self._lock:
                gone = {id(mapped) for mapped in removed}
                self._files = tuple(f for f in self._files if id(f) not in gone)
        return len(removed)

    # -- follower (another process writes or cleans these files) ---------------------------

    def sync_files(self, *, front: bool = True, end: bool = True) -> bool:
        """Follow what another process did to the directory (Celery mode).

        ``front``: files at the front whose name has gone (deleted by a cleanup in another
        process) are closed, unmapped at their last release, and dropped; nothing is
        deleted here. ``end``: files following the last one (``base + file_size``, or any
        file if none is loaded) that exist at their full length are mapped, with positions
        0: the caller knows how far they are written. A file still being created (shorter)
        is left for the next call. One follower thread; concurrent readers are safe.

        Returns:
            Whether the file list changed.
        """
        with self._lock:
            files = list(self._files)
            changed = False
            while front and files and not files[0].path.exists():
                files.pop(0).close()
                changed = True
            if end:
                added = self._map_following_locked(files)
                changed = changed or bool(added)
                files.extend(added)
            if changed:
                self._files = tuple(files)
            return changed

    def _map_following_locked(self, files: list[MappedFile]) -> list[MappedFile]:
        if files:
            next_base: int | None = files[-1].base_offset + self.file_size
        elif self.directory.is_dir():
            names = sorted(
                entry.name
                for entry in self.directory.iterdir()
                if _SEGMENT_NAME.fullmatch(entry.name)
            )
            next_base = int(names[0]) if names else None
        else:
            next_base = None
        added: list[MappedFile] = []
        while next_base is not None:
            path = self.directory / f"{next_base:020d}"
            try:
                if path.stat().st_size != self.file_size:
                    break  # still being created
                if self.readonly:
                    mapped = MappedFile.open_readonly(path, self.file_size)
                else:
                    mapped = self._map(path)
            except FileNotFoundError:
                break
            mapped.set_positions(0)
            added.append(mapped)
            next_base += self.file_size
        return added

    def follow_end(self, end_offset: int) -> None:
        """Positions from an end offset another process published (the CommitLog as a
        service process sees it): files wholly below are full, the file holding it is
        written up to it, later ones are empty. Positions never move back here. Follower.
        """
        for mapped in reversed(self._files):  # newest first: stop at the first full one
            if mapped.wrote_position == self.file_size:
                break
            pos = min(max(end_offset - mapped.base_offset, 0), self.file_size)
            if pos > mapped.wrote_position:
                mapped.wrote_position = pos

    def reset_last_for_follow(self) -> None:
        """After ``load`` (which marks every file full), mark the last file empty so that a
        follower scans it for what is really written. Startup of a follower only."""
        last = self.last()
        if last is not None:
            last.set_positions(0)
            self._flushed_where = last.base_offset

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Unmap every file (each at its last release if still held). Shutdown only."""
        with self._lock:
            for mapped in self._files:
                mapped.close()
            self._files = ()

    def destroy(self, force_after_ms: int = 3000) -> None:
        """Delete every file and the directory if it ends up empty (queue removal).

        Raises:
            StoreNotWritableError: the queue is read-only.
        """
        self._check_writable()
        with self._lock:
            for mapped in self._files:
                mapped.destroy(force_after_ms, self._clock)
            self._files = ()
            self._flushed_where = 0
        try:
            self.directory.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            log.warning("%s: not removed, it still holds other entries", self.directory)
