"""Read-only access to CommitLog segment files: listing, partition planning, the record walk.

Nothing here opens a :class:`mqcore.store.MessageStore` or takes ``<store>/lock``: the files are
mapped read-only (``mmap.ACCESS_READ``) while the broker may be appending, so Spark can scan a
live store or a copy of one. Chunks are views of the map, not copies (a 16 MiB ``pread`` into
a buffer cost ~1 ms, 0.02 us a record, as much again in cache misses). The map survives
cleanup deleting the file mid-scan (an unlinked file stays readable while mapped), and the
store never shrinks a CommitLog file (recovery zeroes a torn tail), so no access faults. Layout and magic codes come from ``mqcore.format.record`` (spec 1, 2)::

    <store>/commitlog/00000000000000000000   records ... blank record, zeros
    <store>/commitlog/00000000001073741824   named by base_offset (20 digits)

**Partitions.** One :class:`ScanRange` per segment, or per ``max_partition_bytes`` slice of a
large one. A range owns the records that *start* in ``[start, stop)``, so a record that runs
over a slice boundary belongs to the slice where it starts and is read whole.

**Finding the first record of a slice** (``start`` inside a segment, not at a known record
start): records carry no sync marker, so candidates are found by their magic code and kept only
if the record's PHYSICALOFFSET field names its own position, it passes ``check_record`` with the
body CRC, and the bytes after it are another such record, a blank record or zeros. A body that
embeds a copy of a record written for that exact position could still fool it; nothing written
by a producer ever does, and slices only exist for segments over ``max_partition_bytes``.

**The walk** (:func:`iter_chunks`) reads ``chunk_bytes`` at a time and stops at the range end,
a blank record (end of segment), bytes that are not a record (the zero-filled tail of the
segment being written, or garbage), a record claiming more bytes than the file has, or, with
``verify_crc``, a body CRC mismatch: a record being appended right now is torn, not finished.
CRCs are checked on the *tail* segments by default (see :func:`plan_ranges`); older segments
are immutable. Framing beyond TOTALSIZE and magic is checked per record by the decoder.
"""

from __future__ import annotations

import mmap
import os
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mqcore.format.body_crc import body_crc_array
from mqcore.format.chain import candidates, walk
from mqcore.format.layout import (
    HEADER_SIZES,
    HOST_V6_FLAGS,
    INT32,
    INT64,
    MAGIC_POSITION,
    SIZE_MAGIC,
)
from mqcore.format.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    PHYS_OFFSET_POSITION,
    Valid,
    check_record,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_MAX_PARTITION_BYTES",
    "Chunk",
    "ScanRange",
    "Segment",
    "StoreLayoutError",
    "iter_chunks",
    "list_segments",
    "plan_ranges",
    "snapshot_end",
]

DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
"""Bytes of the map per step; one Arrow batch each (~14,000 rows of 300-byte records). The
decoder's passes over a chunk then work in the CPU caches: 4 MiB costs ~13% less CPU a row
than 16 MiB (0.53 against 0.61 us on the 5M-message bench store; 2 and 8 MiB are within 5%
of 4). A record longer than this (up to 4 MiB body + 64 KiB) makes its chunk longer."""
DEFAULT_MAX_PARTITION_BYTES = 256 * 1024 * 1024
"""Segments above this are split: a default 1 GiB segment makes 4 Spark tasks."""

MIN_PARTITION_BYTES = 4096
_SEGMENT_NAME = re.compile(r"[0-9]{20}")
_MAGICS = (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)
_MAGIC_BYTES = tuple(m.to_bytes(4, "big", signed=True) for m in _MAGICS)
_V1_HEADER = HEADER_SIZES[0]  # 88: V1 magic, IPv4 born and store hosts
_SYSFLAG_LOW_BYTE = 39  # SYSFLAG is bytes 36..39; bits 4/5 (IPv6 hosts) sit in the last one
_BODY_CRC_POSITION = 8
_BODY_LENGTH_POSITION = _V1_HEADER - INT32.size  # 84


