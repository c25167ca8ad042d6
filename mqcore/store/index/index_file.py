"""One RocketMQ IndexFile: a hash index from message key to CommitLog position.

The file lives at ``<root>/index/<yyyyMMddHHmmssSSS>`` (local creation time) and is byte for byte
RocketMQ's ``IndexFile`` (spec/store-format.md section 4). Its size is fixed when it is created::

    +--------------------+------------------------------+-----------------------------------+
    | header (40 bytes)  | slot table                   | entries                           |
    |                    | hash_slots x int32           | max_entries x 20 bytes            |
    +--------------------+------------------------------+-----------------------------------+
    0                    40                             40 + hash_slots*4

    header (HEADER, big-endian)             entry (ENTRY, big-endian)
    offset width field                      offset width field
    0      8     begin_timestamp (ms)       0      4     key_hash (>= 0, see hashing)
    8      8     end_timestamp (ms)         4      8     phys_offset
    16     8     begin_phys_offset          12     4     time_diff (s since begin_timestamp)
    24     8     end_phys_offset            16     4     prev_index (0 = end of chain)
    32     4     hash_slot_count
    36     4     index_count (starts at 1)

With RocketMQ's defaults (5,000,000 slots, 20,000,000 entries) the file is 420,000,040 bytes. Each
put dirties one 4 KiB page of the 20 MB slot table at random and appends 20 bytes to the entry
area. Its blocks are reserved (``posix_fallocate``, ``space.py``) before anything is written
through the mapping: a write into a hole on a full disk is a SIGBUS, a failed reservation a
``DiskFullError`` (reput pauses). The header and the slot table (written at random) are
reserved when the file is created (or by the first put after it is opened again), the entry
area ``ENTRY_RESERVE_BYTES`` at a time ahead of ``index_count`` (one comparison per batch), so
a fresh file takes 20 MB of disk, not 420 MB.

Slot ``key_hash % hash_slots`` holds the index of the newest entry whose key falls in that slot
(0 = empty); each entry's ``prev_index`` links to the previous entry of the same slot, so a slot
is a singly linked chain running newest to oldest.

Invariants (``check`` reports any breach):

* Entry 0 is never used; entries ``1 .. index_count-1`` are written, in put order.
* A slot value and a ``prev_index`` are 0 or an index of a written entry, and
  ``prev_index < index`` (chains strictly decrease, so they always end).
* ``time_diff >= 0``: put clamps it to ``[0, 2**31-1]``.

RocketMQ quirks reproduced on purpose (files must read the same in both brokers):

* ``index_count`` starts at 1, and a stored value <= 0 reads as 1.
* A file created after a full one starts with begin = end = the full file's end timestamp and
  end phys offset. The first entry's ``time_diff`` is computed against that borrowed begin,
  *before* the header's begin fields are set to the first entry's own values.
* ``hash_slot_count`` counts puts that found their slot empty or invalid.

Concurrency: exactly one writer (reput) calls :meth:`IndexFile.put_key`; any number of readers
call :meth:`IndexFile.select_phys_offsets` meanwhile. A put writes the entry first, then the slot,
then publishes by raising ``index_count`` (kept in an attribute; the header bytes follow). A reader
ignores slot and ``prev_index`` values above ``index_count``, so it never follows a link to an
entry that is not fully written: the slot it may see already holds the index of the entry just
written, never of a later one. Readers hold a reference while they walk; ``close``/``destroy``
unmap only when the last reader lets go (RocketMQ ``ReferenceResource``).

Crash behaviour: derived file, rebuilt not checksummed. Nothing here is fsynced on put; the
header is rewritten after every :meth:`IndexFile.put_key` and once per batch of
:meth:`IndexFile.put_entries` (reput's path), so after a crash the header may lag or lead the
entries by a few puts, or by one batch. RocketMQ copes by destroying, on an abnormal start, every index file whose end
timestamp is newer than the checkpoint's ``indexMsgTimestamp`` and re-dispatching the CommitLog
(see ``index_service``).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

import numpy as np

from mqcore.errors import CorruptIndexError, StoreClosedError, StoreNotWritableError
from mqcore.format.hashing import index_key_hash
from mqcore.store.files import libc, space
from mqcore.store.index import index_bulk

__all__ = [
    "ENTRY",
    "ENTRY_RESERVE_BYTES",
    "ENTRY_DTYPE",
    "HEADER",
    "HEADER_FIELD_OFFSETS",
    "ENTRY_FIELD_OFFSETS",
    "INVALID_INDEX",
    "MAX_TIME_DIFF",
    "SLOT",
    "IndexEntry",
    "IndexFile",
    "index_file_size",
]


def _layout(fields: tuple[tuple[str, str], ...]) -> tuple[struct.Struct, dict[str, int]]:
    """Build a big-endian Struct and each field's offset from (name, struct code) pairs."""
    codes = [code for _, code in fields]
    sizes = [struct.calcsize(">" + code) for code in codes]
    starts = [0, *accumulate(sizes)]
    return struct.Struct(">" + "".join(codes)), {
        name: start for (name, _), start in zip(fields, starts, strict=False)
    }


