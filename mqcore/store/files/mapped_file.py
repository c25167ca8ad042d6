"""One memory-mapped segment file: the unit under the CommitLog and the ConsumeQueue.

A segment is named by the first offset it holds, 20 decimal digits (``f"{base:020d}"``,
spec 0 and 2.2). It is created at its full size with ``ftruncate`` and mapped read-write
once; every later access goes through the mapping (RocketMQ ``DefaultMappedFile``).

Reserved blocks: a store through the mapping into a page that has no disk block makes the
kernel allocate one in the page fault, and on a full disk the fault is ``SIGBUS``: the
broker dies (``space.py``). So nothing is written above ``reserved_position``: blocks are
allocated with ``posix_fallocate`` first, ``reserve_chunk_bytes`` at a time (1 MiB for
ConsumeQueue files, 4 MiB for CommitLog segments: ``space.py`` has the figures).
The first chunk is reserved when the file is created; an append or ``write_at`` that would
pass the mark reserves the chunks it needs first (one integer comparison per call when it
does not), and a full disk then raises :class:`~mqcore.errors.DiskFullError` with nothing
written. The pre-fault thread (``prefault.py``) reserves ahead of the writer too, so the
writer itself rarely waits for a reservation.

Positions (bytes from the start of the file)::

    0          flushed_position     wrote_position     reserved_position         file_size
    |-- on disk -----|-- in page cache ----|-- zeros, blocks --|-- zeros, a hole -----|

Invariants:
    * ``0 <= flushed_position <= wrote_position <= file_size`` and
      ``reserved_position <= file_size``.
    * Every byte written lies below ``reserved_position`` when it is written, and every
      page below ``reserved_position`` has its disk blocks. An existing file opened again
      trusts only what it holds (``set_positions``: the recovered end); the page holding
      that end is reserved again before anything is written into it.
    * Bytes below ``wrote_position`` are complete: ``append`` copies the bytes into the
      mapping *before* it moves ``wrote_position``, so a reader that bounds its read by the
      position it observed never sees a half-written record or unit. (CPython assigns the int
      atomically; the copy finishes under the GIL before the assignment.)
    * ``flush`` msyncs only ``[flushed_position rounded down to a page, wrote_position)``.

Lifetime (RocketMQ ``ReferenceResource``): a reader that keeps using the file across a
possible cleanup calls ``hold()`` (False once the file is being closed) and ``release()``.
``destroy``/``close`` mark the file unavailable; the mapping is closed when the last holder
releases, or by a later ``destroy`` call once ``force_after_ms`` has passed since the first
(``destroyMapedFileIntervalForcibly``, spec 6.4). Python refuses to close an mmap while a
memoryview of it exists (``BufferError``), so ``view()`` holds a reference for the life of
its ``with`` block and releases its memoryview on exit.

``destroy`` unlinks the file name at once: on POSIX the inode and the mapped pages live on
until the last unmap, so holders keep reading the old bytes, and the name is free for a new
file (a truncated tail re-created by the writer can never be deleted by a late release).

Crash behaviour: positions live only in memory. After a restart ``MappedFileQueue.load``
marks every file full and recovery (CommitLog 5.6/5.7, ConsumeQueue 3.2) finds the real end
by validating the content, then calls ``set_positions``. A crash while a file is being created
leaves at worst a zero-length last file, which loading deletes (spec 2.2); a creation that
finds no space for its first chunk deletes the file again before raising.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Buffer, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mqcore.clock import Clock
from mqcore.errors import (
    DiskFullError,
    SegmentFullError,
    StoreClosedError,
    StoreError,
    StoreNotWritableError,
)
from mqcore.store.files import libc, space

log = logging.getLogger(__name__)

#: RocketMQ counts dirty data in 4 KiB pages whatever the OS page size
#: (``DefaultMappedFile.OS_PAGE_SIZE``, spec 6.2).
FLUSH_PAGE_BYTES = 4096

#: ``mmap.flush`` needs an offset aligned to the real page size (16 KiB on some arm64).
_MSYNC_ALIGN_BYTES = mmap.PAGESIZE


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a created, renamed or deleted name in ``directory`` durable.

    Raises:
        OSError: the directory cannot be opened or synced.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parse_base_offset(name: str) -> int:
    """The offset a segment file's decimal name stands for.

    RocketMQ parses the name with ``Long.parseLong``; queues insist on 20 digits, the
    IndexFile's 17-digit timestamp names parse here too.

    Raises:
        StoreError: the name is not plain ASCII decimal digits.
    """
    if not (name.isascii() and name.isdigit()):
        raise StoreError(f"segment file name {name!r} is not a decimal offset")
    return int(name)


class MappedFile:
    """A segment file mapped into memory.

    Thread-safety: one writer thread (``append``, ``fill_to_end``, ``write_at``,
    ``set_positions``) runs concurrently with any number of readers and one flusher.
    ``hold``/``release``/``destroy``/``close`` are thread-safe (internal lock).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        file_size: int,
        *,
        reserve_chunk_bytes: int | None = None,
    ) -> None:
        """Open ``path`` read-write, creating it at ``file_size`` bytes if absent.

        A new file gets its first ``reserve_chunk_bytes`` of blocks at once (module
        docstring); an existing one reserves from its recovered end when written. Positions
        start at 0; ``MappedFileQueue.load`` marks loaded files full.

        Args:
            path: the file; its name must be a decimal offset.
            file_size: the segment size in bytes (> 0).
            reserve_chunk_bytes: blocks reserved at a time; None (default) reserves the
                whole file at creation. Rounded up to a page, at most ``file_size``.

        Raises:
            StoreError: bad name, or an existing non-empty file of another size.
            DiskFullError: a new file found no space for its first chunk (it is deleted).
            OSError: the file cannot be created or mapped.
        """
        if file_size <= 0:
            raise ValueError(f"file_size must be > 0, got {file_size}")
        self._setup(Path(path), file_size)
        chunk = file_size if reserve_chunk_bytes is None else reserve_chunk_bytes
        chunk = min(file_size, max(mmap.PAGESIZE, _page_ceil(chunk)))
        self.reserve_chunk_bytes = chunk
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        created = False
        try:
            actual = os.fstat(fd).st_size
            if actual == 0:
                created = True
                os.ftruncate(fd, file_size)
                space.reserve(fd, 0, chunk, self.path)  # blocks before any byte is written
                self.reserved_position = chunk
            elif actual != file_size:
                raise StoreError(
                    f"{self.path}: length {actual} bytes, expected {file_size} (wrong segment size)"
                )
            self._mm: mmap.mmap | None = mmap.mmap(fd, file_size, access=mmap.ACCESS_WRITE)
        except BaseException:
            if created:
                _unlink_quietly(self.path)
            raise
        finally:
            os.close(fd)  # mmap keeps its own duplicate

    @classmethod
    def open_readonly(
        cls, path: str | os.PathLike[str], file_size: int | None = None
    ) -> MappedFile:
        """Map an existing file with ``ACCESS_READ`` for tools that must never write.

        The whole file is readable (positions = its length). Writes and ``destroy`` raise
        ``StoreNotWritableError``; ``flush`` does nothing; ``close`` unmaps.

        Args:
            path: an existing segment file.
            file_size: if given, the length the file must have.

        Raises:
            StoreError: bad name, empty file or wrong length.
            OSError: the file cannot be opened.
        """
        self = cls.__new__(cls)
        path = Path(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            actual = os.fstat(fd).st_size
            if actual == 0 or (file_size is not None and actual != file_size):
                raise StoreError(f"{path}: length {actual} bytes, expected {file_size}")
            self._setup(path, actual, readonly=True)
            self.reserve_chunk_bytes = actual
            self._mm = mmap.mmap(fd, actual, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.set_positions(actual)
        return self

    def _setup(self, path: Path, file_size: int, *, readonly: bool = False) -> None:
        self.path = path
        self.file_size = file_size
        self.base_offset = parse_base_offset(path.name)
        self.readonly = readonly
        self.wrote_position = 0
        self.flushed_position = 0
        #: Every page below has its disk blocks; nothing is written at or above it.
        self.reserved_position = 0
        self._reserve_lock = threading.Lock()
        #: Store time of the last record written (set by the CommitLog writer; spec 5.1).
        self.store_timestamp_ms = 0
        self._lock = threading.Lock()
        self._holders = 0
        self._available = True
        self._shutdown_at_ms = 0
        #: Where the mapping starts in memory, found on the first ``populate``.
        self._address: int | None = None

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
            f"flushed={self.flushed_position}, size={self.file_size})"
        )

    # -- positions --------------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        """Whether ``wrote_position`` reached the end of the file."""
        return self.wrote_position == self.file_size

    @property
    def remaining(self) -> int:
        """Bytes still free after ``wrote_position``."""
        return self.file_size - self.wrote_position

    @property
    def is_available(self) -> bool:
        """False once ``destroy`` or ``close`` has been called."""
        return self._available

    @property
    def last_modified_ms(self) -> int:
        """The file's mtime in epoch ms (what RocketMQ ages files by, spec 6.4); 0 if gone."""
        try:
            return os.stat(self.path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    def set_positions(self, pos: int) -> None:
        """Set wrote and flushed positions to ``pos`` (recovery truncation, spec 5.6/5.8).

        Bytes below ``pos`` are treated as flushed: recovery read them back from the file.
        They are also all that is known to have blocks: ``reserved_position`` becomes
        ``pos`` too, so the next write past it reserves again (cheap where the blocks exist).
        Writer thread only.
        """
        if not 0 <= pos <= self.file_size:
            raise ValueError(f"position {pos} outside [0, {self.file_size}]")
        self.wrote_position = pos
        self.flushed_position = pos
        self.reserved_position = pos

    # -- writing (writer thread only) -------------------------------------------------------

    def _writable_map(self) -> mmap.mmap:
        if self.readonly:
            raise StoreNotWritableError(f"{self.path} is open read-only")
        mm = self._mm
        if mm is None:
            raise StoreClosedError(f"{self.path} is closed")
        return mm

    def append(self, data: Buffer) -> int:
        """Copy ``data`` at ``wrote_position``, then advance it.

        Returns:
            The position the data was written at.

        Raises:
            SegmentFullError: ``data`` does not fit in the remaining bytes (nothing written).
            DiskFullError: no space to reserve the blocks ``data`` needs (nothing written).
            StoreNotWritableError: the file is open read-only.
            StoreClosedError: the file was closed.
        """
        mm = self._writable_map()
        # bytes (the CommitLog's joined records) are copied as they are; anything else is
        # viewed as unsigned bytes first, so nbytes counts bytes whatever its item format.
        src: Buffer
        if isinstance(data, bytes):
            src, nbytes = data, len(data)
        else:
            view = memoryview(data).cast("B")
            src, nbytes = view, view.nbytes
        pos = self.wrote_position
        end = pos + nbytes
        if end > self.reserved_position:  # the one check on the hot path
            if end > self.file_size:
                raise SegmentFullError(
                    f"{self.path}: {nbytes} bytes do not fit at {pos} of {self.file_size}"
                )
            self.reserve_to(end)
        mm[pos:end] = src
        self.wrote_position = end  # publish only after the bytes are in place
        return pos

    def fill_to_end(self, data: Buffer) -> int:
        """Write ``data`` at ``wrote_position`` and claim the rest of the file.

        This is the CommitLog's end-of-file blank record (spec 1.4): 8 bytes are written but
        the record's TOTALSIZE covers the remainder, which is already zero.

        Returns:
            The position the data was written at.

        Raises:
            SegmentFullError, StoreNotWritableError, StoreClosedError: as ``append``.
        """
        pos = self.append(data)
        self.wrote_position = self.file_size
        return pos

    def write_at(self, pos: int, data: Buffer) -> None:
        """Copy ``data`` at ``pos`` without moving any position.

        Zeros written past the reserved mark on a full disk (recovery clearing a torn
        tail) are written only where the file holds data (``SEEK_DATA``): a hole reads as
        zeros already and needs no block, and touching it through the mapping could fault.

        Raises:
            ValueError: the range leaves the file.
            DiskFullError: no space to reserve the blocks ``data`` needs (nothing written).
            StoreNotWritableError, StoreClosedError: as ``append``.
        """
        mm = self._writable_map()
        src = memoryview(data).cast("B")
        end = pos + src.nbytes
        if pos < 0 or end > self.file_size:
            raise ValueError(f"write of {src.nbytes} bytes at {pos} leaves {self.path}")
        if end > self.reserved_position:
            try:
                self.reserve_to(end)
            except DiskFullError:
                if src.tobytes().count(0) != src.nbytes:  # not only zeros
                    raise
                self._zero_data_ranges(mm, pos, end)
                return
        mm[pos:end] = src

    def _zero_data_ranges(self, mm: mmap.mmap, start: int, end: int) -> None:
        for data, hole in space.data_ranges(self.path, start, end):  # blocks: cannot fault
            mm[data:hole] = bytes(hole - data)

    def nonzero_end(self, start: int) -> int:
        """Where the non-zero bytes of ``[start, file_size)`` end (``start`` if there are
        none): the end of a torn tail, for recovery. Read from the file's data ranges with
        ``pread``, never through the mapping (``space.nonzero_end`` says why). Thread-safe.

        Raises:
            OSError: the file cannot be read.
        """
        return space.nonzero_end(self.path, start, self.file_size)

    def reserve_to(self, end: int) -> None:
        """Make sure every page below ``end`` has its disk blocks (module docstring).

        Reserves whole chunks from the current mark until it covers ``end`` (capped at the
        file size). Thread-safe: the writer and the pre-fault thread may both call it.

        Raises:
            DiskFullError: no space (or quota) for them; the mark does not move.
            StoreNotWritableError: the file is open read-only.
            OSError: the file is gone or cannot be opened.
        """
        if end <= self.reserved_position:
            return
        if self.readonly:
            raise StoreNotWritableError(f"{self.path} is open read-only")
        with self._reserve_lock:
            reserved = self.reserved_position
            if end <= reserved:
                return
            chunk = self.reserve_chunk_bytes
            target = min(self.file_size, reserved + -(-(end - reserved) // chunk) * chunk)
            start = reserved - reserved % mmap.PAGESIZE  # a partly written page: its rest too
            fd = os.open(self.path, os.O_RDWR)
            try:
                space.reserve(fd, start, target - start, self.path)
            finally:
                os.close(fd)
            self.reserved_position = target

    # -- reading ----------------------------------------------------------------------------

    def _check_read(self, pos: int, size: int) -> mmap.mmap:
        mm = self._mm
        if mm is None:
            raise StoreClosedError(f"{self.path} is closed")
        if pos < 0 or size < 0 or pos + size > self.wrote_position:
            raise ValueError(
                f"read [{pos}, {pos + size}) beyond wrote position {self.wrote_position} "
                f"of {self.path}"
            )
        return mm

    def read(self, pos: int, size: int) -> bytes:
        """A copy of ``size`` bytes at ``pos`` (below ``wrote_position``). Thread-safe.

        Raises:
            ValueError: the range goes beyond ``wrote_position``.
            StoreClosedError: the mapping was closed.
        """
        mm = self._check_read(pos, size)
        try:
            return mm[pos : pos + size]
        except ValueError as exc:  # closed by a forced destroy between check and copy
            raise StoreClosedError(f"{self.path} is closed") from exc

    @contextmanager
    def view(self, pos: int, size: int) -> Iterator[memoryview]:
        """Yield a zero-copy memoryview of ``[pos, pos+size)``, holding the file meanwhile.

        The view is released when the block exits; copy what must outlive it.

        Raises:
            StoreClosedError: the file is being destroyed or closed.
            ValueError: the range goes beyond ``wrote_position``.
        """
        if not self.hold():
            raise StoreClosedError(f"{self.path} is being destroyed")
        try:
            mm = self._check_read(pos, size)
            with memoryview(mm) as whole:
                part = whole[pos : pos + size]
                try:
                    yield part
                finally:
                    part.release()
        finally:
            self.release()

    @property
    def buffer(self) -> mmap.mmap:
        """The mmap itself, for ``struct.unpack_from`` on hot paths.

        Lifetime rule: use it only between a successful ``hold()`` and the matching
        ``release()`` (or while the owning queue cannot destroy the file), bound every read
        by a ``wrote_position`` observed before it, and never keep a memoryview of it:
        ``unpack_from`` exports the buffer only for the duration of the call, a leftover
        memoryview would make the eventual unmap fail. Use ``view()`` for views.

        Raises:
            StoreClosedError: the mapping was closed.
        """
        mm = self._mm
        if mm is None:
            raise StoreClosedError(f"{self.path} is closed")
        return mm

    def populate(
        self, madvise: Callable[[int, int, int], int], advice: int, start: int, end: int
    ) -> bool:
        """``madvise(advice)`` on the pages of ``[start, end)`` (``prefault.py``: populate
        ahead of the writer without writing a byte), under a ``hold()`` so the mapping cannot
        be unmapped meanwhile. Only pages below ``reserved_position`` are touched: a page
        populated writable over a hole would take its block without a reservation.
        Thread-safe.

        Returns:
            False if the file is closed or being destroyed, nothing of the range is
            reserved, or madvise failed.
        """
        end = min(end, self.reserved_position)  # only pages whose blocks are reserved
        if self.readonly or not 0 <= start < end <= self.file_size or not self.hold():
            return False
        try:
            address = self._address
            if address is None:
                mm = self._mm
                if mm is None:
                    return False
                address = self._address = libc.map_address(mm)
            start -= start % mmap.PAGESIZE  # madvise wants a page-aligned start
            return madvise(address + start, end - start, advice) == 0
        finally:
            self.release()

    # -- flushing ---------------------------------------------------------------------------

    def is_flushable(self, least_pages: int) -> bool:
        """Spec 6.2: full, or ≥ ``least_pages`` dirty 4 KiB pages, or any dirty byte if 0."""
        write = self.wrote_position
        flushed = self.flushed_position
        if write == self.file_size:
            return True
        if least_pages > 0:
            return write // FLUSH_PAGE_BYTES - flushed // FLUSH_PAGE_BYTES >= least_pages
        return write > flushed

    def flush(self, least_pages: int) -> int:
        """msync the dirty range if the file is flushable (spec 6.2).

        Only ``[flushed_position rounded down to a page, wrote_position)`` is synced, so a
        sync group commit that calls this per batch pays for the pages it dirtied, not for
        the whole 1 GiB mapping. One flusher at a time.

        Returns:
            The flushed position afterwards.

        Raises:
            OSError: msync failed (the flushed position does not move).
        """
        if self.readonly or not self.is_flushable(least_pages):
            return self.flushed_position
        if not self.hold():
            # Being destroyed: nothing to keep durable (RocketMQ does the same).
            self.flushed_position = self.wrote_position
            return self.flushed_position
        try:
            write = self.wrote_position
            flushed = self.flushed_position
            if write > flushed:
                start = flushed - flushed % _MSYNC_ALIGN_BYTES
                mm = self._mm
                if mm is not None:  # through libc: mmap.flush would hold the GIL meanwhile
                    self._address = libc.msync_range(mm, self._address, start, write - start)
            self.flushed_position = write
        finally:
            self.release()
        return self.flushed_position

    # -- reference counting and teardown ----------------------------------------------------

    def hold(self) -> bool:
        """Take a reference; False if the file is being destroyed or closed. Thread-safe."""
        with self._lock:
            if not self._available:
                return False
            self._holders += 1
            return True

    def release(self) -> None:
        """Drop a reference taken by ``hold``; the last one after ``close``/``destroy`` unmaps.

        Thread-safe.

        Raises:
            StoreError: more releases than holds.
        """
        with self._lock:
            if self._holders <= 0:
                raise StoreError(f"{self.path}: release() without hold()")
            self._holders -= 1
            if self._holders == 0 and not self._available:
                self._unmap_locked()

    @property
    def holders(self) -> int:
        """References currently held (diagnostics)."""
        return self._holders

    @property
    def is_closed(self) -> bool:
        """Whether the mapping has been closed."""
        return self._mm is None

    def close(self) -> bool:
        """Stop new holds and unmap once no holder is left (store shutdown). Thread-safe.

        Returns:
            True if the mapping is closed now, False if the last ``release`` will close it.
        """
        with self._lock:
            self._available = False
            if self._holders == 0:
                self._unmap_locked()
            return self._mm is None

    def destroy(self, force_after_ms: int, clock: Clock) -> bool:
        """Delete the file; unmap it once no holder is left. Thread-safe.

        The first call marks the file unavailable and unlinks its name. The mapping closes
        when the holder count reaches zero, or, if holders remain, on a call made at least
        ``force_after_ms`` after the first one (RocketMQ's forced cleanup; holders then get
        ``StoreClosedError``). A mapping still exported through a stray memoryview cannot be
        closed; it is dropped and closed by the garbage collector with a warning.

        Returns:
            True if the mapping is closed, False if holders keep it open for now.

        Raises:
            StoreNotWritableError: the file is open read-only.
        """
        if self.readonly:
            raise StoreNotWritableError(f"{self.path} is open read-only")
        with self._lock:
            now_ms = clock.now_ms()
            if self._available:
                self._available = False
                self._shutdown_at_ms = now_ms
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
            if self._mm is None:
                return True
            if self._holders > 0 and now_ms - self._shutdown_at_ms < force_after_ms:
                return False
            if self._holders > 0:
                log.warning("%s: forcing unmap with %d holders", self.path, self._holders)
            self._unmap_locked()
            return True

    def _unmap_locked(self) -> None:
        mm = self._mm
        if mm is None:
            return
        self._mm = None
        try:
            mm.close()
        except BufferError:
            log.warning("%s: a memoryview outlived its hold; unmap left to GC", self.path)


def _page_ceil(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