class StoreLayoutError(ValueError):
    """The directory is not a store (no ``commitlog/``) or a segment cannot be read."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One CommitLog file: ``base_offset`` is its name, ``size`` its length in bytes."""

    path: str
    base_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class ScanRange:
    """Records starting in ``[start, stop)`` (absolute offsets) of one segment. Picklable.

    ``synced`` says ``start`` is known to be a record start (segment start, or a watermark the
    archive wrote); otherwise the reader looks for the first record at or after it.
    """

    path: str
    base_offset: int
    file_size: int
    start: int
    stop: int
    verify_crc: bool
    synced: bool

    @property
    def name(self) -> str:
        """``<segment name>@<start>`` for progress lines."""
        return f"{self.base_offset:020d}@{self.start - self.base_offset}"


@dataclass(slots=True)
class Chunk:
    """Whole records read from one segment: ``data[positions[i]:positions[i+1]]`` is record i.

    ``base`` is the absolute CommitLog offset of ``data[0]``; ``positions`` has one more entry
    than there are records (the end of the last). ``data`` is a read-only view of the segment's
    map, valid for as long as it is referenced (the map is unmapped when the last view goes).
    """

    data: memoryview
    base: int
    positions: array[int]
    segment_base: int

    @property
    def count(self) -> int:
        return len(self.positions) - 1


@dataclass(slots=True)
class WalkState:
    """How a walk ended; filled in by :func:`iter_chunks` as it goes."""

    records: int = 0
    next_offset: int = 0
    """Absolute offset after the last record read (where a later walk would go on)."""
    reason: str = ""
    """``range_end``, ``blank``, ``end_of_data``, ``crc``, ``file_end`` or ``gone``."""
    detail: str = ""
    stopped: bool = field(default=False)
    """Set by the consumer to end the walk early (a corrupt record mid-chunk)."""


def list_segments(store_dir: str | os.PathLike[str]) -> list[Segment]:
    """The CommitLog segments of ``store_dir``, oldest first. Reads only the directory.

    Zero-length files (a segment being created) are skipped.

    Raises:
        StoreLayoutError: ``store_dir`` has no ``commitlog`` directory.
    """
    directory = Path(store_dir) / "commitlog"
    if not directory.is_dir():
        raise StoreLayoutError(f"{store_dir}: not a store directory (no commitlog/ inside)")
    found: list[Segment] = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if _SEGMENT_NAME.fullmatch(entry.name) and entry.is_file():
            size = entry.stat().st_size
            if size > 0:
                found.append(Segment(entry.path, int(entry.name), size))
    return found


def _has_records(segment: Segment) -> bool:
    """Whether the segment starts with a record or a blank (not zeros: not written yet)."""
    try:
        with open(segment.path, "rb") as f:
            head = f.read(SIZE_MAGIC.size)
    except FileNotFoundError:
        return False
    if len(head) < SIZE_MAGIC.size:
        return False
    _total, magic = SIZE_MAGIC.unpack(head)
    return magic in _MAGICS or magic == BLANK_MAGIC_CODE


def tail_index(segments: list[Segment]) -> int:
    """Index of the first *tail* segment: the last one holding records (0 if none do).

    Segments from there on may still be written to (RocketMQ also pre-creates the next file,
    all zeros, which is why the last file is not simply the tail).
    """
    for i in range(len(segments) - 1, -1, -1):
        if _has_records(segments[i]):
            return i
    return 0