HEADER, HEADER_FIELD_OFFSETS = _layout(
    (
        ("begin_timestamp", "q"),  # store time (ms) of the first entry
        ("end_timestamp", "q"),  # store time (ms) of the last entry
        ("begin_phys_offset", "q"),  # CommitLog offset of the first entry
        ("end_phys_offset", "q"),  # CommitLog offset of the last entry
        ("hash_slot_count", "i"),  # puts that found their slot empty
        ("index_count", "i"),  # next entry index; starts at 1
    )
)

ENTRY, ENTRY_FIELD_OFFSETS = _layout(
    (
        ("key_hash", "i"),  # index_key_hash(topic#key), never negative
        ("phys_offset", "q"),  # CommitLog offset of the message
        ("time_diff", "i"),  # seconds since the header's begin_timestamp
        ("prev_index", "i"),  # previous entry in this slot's chain, 0 = none
    )
)

#: ENTRY for numpy (``derived_check.py`` reads many at once): the same fields, big-endian.
ENTRY_DTYPE: Final = np.dtype(
    {
        "names": list(ENTRY_FIELD_OFFSETS),
        "formats": [">i4", ">i8", ">i4", ">i4"],
        "offsets": list(ENTRY_FIELD_OFFSETS.values()),
        "itemsize": ENTRY.size,
    }
)
assert ENTRY.format == ">iqii"

SLOT: Final = struct.Struct(
    ">i"  # index of the newest entry in this slot's chain, 0 = empty
)

INVALID_INDEX: Final = 0
MAX_TIME_DIFF: Final = 2**31 - 1  # Java Integer.MAX_VALUE
_FIRST_INDEX: Final = 1
_SLOT_SIZE: Final = SLOT.size
_ENTRY_SIZE: Final = ENTRY.size
#: Disk blocks of the entry area reserved at a time (~210,000 entries; module docstring).
ENTRY_RESERVE_BYTES: Final = 4 << 20


def _entry_area(hash_slots: int) -> int:
    """Where the entry area starts: after the header and the slot table."""
    return HEADER.size + hash_slots * SLOT.size


# Bound methods: put_key runs ~10^5-10^6 times a second, and an attribute lookup saved per
# call is measurable there.
_pack_header = HEADER.pack_into
_unpack_header = HEADER.unpack_from
_pack_entry = ENTRY.pack_into
_unpack_entry = ENTRY.unpack_from
_pack_slot = SLOT.pack_into
_unpack_slot = SLOT.unpack_from


