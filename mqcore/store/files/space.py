"""Disk space: reserving a mapped file's blocks before writing through the mapping, and
measuring how full a partition is.

Why reserve: the store's files are created sparse (``ftruncate``) and written through a
shared mapping. A store into a page of a hole makes the kernel allocate a block in the page
fault; when the file system has none left, the only way it can answer a faulting *store
instruction* is ``SIGBUS``, which kills the broker on the spot, with no log line and no
reply to the producer (issue 17: 64 MiB tmpfs, dead within a second). ``posix_fallocate``
allocates the blocks up front and answers ``ENOSPC`` as an ordinary error instead. Every
writable mapping in the store reserves the range it is about to write first
(``MappedFile.reserve_to``, ``IndexFile.create``, the progress file), so a full disk turns
into a refused write (:class:`~mqcore.errors.DiskFullError`) and never into a fault.

What a reservation costs (``posix_fallocate`` mode 0, Linux 6.x), in orders of magnitude::

    file system   4 MiB      64 MiB     1 GiB      again over reserved blocks (1 GiB)
    ext4          ~10 us     ~10 us     ~1 ms      ~10 us     (unwritten extents)
    tmpfs         ~1 ms      ~20 ms     ~300 ms    ~1 s       (pages zeroed and charged)

ext4 only records extents, but the blocks count as used at once; tmpfs really allocates
the memory. Reserving a whole 1 GiB CommitLog segment on each roll would make a store
holding 8 MB of data look 1 GiB full, cost a third of a second per roll on tmpfs, and
re-reserving it at every start would cost a second more. Files written front to back
therefore reserve in chunks that run ahead of their write position (``reserve_chunk_bytes``:
the pre-fault window, 4 MiB, for CommitLog segments; 1 MiB for ConsumeQueue files), and only
what is written at random positions (an IndexFile's header and 20 MB slot table) is reserved
whole at creation.

Blocks reserved and released: a reservation that fails part-way may leave some blocks
allocated (ext4); they belong to the file and go with it. Reserving blocks a file already
has costs nothing more and succeeds on a full disk.

Reading a hole is no safer on tmpfs: a read fault on a hole of a *shared mapping* of a
tmpfs file allocates a page too (``read()`` on the file does not), so on a full tmpfs it is a
SIGBUS as well. Code that must look at a file's unwritten tail (recovery looking for a torn
tail) reads its data ranges with ``pread`` (:func:`data_ranges`, :func:`nonzero_end`).

Thread-safety: the functions are stateless.
"""

from __future__ import annotations

import errno
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path

from mqcore.errors import DiskFullError

log = logging.getLogger(__name__)