def plan_ranges(
    segments: list[Segment],
    *,
    start_offset: int = 0,
    end_offset: int | None = None,
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
    verify_crc: str = "tail",
    start_is_record: bool = False,
) -> list[ScanRange]:
    """Split the segments overlapping ``[start_offset, end_offset)`` into scan ranges.

    Args:
        segments: from :func:`list_segments`.
        start_offset, end_offset: absolute CommitLog offsets; records starting outside are
            not read (segments entirely outside are not even opened).
        max_partition_bytes: larger segments are cut into slices of this size.
        verify_crc: ``tail`` (default: CRC-check the tail segments, which a live broker may
            be appending to), ``all`` or ``none``.
        start_is_record: ``start_offset`` is a record start (the archive's watermark), so the
            range beginning there needs no search for the first record.

    Raises:
        ValueError: a bad ``verify_crc`` or ``max_partition_bytes``.
    """
    if verify_crc not in ("tail", "all", "none"):
        raise ValueError(f"verifyCrc must be tail, all or none, got {verify_crc!r}")
    if max_partition_bytes < MIN_PARTITION_BYTES:
        raise ValueError(
            f"maxPartitionBytes must be at least {MIN_PARTITION_BYTES}, got {max_partition_bytes}"
        )
    tail = tail_index(segments) if verify_crc == "tail" else 0
    ranges: list[ScanRange] = []
    for i, seg in enumerate(segments):
        lo = max(seg.base_offset, start_offset)
        hi = seg.base_offset + seg.size
        if end_offset is not None:
            hi = min(hi, end_offset)
        if lo >= hi:
            continue
        verify = verify_crc == "all" or (verify_crc == "tail" and i >= tail)
        piece_start = lo
        while piece_start < hi:
            rel = piece_start - seg.base_offset
            piece_stop = min(
                hi, seg.base_offset + (rel // max_partition_bytes + 1) * max_partition_bytes
            )
            synced = piece_start == seg.base_offset or (piece_start == lo and start_is_record)
            ranges.append(
                ScanRange(
                    seg.path, seg.base_offset, seg.size, piece_start, piece_stop, verify, synced
                )
            )
            piece_start = piece_stop
    return ranges


# --- finding the first record of a slice ---------------------------------------------------------


def _self_located(data: bytes, q: int, absolute: int) -> bool:
    """The record at ``data[q:]`` frames, passes its CRC and names ``absolute`` as its offset."""
    if q + MIN_RECORD_SIZE > len(data):
        return False
    (phys,) = INT64.unpack_from(data, q + PHYS_OFFSET_POSITION)
    return phys == absolute and isinstance(check_record(data, q, len(data), check_crc=True), Valid)


def _follows_cleanly(data: bytes, q: int, absolute: int) -> bool:
    """What follows a candidate record is a record at its own position, a blank, or zeros."""
    if q + SIZE_MAGIC.size > len(data):
        return True  # the window ends: nothing contradicts the candidate
    total, magic = SIZE_MAGIC.unpack_from(data, q)
    if magic == BLANK_MAGIC_CODE or (total == 0 and magic == 0):
        return True
    if magic not in _MAGICS or q + total > len(data):
        return q + total > len(data) and magic in _MAGICS
    return _self_located(data, q, absolute)


def find_first_record(fd: int, rng: ScanRange, window_bytes: int) -> int | None:
    """Absolute offset of the first record starting in ``[rng.start, rng.stop)``, or None."""
    rel = rng.start - rng.base_offset
    stop_rel = rng.stop - rng.base_offset
    while rel < stop_rel:
        data = os.pread(fd, min(window_bytes, rng.file_size - rel), rel)
        # Each magic code found is a candidate record starting 4 bytes earlier.
        for q in candidates(data)[0].tolist():
            if rel + q >= stop_rel:
                return None
            total = INT32.unpack_from(data, q)[0]
            if total < MIN_RECORD_SIZE or rel + q + total > rng.file_size:
                continue
            if q + total + SIZE_MAGIC.size > len(data):
                window = os.pread(fd, total + MIN_RECORD_SIZE + 4096 * 1024, rel + q)
                if _self_located(window, 0, rng.base_offset + rel + q) and _follows_cleanly(
                    window, total, rng.base_offset + rel + q + total
                ):
                    return rng.base_offset + rel + q
                continue
            absolute = rng.base_offset + rel + q
            if _self_located(data, q, absolute) and _follows_cleanly(
                data, q + total, absolute + total
            ):
                return absolute
        if len(data) < window_bytes:
            return None
        rel += len(data) - MIN_RECORD_SIZE  # overlap so a record head is never cut in two
    return None


# --- the walk --------------------------------------------------------------------------------------


def _crc_ok(data: bytes | memoryview, q: int, total: int) -> bool:
    """The body CRC of the record at ``q`` matches (mqcore's check; Corrupt with a size passes:
    the decoder skips that record as reput does)."""
    result = check_record(data, q, q + total, check_crc=True)
    return isinstance(result, Valid) or getattr(result, "size", 0) > 0


def _first_bad_crc(data: memoryview, positions: array[int], count: int, end: int) -> int:
    """Index of the first of the first ``count`` records whose body CRC fails (``count``: none).

    ``positions`` holds the chain (record i ends at ``positions[i + 1]``, the last at ``end``).
    V1/IPv4 records whose BODYLENGTH fits are framed with numpy and their bodies go through
    ``body_crc_array`` at once (a small fraction of ~1.5 us for a check per record in
    Python); any other record takes :func:`_crc_ok`.
    """
    if count == 0:
        return 0
    chain_at = np.frombuffer(positions, np.int32, len(positions)).astype(np.int64)
    start = chain_at[:count]
    stop = np.append(chain_at[1:], end)[:count]
    words = np.ndarray((len(data) - 3,), ">i4", data, 0, (1,))
    sys_flag_low = np.frombuffer(data, np.uint8)[start + _SYSFLAG_LOW_BYTE]
    body_length = words[start + _BODY_LENGTH_POSITION].astype(np.int64)
    body_start = start + _V1_HEADER
    body_stop = body_start + body_length
    framed = (
        (words[start + MAGIC_POSITION] == MESSAGE_MAGIC_CODE_V1)
        & (sys_flag_low & HOST_V6_FLAGS == 0)
        & (body_length >= 0)
        & (body_stop <= stop)
    )
    ok = framed & (body_length == 0)
    summed = np.flatnonzero(framed & (body_length > 0))
    if len(summed):
        bodies = map(
            data.__getitem__, map(slice, body_start[summed].tolist(), body_stop[summed].tolist())
        )
        stored = words[start[summed] + _BODY_CRC_POSITION].astype(np.int64)
        ok[summed] = body_crc_array(bodies, len(summed)) == stored
    for i in np.flatnonzero(~framed).tolist():
        ok[i] = _crc_ok(data, int(start[i]), int(stop[i] - start[i]))
    return count if ok.all() else int(np.argmin(ok))


def iter_chunks(
    rng: ScanRange,
    state: WalkState,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[Chunk]:
    """Read the range's records, a chunk at a time (module docstring: when the walk stops).

    ``state`` is updated before each chunk is yielded and when the walk ends; the consumer
    sets ``state.stopped`` to end it after the current chunk.

    ``chunk_bytes`` is how many bytes of the map one chunk spans (one Arrow batch); a record
    longer than that makes its chunk longer.
    """
    state.next_offset = rng.start
    try:
        fd = os.open(rng.path, os.O_RDONLY)
    except FileNotFoundError:
        state.reason, state.detail = "gone", f"{rng.path} was deleted (cleanup) before the scan"
        return
    try:
        start = rng.start if rng.synced else find_first_record(fd, rng, chunk_bytes)
        if start is None:
            state.reason, state.next_offset = "range_end", rng.stop
            return
        mapped = _map(fd, rng)
        if mapped is None:
            state.reason, state.next_offset = "file_end", start
            return
        try:
            yield from _walk(mapped, rng, start - rng.base_offset, state, chunk_bytes)
        finally:
            _unmap(mapped)
    finally:
        os.close(fd)


def _map(fd: int, rng: ScanRange) -> memoryview | None:
    """The segment mapped read-only, at most ``rng.file_size`` bytes (None: the file is empty)."""
    size = min(os.fstat(fd).st_size, rng.file_size)
    if size == 0:
        return None
    return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))