def index_file_size(hash_slots: int, max_entries: int) -> int:
    """Bytes of an index file with these dimensions (420,000,040 with RocketMQ's defaults)."""
    return HEADER.size + hash_slots * SLOT.size + max_entries * ENTRY.size


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One decoded 20-byte entry, for tools and tests."""

    key_hash: int
    phys_offset: int
    time_diff: int
    prev_index: int


class IndexFile:
    """One mapped index file. Build with :meth:`create` or :meth:`open`, not the constructor.

    Thread-safety: one writer (``put_key``, ``flush``) plus any number of concurrent readers
    (``select_phys_offsets``, the header properties, ``entry``, ``slot``). ``close`` and
    ``destroy`` may race readers safely; they must not race the writer.
    """

    def __init__(
        self,
        path: str,
        mm: mmap.mmap,
        hash_slots: int,
        max_entries: int,
        header: tuple[int, int, int, int, int, int],
        *,
        readonly: bool,
    ) -> None:
        self._path = path
        self._mm = mm
        self._hash_slots = hash_slots
        self._max_entries = max_entries
        self._slot_base = HEADER.size
        self._entry_base = HEADER.size + hash_slots * SLOT.size
        (
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phys_offset,
            self._end_phys_offset,
            self._hash_slot_count,
            self._index_count,
        ) = header
        if self._index_count <= 0:
            self._index_count = _FIRST_INDEX
        self._readonly = readonly
        self._writable = not readonly
        #: Bytes from the start whose blocks are allocated (0 until create or the first put).
        self._reserved_end = 0
        # Reference counting for readers (RocketMQ ReferenceResource).
        self._ref_lock = threading.Lock()
        self._refs = 0
        self._available = True
        self._unmapped = False

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        path: str,
        hash_slots: int,
        max_entries: int,
        *,
        prev_end_phys_offset: int = 0,
        prev_end_timestamp: int = 0,
    ) -> IndexFile:
        """Create a new, empty index file with its blocks reserved and map it read-write.

        Args:
            path: the file to create; it must not exist.
            hash_slots: slots in the hash table (RocketMQ default 5,000,000).
            max_entries: entries the file can hold, entry 0 included (default 20,000,000).
            prev_end_phys_offset: the previous (full) file's end phys offset, or 0.
            prev_end_timestamp: the previous (full) file's end timestamp, or 0.
                Non-zero values become both begin and end of the new header (RocketMQ quirk).

        Returns:
            The open file, with ``index_count`` 1.

        Raises:
            ValueError: dimensions too small.
            FileExistsError: ``path`` exists.
            DiskFullError: no space for its blocks (the file is deleted again).
            OSError: the file cannot be created or mapped.
        """
        _check_dimensions(hash_slots, max_entries)
        size = index_file_size(hash_slots, max_entries)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, size)
            reserved = min(size, _entry_area(hash_slots) + ENTRY_RESERVE_BYTES)
            space.reserve(fd, 0, reserved, path)  # DiskFullError: no file is left behind
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        begin_end_phys = prev_end_phys_offset if prev_end_phys_offset > 0 else 0
        begin_end_ts = prev_end_timestamp if prev_end_timestamp > 0 else 0
        header = (begin_end_ts, begin_end_ts, begin_end_phys, begin_end_phys, 0, _FIRST_INDEX)
        # RocketMQ leaves index_count 0 on disk until the first put or flush; both read as 1.
        # Writing the full header now gives the bytes RocketMQ has after its first flush.
        _pack_header(mm, 0, *header)
        created = cls(path, mm, hash_slots, max_entries, header, readonly=False)
        created._reserved_end = reserved
        return created

    @classmethod
    def open(
        cls, path: str, hash_slots: int, max_entries: int, *, readonly: bool = False
    ) -> IndexFile:
        """Map an existing index file and load its header.

        Args:
            path: the file.
            hash_slots, max_entries: the dimensions it was created with.
            readonly: map read-only (tools); ``put_key`` then raises.

        Returns:
            The open file.

        Raises:
            CorruptIndexError: the size does not match the dimensions, or the header's
                index_count exceeds ``max_entries``.
            OSError: the file cannot be opened or mapped.
        """
        _check_dimensions(hash_slots, max_entries)
        size = index_file_size(hash_slots, max_entries)
        fd = os.open(path, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise CorruptIndexError(
                    f"{path}: {actual} bytes, expected {size} for "
                    f"{hash_slots} slots x {max_entries} entries"
                )
            access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
            mm = mmap.mmap(fd, size, access=access)
        finally:
            os.close(fd)
        header = _unpack_header(mm, 0)
        if header[5] > max_entries:
            mm.close()
            raise CorruptIndexError(f"{path}: index_count {header[5]} > max {max_entries}")
        return cls(path, mm, hash_slots, max_entries, header, readonly=readonly)

    # ------------------------------------------------------------------ header

    @property
    def path(self) -> str:
        return self._path

    @property
    def name(self) -> str:
        """The file name: its 17-digit local creation time."""
        return os.path.basename(self._path)

    @property
    def hash_slots(self) -> int:
        return self._hash_slots

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def begin_timestamp(self) -> int:
        return self._begin_timestamp

    @property
    def end_timestamp(self) -> int:
        return self._end_timestamp

    @property
    def begin_phys_offset(self) -> int:
        return self._begin_phys_offset

    @property
    def end_phys_offset(self) -> int:
        return self._end_phys_offset

    @property
    def hash_slot_count(self) -> int:
        return self._hash_slot_count

    @property
    def index_count(self) -> int:
        """The next entry index; entries ``1 .. index_count-1`` are written."""
        return self._index_count

    @property
    def is_full(self) -> bool:
        return self._index_count >= self._max_entries

    @property
    def closed(self) -> bool:
        return not self._available

    def refresh_header(self) -> None:
        """Re-read the header that another process's writer keeps updating (a read-only
        follower in Celery mode). The writer raises ``index_count`` last, so the entries a
        refreshed header names are complete. Never call it on the writer's own instance."""
        if self._writable:
            return
        with self._held():
            header = _unpack_header(self._mm, 0)
        if 0 < header[5] <= self._max_entries:
            (
                self._begin_timestamp,
                self._end_timestamp,
                self._begin_phys_offset,
                self._end_phys_offset,
                self._hash_slot_count,
                self._index_count,
            ) = header

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """RocketMQ's overlap test between ``[begin_ms, end_ms]`` and this file's time span."""
        file_begin = self._begin_timestamp
        file_end = self._end_timestamp
        return (
            (begin_ms < file_begin and end_ms > file_end)
            or file_begin <= begin_ms <= file_end
            or file_begin <= end_ms <= file_end
        )

    # ------------------------------------------------------------------ write path

    def put_key(self, key: str, phys_offset: int, store_timestamp: int) -> bool:
        """Index ``key`` (already ``topic#key``) for the message at ``phys_offset``.

        Returns:
            True when written, False when the file is full (the caller rolls to a new file).

        Raises:
            StoreNotWritableError: the file is read-only.
            StoreClosedError: the file is closed.

        Single writer only.
        """
        return self.put_key_hash(index_key_hash(key), phys_offset, store_timestamp)

    def put_key_hash(self, key_hash: int, phys_offset: int, store_timestamp: int) -> bool:
        """:meth:`put_key` with the key's ``index_key_hash`` already computed.

        Spec 4.5 step by step, as a batch of one (:meth:`put_entries` holds the steps).
        Single writer only.

        Returns:
            False when the file is full.
        """
        return self.put_entries((key_hash,), (phys_offset,), (store_timestamp,)) == 1

    def put_entries(
        self,
        key_hashes: Sequence[int] | index_bulk.Ints,
        phys_offsets: Sequence[int] | index_bulk.Ints,
        store_timestamps: Sequence[int] | index_bulk.Ints,
        start: int = 0,
    ) -> int:
        """Put each entry ``i >= start`` of the three parallel sequences (spec 4.5), in order,
        until the file is full. Every put goes through here (:meth:`put_key_hash` is a batch
        of one).

        The bytes written are exactly those of the same puts made one by one; only the
        header is written once, after the last entry, instead of after each (after a crash
        it may lag by one batch, which the module docstring already allows: the file is
        rebuilt). ``index_count`` is raised after each entry, so readers see each entry as
        soon as it is complete; the end fields follow at the end of the batch. ~0.8 us a key
        in batches against ~1.3 us one by one (CI box, default dimensions, page faults
        included).

        Returns:
            How many entries were written (fewer than asked when the file filled up).

        Raises:
            StoreNotWritableError: the file is read-only.
            DiskFullError: a file opened again found no space for its blocks (nothing
                written; the next put tries again).
            StoreClosedError: the file is closed.

        Single writer only.
        """
        if not self._writable:
            self._raise_not_writable()
        index = self._index_count
        stop = min(len(key_hashes), start + self._max_entries - index)
        if stop <= start:
            return 0
        entries_end = self._entry_base + (index + stop - start) * _ENTRY_SIZE
        if entries_end > self._reserved_end:
            self._reserve_to(entries_end)
        if index <= _FIRST_INDEX and stop - start > index_bulk.BULK_MIN:
            # A new file's first entry sets its begin fields (every later time diff depends
            # on them): that one through the loop, the rest in bulk.
            self.put_entries(key_hashes[: start + 1], phys_offsets[: start + 1], store_timestamps[: start + 1], start)  # fmt: skip
            return 1 + self.put_entries(key_hashes, phys_offsets, store_timestamps, start + 1)
        if index > _FIRST_INDEX and stop - start >= index_bulk.BULK_MIN:
            if self._put_bulk(key_hashes[start:stop], phys_offsets[start:stop], store_timestamps[start:stop]):  # fmt: skip
                return stop - start
        mm = self._mm
        hash_slots = self._hash_slots
        slot_base = self._slot_base
        entry_base = self._entry_base
        begin_timestamp = self._begin_timestamp
        slot_count = self._hash_slot_count
        key_hash = phys_offset = store_timestamp = 0
        last_timestamp: int | None = None  # keys of one message share its store time
        time_diff = 0
        entry_pos = entry_base + index * _ENTRY_SIZE
        for key_hash, phys_offset, store_timestamp in zip(
            index_bulk.as_ints(key_hashes[start:stop]),
            index_bulk.as_ints(phys_offsets[start:stop]),
            index_bulk.as_ints(store_timestamps[start:stop]),
            strict=True,
        ):
            # Spec 4.5: 2. slot (a value outside [1, index_count] is stale and reads as empty);
            # 3. time diff against the begin before step 6 may change it (Java divides
            # toward zero; floor differs only for negatives, clamped to 0 anyway);
            # 4. entry first, 5. then the slot, so a reader that sees the slot finds the
            # entry complete; 6. the first entry sets the begin fields; 7. the counters and
            # the header, written once after the batch.
            slot_pos = slot_base + (key_hash % hash_slots) * _SLOT_SIZE
            (slot_value,) = _unpack_slot(mm, slot_pos)
            if slot_value <= INVALID_INDEX or slot_value > index:
                slot_value = INVALID_INDEX
                slot_count += 1
            if store_timestamp != last_timestamp:
                last_timestamp = store_timestamp
                if begin_timestamp <= 0:
                    time_diff = 0
                else:
                    time_diff = (store_timestamp - begin_timestamp) // 1000
                    if time_diff > MAX_TIME_DIFF:
                        time_diff = MAX_TIME_DIFF
                    elif time_diff < 0:
                        time_diff = 0
            _pack_entry(mm, entry_pos, key_hash, phys_offset, time_diff, slot_value)
            _pack_slot(mm, slot_pos, index)
            if index <= _FIRST_INDEX:  # the first entry sets begin: later time diffs change
                self._begin_phys_offset = phys_offset
                self._begin_timestamp = begin_timestamp = store_timestamp
                last_timestamp = None
            index += 1
            entry_pos += _ENTRY_SIZE
            self._index_count = index  # publish each entry as soon as it is complete
        self._hash_slot_count = slot_count
        self._end_phys_offset = phys_offset
        self._end_timestamp = store_timestamp
        self._write_header()
        return stop - start

    def _put_bulk(
        self,
        hashes: Sequence[int] | index_bulk.Ints,
        phys: Sequence[int] | index_bulk.Ints,
        times: Sequence[int] | index_bulk.Ints,
    ) -> bool:
        """:meth:`put_entries`' loop as column passes (``index_bulk.py``); False: not done."""
        mm, index, slot_base, hash_slots = self._mm, self._index_count, self._slot_base, self._hash_slots  # fmt: skip
        hash_array = index_bulk.as_array(hashes)
        found = index_bulk.read_slots(mm, slot_base, hash_slots, index, hash_array)
        if found is None:
            return False
        time_array = index_bulk.as_array(times)
        diffs = index_bulk.time_diffs(time_array, self._begin_timestamp, MAX_TIME_DIFF)
        entry_pos = self._entry_base + index * _ENTRY_SIZE
        phys_array = index_bulk.as_array(phys)
        index_bulk.write_entries(mm, entry_pos, ENTRY.format, hash_array, phys_array, diffs, found.prevs)  # fmt: skip
        self._index_count = index + len(hash_array)  # entries complete: publish, then link them
        index_bulk.write_slots(mm, slot_base, hash_slots, found, index)
        self._hash_slot_count += found.empty
        self._end_phys_offset = int(phys_array[-1])
        self._end_timestamp = int(time_array[-1])
        self._write_header()
        return True

    def _reserve_to(self, entries_end: int) -> None:
        """Allocate the blocks up to ``entries_end`` and ``ENTRY_RESERVE_BYTES`` past it
        (module docstring): from the start for a file opened again (the slot table is
        written anywhere; blocks it has already cost nothing more, even on a full disk).

        Raises:
            DiskFullError: no space for them (nothing written; the next put tries again).
        """
        size = len(self._mm)
        done = self._reserved_end
        start = done - done % mmap.PAGESIZE
        target = min(size, entries_end + ENTRY_RESERVE_BYTES)
        fd = os.open(self._path, os.O_RDWR)
        try:
            space.reserve(fd, start, target - start, self._path)
        finally:
            os.close(fd)
        self._reserved_end = target

    def _raise_not_writable(self) -> None:
        if not self._available:
            raise StoreClosedError(f"index file {self._path} is closed")
        raise StoreNotWritableError(f"index file {self._path} is open read-only")

    def flush(self) -> None:
        """Write the header and force every dirty page to disk (``msync``). Single writer."""
        if not self._writable:
            if not self._available:
                raise StoreClosedError(f"index file {self._path} is closed")
            return
        self._write_header()
        # Through libc: mmap.flush holds the GIL for the whole sync (hundreds of megabytes
        # when a filled file is flushed, under reput).
        libc.msync_range(self._mm, None, 0, len(self._mm))

    def _write_header(self) -> None:
        _pack_header(
            self._mm,
            0,
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phys_offset,
            self._end_phys_offset,
            self._hash_slot_count,
            self._index_count,
        )

    # ------------------------------------------------------------------ read path

    def select_phys_offsets(
        self, key: str, max_count: int, begin_ms: int, end_ms: int
    ) -> list[int]:
        """Phys offsets of entries whose hash equals ``key``'s, stored within [begin, end].

        Walks the slot's chain newest to oldest (spec 4.7). Only hashes are compared, so the
        caller must re-check the real key. Thread-safe against the writer.

        Args:
            key: the index key, ``topic#key``.
            max_count: stop after this many offsets.
            begin_ms, end_ms: inclusive store-time range.

        Returns:
            Offsets, newest first; empty if the file is closed.
        """
        out: list[int] = []
        self.select_by_hash(index_key_hash(key), max_count, begin_ms, end_ms, out)
        return out

    def select_by_hash(
        self, key_hash: int, limit: int, begin_ms: int, end_ms: int, out: list[int]
    ) -> None:
        """Append matching offsets to ``out`` until ``len(out)`` reaches ``limit``.

        The shared list mirrors RocketMQ, where one list collects across files.
        """
        if not self._hold():
            return
        try:
            self._select_held(key_hash, limit, begin_ms, end_ms, out)
        finally:
            self._release()

    def _select_held(
        self, key_hash: int, limit: int, begin_ms: int, end_ms: int, out: list[int]
    ) -> None:
        mm = self._mm
        index_count = self._index_count
        slot_pos = self._slot_base + (key_hash % self._hash_slots) * _SLOT_SIZE
        (index,) = _unpack_slot(mm, slot_pos)
        if index <= INVALID_INDEX or index > index_count or index_count <= _FIRST_INDEX:
            return
        entry_base = self._entry_base
        while len(out) < limit:
            entry_pos = entry_base + index * _ENTRY_SIZE
            hash_read, phys_offset, time_diff, prev = _unpack_entry(mm, entry_pos)
            if time_diff < 0:
                break
            time_read = self._begin_timestamp + time_diff * 1000
            if hash_read == key_hash and begin_ms <= time_read <= end_ms:
                out.append(phys_offset)
            if prev <= INVALID_INDEX or prev > index_count or prev == index or time_read < begin_ms:
                break
            index = prev

    def entry(self, index: int) -> IndexEntry:
        """Decode entry ``index`` (0 .. max_entries-1), written or not. For tools and tests."""
        if not 0 <= index < self._max_entries:
            raise IndexError(f"entry {index} outside 0..{self._max_entries - 1}")
        with self._held():
            return IndexEntry(*_unpack_entry(self._mm, self._entry_base + index * ENTRY.size))

    def read_entries(self, first: int, stop: int) -> bytes:
        """A copy of entries ``first .. stop-1`` (20 bytes each, ``ENTRY``), for checks that
        look at many at once (``derived_check.py``). Thread-safe.

        Raises:
            StoreClosedError: the file is closed.
        """
        first, stop = max(0, first), min(stop, self._max_entries)
        with self._held():
            base = self._entry_base
            return self._mm[base + first * ENTRY.size : base + max(first, stop) * ENTRY.size]

    def read_slots(self) -> bytes:
        """A copy of the whole slot table (``hash_slots`` x ``SLOT``). Thread-safe.

        Raises:
            StoreClosedError: the file is closed.
        """
        with self._held():
            return self._mm[self._slot_base : self._entry_base]

    def read_header(self) -> tuple[int, int, int, int, int, int]:
        """The header as the bytes hold it now (``HEADER`` fields). Thread-safe.

        Raises:
            StoreClosedError: the file is closed.
        """
        with self._held():
            header: tuple[int, int, int, int, int, int] = _unpack_header(self._mm, 0)
            return header

    def slot(self, slot_pos: int) -> int:
        """The raw value of slot ``slot_pos``. For tools and tests."""
        if not 0 <= slot_pos < self._hash_slots:
            raise IndexError(f"slot {slot_pos} outside 0..{self._hash_slots - 1}")
        with self._held():
            return int(_unpack_slot(self._mm, self._slot_base + slot_pos * SLOT.size)[0])

    # ------------------------------------------------------------------ check

    def check(self) -> list[str]:
        """Walk the whole file and describe every structural defect found (empty = sound).

        Reads the header from the bytes (not the cached attributes), every slot and every
        written entry: O(hash_slots + index_count), about 10 s for a full default file. Meant
        for offline tools; the report is capped at 100 lines per file.
        """
        from mqcore.store.index.index_check import IndexChecker  # imports this module

        with self._held():
            return IndexChecker(
                self.name, self._mm, self.hash_slots, self.max_entries, self._entry_base
            ).run()

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Flush (if writable) and unmap; safe to call twice. Not concurrent with the writer."""
        if not self._available:
            return
        if self._writable:
            self.flush()
        self._retire()

    def destroy(self) -> None:
        """Unmap and delete the file. Concurrent readers finish on the old mapping first."""
        self._retire()
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass

    def _retire(self) -> None:
        with self._ref_lock:
            self._available = False
            self._writable = False
            if self._refs == 0:
                self._unmap_locked()

    def _unmap_locked(self) -> None:
        if not self._unmapped:
            self._unmapped = True
            self._mm.close()

    def _hold(self) -> bool:
        with self._ref_lock:
            if not self._available:
                return False
            self._refs += 1
            return True

    def _release(self) -> None:
        with self._ref_lock:
            self._refs -= 1
            if self._refs == 0 and not self._available:
                self._unmap_locked()

    @contextmanager
    def _held(self) -> Iterator[None]:
        if not self._hold():
            raise StoreClosedError(f"index file {self._path} is closed")
        try:
            yield
        finally:
            self._release()

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.name}, count={self._index_count}, "
            f"ts={self._begin_timestamp}..{self._end_timestamp}, "
            f"phys={self._begin_phys_offset}..{self._end_phys_offset})"
        )


def _check_dimensions(hash_slots: int, max_entries: int) -> None:
    if hash_slots < 1:
        raise ValueError(f"hash_slots must be >= 1, got {hash_slots}")
    # Entry 0 is never used: a file needs 2 entries to hold anything, and a file that can
    # hold nothing would make the roll-on-full loop spin.
    if max_entries < 2:
        raise ValueError(f"max_entries must be >= 2, got {max_entries}")
    if index_file_size(hash_slots, max_entries) > 2**31 - 1:
        raise ValueError("index file larger than 2 GiB (RocketMQ sizes it with an int)")