#: ``ENOSPC`` (no blocks left) and ``EDQUOT`` (the owner's quota is used up).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: The file system cannot reserve at all (some FUSE and network file systems): writes then
#: go unreserved, as before reservation existed; logged once per process.
_UNSUPPORTED_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.ENOSYS})
_warned_unsupported = False
#: :func:`nonzero_end` reads this much at a time, backwards.
_SCAN_BYTES = 1 << 20


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` saying the disk (or the quota) is full."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def disk_full_error(exc: OSError, doing: str) -> DiskFullError:
    """The :class:`DiskFullError` for ``exc`` raised while ``doing`` (``"reserving 4 MiB of
    .../00000000000000000000"``): the message starts with ``disk full:`` and names the
    errno, for the operator and for the producer's error reply."""
    reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    return DiskFullError(f"disk full: {doing} failed ({reason})")


def quietly(write: Callable[[], object], what: str) -> bool:
    """Run ``write``; on a full disk log ``what`` and the error instead of raising.

    Returns:
        Whether it was written.

    Raises:
        OSError: any failure other than a full disk.
    """
    try:
        write()
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        log.warning("%s: disk full (%s)", what, exc)
        return False
    return True


def reserve(fd: int, start: int, length: int, path: str | os.PathLike[str]) -> None:
    """Allocate the blocks of ``[start, start + length)`` of the open file ``fd``.

    The range must lie within the file's size (it never grows the file). Nothing is
    written: bytes read as before (zeros in a hole).

    Raises:
        DiskFullError: no space (or quota) for them; nothing useful was reserved.
        OSError: any other failure of ``posix_fallocate``.
    """
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, start, length)
    except OSError as exc:
        if exc.errno in DISK_FULL_ERRNOS:
            raise disk_full_error(exc, f"reserving {length} bytes of {path}") from exc
        if exc.errno in _UNSUPPORTED_ERRNOS:
            _warn_unsupported(path, exc)
            return
        raise


def _warn_unsupported(path: str | os.PathLike[str], exc: OSError) -> None:
    global _warned_unsupported
    if not _warned_unsupported:
        _warned_unsupported = True
        log.warning(
            "%s: this file system cannot reserve blocks (%s); a full disk may then stop "
            "the broker with SIGBUS instead of refusing writes",
            path,
            exc,
        )


def usage_ratio(path: str) -> float:
    """``ceil(used * 100 / (used + usable)) / 100`` (RocketMQ ``UtilAll.getDiskPartitionSpaceUsedPercent``).

    ``usable`` is what an unprivileged writer may still use (``f_bavail``), so the root
    reserve counts as used, as Java's ``File.getUsableSpace`` has it. A path that does not
    exist yet is measured at its nearest existing parent. Two ``statvfs`` calls at most,
    a few microseconds.

    Raises:
        OSError: no parent of ``path`` can be measured.
    """
    st = os.statvfs(existing_parent(path))
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return 0.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    return used_ratio(used, usable)


def used_ratio(used: int, usable: int) -> float:
    """The disk guard's figure from ``used`` and ``usable`` bytes (``shutil.disk_usage``'s
    ``used`` and ``free``): ``ceil(used * 100 / (used + usable)) / 100``, as ``df``'s Use%.
    Every place that shows disk use shows this one, so the console and the guard agree."""
    if used + usable <= 0:
        return 0.0
    return math.ceil(used * 100 / (used + usable)) / 100


def existing_parent(path: str | os.PathLike[str]) -> str:
    """``path``, or its nearest parent that exists (what :func:`usage_ratio` measures)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def partition_of(path: str | os.PathLike[str]) -> tuple[str, str]:
    """``(mount point, file system type)`` of the partition holding ``path`` (type ``""``
    where ``/proc/self/mounts`` cannot say). A few ``stat`` calls."""
    probe = existing_parent(path)
    device = os.stat(probe).st_dev
    while True:
        parent = os.path.dirname(probe)
        if parent == probe or os.stat(parent).st_dev != device:
            break
        probe = parent
    fs_type = ""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                # The last entry for a mount point is the one on top (mounts stack).
                if len(fields) >= 3 and fields[1].replace("\\040", " ") == probe:
                    fs_type = fields[2]
    except OSError:
        pass
    return probe, fs_type


def data_ranges(path: str | os.PathLike[str], start: int, end: int) -> list[tuple[int, int]]:
    """:func:`data_ranges_of` the file at ``path``.

    Raises:
        OSError: the file cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        return data_ranges_of(fd, start, end)
    finally:
        os.close(fd)


def data_ranges_of(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The ``[data, hole)`` ranges of the open file within ``[start, end)`` (``SEEK_DATA`` /
    ``SEEK_HOLE``), or the whole range where the file system cannot tell. Blocks reserved
    but never written may count as data (tmpfs) or as a hole (ext4): both read as zeros."""
    ranges: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after pos
                break
            return [(pos, end)]  # EINVAL: the file system does not say
        if data >= end:
            break
        hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
        ranges.append((data, hole))
        pos = hole
    return ranges


def nonzero_end(path: Path | str, start: int, end: int) -> int:
    """:func:`nonzero_end_of` the file at ``path``.

    Raises:
        OSError: the file cannot be read.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        return nonzero_end_of(fd, start, end)
    finally:
        os.close(fd)


def nonzero_end_of(fd: int, start: int, end: int) -> int:
    """Where the non-zero bytes of ``[start, end)`` of the open file end (``start`` if there
    are none), reading only its data ranges, with ``pread``, backwards: never a hole through
    a mapping (module docstring), and not a 1 GiB segment into memory to find a few bytes."""
    for data, hole in reversed(data_ranges_of(fd, start, end)):
        stop = hole
        while stop > data:
            piece_start = max(data, stop - _SCAN_BYTES)
            piece = os.pread(fd, stop - piece_start, piece_start).rstrip(b"\0")
            if piece:
                return piece_start + len(piece)
            stop = piece_start
    return start