def _unmap(mapped: memoryview) -> None:
    """Unmap now unless chunks are still referenced (then when the last of them goes)."""
    owner = mapped.obj
    mapped.release()
    try:
        owner.close()
    except BufferError:
        pass  # views live on in the consumer's hands: the map stays until they are dropped


def _first_non_record(data: bytes | memoryview, positions: array[int], count: int) -> int:
    """Index of the first of ``positions[:count]`` whose magic is not a message magic.

    A position whose magic lies past the data counts as a message: it is the last one, and
    :func:`_cut` cuts it as a record running past the bytes read.
    """
    if count == 0:
        return 0
    at = np.frombuffer(positions, np.int32, count).astype(np.int64) + MAGIC_POSITION
    words = np.ndarray((max(len(data) - 3, 0),), ">i4", data, 0, (1,))
    readable = at < len(words)
    magic = words[np.where(readable, at, 0)]
    good = (magic == _MAGICS[0]) | (magic == _MAGICS[1]) | ~readable
    if good.all():
        return count
    return int(np.argmin(good))


def _walk(
    mapped: memoryview, rng: ScanRange, rel: int, state: WalkState, chunk_bytes: int
) -> Iterator[Chunk]:
    stop_rel = rng.stop - rng.base_offset
    want = chunk_bytes
    while not state.stopped and rel < stop_rel:
        data = mapped[rel : rel + want]
        limit = min(len(data) - SIZE_MAGIC.size, stop_rel - rel - 1)
        starts, end = walk(data, 0, limit + 1, base=rng.base_offset + rel)
        positions = array("i")
        positions.frombytes(starts.astype(np.int32).tobytes())
        count, q, reason, want = _cut(data, positions, end, rel, rng.file_size, chunk_bytes)
        if rng.verify_crc:
            bad = _first_bad_crc(data, positions, count, end)
            if bad < count:
                count, q, reason = bad, positions[bad], "crc"
                state.detail = f"body CRC mismatch at {rng.base_offset + rel + q} (a torn append?)"
        if not reason:  # the chain loop ended by itself
            if q <= limit:  # TOTALSIZE below the smallest record: a short blank, or zeros
                magic = INT32.unpack_from(data, q + MAGIC_POSITION)[0]
                reason = "blank" if magic == BLANK_MAGIC_CODE else "end_of_data"
            elif rel + q >= stop_rel:
                reason = "range_end"
            else:
                reason = "chunk" if rel + q + SIZE_MAGIC.size <= rng.file_size else "file_end"
        if count:
            del positions[count:]
            positions.append(q)
            state.records += count
            state.next_offset = rng.base_offset + rel + q
            yield Chunk(data, rng.base_offset + rel, positions, rng.base_offset)
        rel += q
        state.reason = reason
        if reason != "chunk":
            break
    if rel >= stop_rel and state.reason in ("", "chunk"):
        state.reason = "range_end"
    state.next_offset = max(state.next_offset, rng.base_offset + rel)


