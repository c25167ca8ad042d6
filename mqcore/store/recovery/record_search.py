"""Reading a CommitLog segment's unknown bytes from the file: where written data ends and
where valid records resume after a bad one.

Recovery and ``check`` read what follows the last record they framed with ``os.pread`` on
a descriptor of the file, never through the segment's mapping: every page of a mapping
that is read becomes resident (a 1 GiB segment holding 8 MB would count 1 GiB of RSS), and
on tmpfs a read fault on a hole allocates a page, which raises SIGBUS once the filesystem
is full. ``lseek(SEEK_DATA/SEEK_HOLE)`` lists the data regions of the file so that holes
(a sparse tail reads as zeros) are skipped without reading them; where the filesystem does
not support it, the whole file counts as data.

A record is found again by its magic code: V1 and V2 sit at offset 4 of every record, and
``bytes.find`` looks for them over chunks of the file. A candidate counts only when
``check_record`` accepts it with its body CRC *and* its PHYSICALOFFSET field equals its own
position in the log (a record copied into another message's body carries the wrong one).
A blank end-of-file record counts when its size field reaches exactly the end of the file:
the writer wrote it after every record before it, so what precedes it is not a torn write.

Thread-safety: a :class:`SegmentFile` is one descriptor, for one thread.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Literal

from mqcore.format.layout import (
    BLANK,
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    SIZE_MAGIC,
)
from mqcore.format.record import Valid, check_record
from mqcore.store.files import space

#: Bytes read per ``pread`` while searching or measuring a region.
CHUNK_BYTES = 1 << 20
#: The magic codes as they sit in the file (big-endian), and where in a record.
_MAGIC_BYTES = tuple(
    code.to_bytes(4, "big", signed=True)
    for code in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE)
)
_MAGIC_AT = 4
assert SIZE_MAGIC.size == 2 * _MAGIC_AT

Found = tuple[int, Literal["record", "blank"]]


class SegmentFile:
    """One segment file opened for ``pread`` (read-only unless ``writable``).

    Args:
        path: the file.
        file_size: the segment size; bytes between the file's length (if it is shorter, a
            read-only view of a cut file) and ``file_size`` read as zeros.
    """

    def __init__(self, path: Path, file_size: int, *, writable: bool = False) -> None:
        self.path = path
        self.file_size = file_size
        self._fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        self.length = min(os.fstat(self._fd).st_size, file_size)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SegmentFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def read(self, pos: int, size: int) -> bytes:
        """``size`` bytes at ``pos`` (zeros past the file's length)."""
        size = max(0, min(size, self.file_size - pos))
        data = os.pread(self._fd, size, pos) if pos < self.length else b""
        return data if len(data) == size else data + bytes(size - len(data))

    def write_zeros(self, pos: int, size: int) -> None:
        """Overwrite ``size`` bytes at ``pos`` with zeros and sync them (``writable`` only)."""
        end = pos + size
        while pos < end:
            step = min(CHUNK_BYTES, end - pos)
            os.pwrite(self._fd, bytes(step), pos)
            pos += step
        os.fdatasync(self._fd)

    def data_regions(self, start: int, end: int) -> list[tuple[int, int]]:
        """The ``[a, b)`` ranges within ``[start, end)`` that may hold non-zero bytes."""
        return space.data_ranges_of(self._fd, start, min(end, self.length))

    def data_end(self) -> int:
        """One past the last byte of the last data region (0 for an all-hole file)."""
        regions = self.data_regions(0, self.file_size)
        return regions[-1][1] if regions else 0

    def nonzero_end(self, start: int, end: int) -> int:
        """One past the last non-zero byte in ``[start, end)``; ``start`` if all are zero."""
        return space.nonzero_end_of(self._fd, start, min(end, self.length))

    def valid_at(self, pos: int, base_offset: int) -> Literal["record", "blank"] | None:
        """Whether a valid record (CRC checked, PHYSICALOFFSET equal to ``base_offset +
        pos``) or an end-of-file blank record starts at ``pos``."""
        if pos < 0 or pos + SIZE_MAGIC.size > self.file_size:
            return None
        total, magic = SIZE_MAGIC.unpack(self.read(pos, SIZE_MAGIC.size))
        if magic == BLANK_MAGIC_CODE:
            return "blank" if total == self.file_size - pos else None
        if magic not in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2):
            return None
        if not MIN_RECORD_SIZE <= total <= self.file_size - pos:
            return None
        checked = check_record(self.read(pos, total), 0, total, check_crc=True)
        if isinstance(checked, Valid) and checked.phys_offset == base_offset + pos:
            return "record"
        return None

    def find_valid(self, start: int, end: int, base_offset: int) -> Found | None:
        """The first valid record or blank record (:meth:`valid_at`) starting in
        ``[start, end)``, searched by magic code over the data regions."""
        end = min(end, self.file_size - BLANK.size + 1)
        if start >= end:
            return None
        # A record at p has its magic at p + 4: search the magic in [start + 4, end + 4).
        for a, b in self.data_regions(start + _MAGIC_AT, end + _MAGIC_AT + 3):
            pos = a
            while pos < b:
                stop = min(b, pos + CHUNK_BYTES)
                chunk = self.read(pos, stop - pos + 3)  # 3 more: a magic across the boundary
                found = _search_chunk(self, chunk, pos, stop, start, end, base_offset)
                if found is not None:
                    return found
                pos = stop
        return None

    def resume_after(self, pos: int, base_offset: int) -> Found | None:
        """Where valid records resume after the bad record at ``pos`` in this file.

        First at ``pos + TOTALSIZE`` when that size is plausible and a valid record is there
        (then only the bytes in between are searched, in case a flipped TOTALSIZE happens to
        land on a later record); otherwise by searching the rest of the file."""
        head = self.read(pos, SIZE_MAGIC.size)
        total = SIZE_MAGIC.unpack(head)[0] if len(head) == SIZE_MAGIC.size else 0
        if MIN_RECORD_SIZE <= total <= self.file_size - pos - BLANK.size:
            kind = self.valid_at(pos + total, base_offset)
            if kind is not None:
                return self.find_valid(pos + 1, pos + total, base_offset) or (pos + total, kind)
        return self.find_valid(pos + 1, self.file_size, base_offset)


def _search_chunk(
    segment: SegmentFile, chunk: bytes, at: int, stop: int, start: int, end: int, base: int
) -> Found | None:
    """The first valid candidate whose magic lies in ``chunk`` (read at ``at``) before
    ``stop``, and whose record starts in ``[start, end)``."""
    limit = stop - at
    i = 0
    while True:
        hits = [h for h in (chunk.find(m, i, limit + 3) for m in _MAGIC_BYTES) if 0 <= h < limit]
        if not hits:
            return None
        hit = min(hits)
        record = at + hit - _MAGIC_AT
        if start <= record < end:
            kind = segment.valid_at(record, base)
            if kind is not None:
                return record, kind
        i = hit + 1