def _cut(
    data: bytes | memoryview,
    positions: array[int],
    end: int,
    rel: int,
    file_size: int,
    chunk_bytes: int,
) -> tuple[int, int, str, int]:
    """Where the records of a chain end: (count, end offset in data, reason or "", next read size).

    Cuts at the first position that is not a message (blank record, zeros, garbage), else
    before a last record that runs past the bytes read.
    """
    n = len(positions)
    good = _first_non_record(data, positions, n)
    if good < n:
        q = positions[good]
        magic = INT32.unpack_from(data, q + MAGIC_POSITION)[0]
        return good, q, "blank" if magic == BLANK_MAGIC_CODE else "end_of_data", chunk_bytes
    if n and end > len(data):
        q = positions[n - 1]
        if rel + end > file_size:
            return n - 1, q, "end_of_data", chunk_bytes  # claims more than the file holds
        return n - 1, q, "chunk", max(chunk_bytes, end - q)
    return n, end, "", chunk_bytes


def snapshot_end(store_dir: str | os.PathLike[str], from_offset: int = 0) -> int:
    """The end of the last complete record now in the CommitLog (CRC-checked), at or after
    ``from_offset``: a stable upper bound for a job that must read the same data twice.

    Only the tail segments are walked, from ``from_offset`` when it lies in them.
    """
    segments = list_segments(store_dir)
    if not segments:
        return from_offset
    tail = tail_index(segments)
    end = max(from_offset, segments[tail].base_offset)
    for seg in segments[tail:]:
        lo = max(seg.base_offset, from_offset)
        if lo >= seg.base_offset + seg.size:
            continue
        rng = ScanRange(
            seg.path, seg.base_offset, seg.size, lo, seg.base_offset + seg.size, True, True
        )
        state = WalkState()
        for _chunk in iter_chunks(rng, state):
            pass
        if state.records:
            end = state.next_offset
    return end
