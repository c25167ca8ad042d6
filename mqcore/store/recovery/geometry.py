"""Segment sizes of an existing store, read back from its files (for offline tools).

RocketMQ keeps its file sizes in configuration only; nothing on disk records them. A tool
pointed at a store it did not configure (``python -m mqcore check``) infers them::

    what                      where it shows                        how
    ------------------------  ------------------------------------  ---------------------------
    CommitLog segment size    commitlog/<20 digits>                 the file length
    ConsumeQueue file size    consumequeue/<topic>/<qid>/<20 d.>    the file length (x 20)
    IndexFile slots, entries  index/<17 digits>: length = 40 +      see below
                              4 x slots + 20 x entries

Index geometry (from the files of the most common length: one cut short does not count), in
order of preference: values given by the caller; a file other than the
newest one, which only rolled because it was full, so ``entries = index_count`` (spec 4.6);
RocketMQ's defaults when the length is theirs (420,000,040 bytes); else the newest entry is
located by the file's last non-zero byte (entries are appended, and the tail after them is
never written) and a candidate is accepted when that entry is the head of its slot's chain,
holds the header's ``end_phys_offset`` and entry 1 holds ``begin_phys_offset``.

Nothing here writes: files are opened read-only and only their lengths and a few bytes read.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

from mqcore.errors import ValidationError
from mqcore.store.config import StoreConfig
from mqcore.store.consume_queue import CQ_UNIT_SIZE, DEFAULT_FILE_SIZE_BYTES
from mqcore.store.index.index_file import ENTRY, HEADER, SLOT, index_file_size
from mqcore.store.index.index_service import DEFAULT_HASH_SLOTS, DEFAULT_MAX_ENTRIES

__all__ = ["Geometry", "infer_geometry", "segment_paths"]

DEFAULT_COMMITLOG_FILE_SIZE = StoreConfig.commitlog_file_size
_TAIL_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Geometry:
    """The four sizes a store was created with, and how each was found (``notes``)."""

    commitlog_file_size: int
    consume_queue_file_size: int
    index_hash_slots: int
    index_max_entries: int
    notes: tuple[str, ...] = field(default=(), compare=False)

    def store_config(self) -> StoreConfig:
        """A :class:`StoreConfig` with these sizes (and defaults for everything else).

        Raises:
            ValidationError: a size Cairn cannot open (e.g. segments under 4096 bytes).
        """
        if self.consume_queue_file_size % CQ_UNIT_SIZE:
            raise ValidationError(
                "consume_queue_file_size",
                "multiple_of_20",
                f"consume queue files are {self.consume_queue_file_size} bytes, "
                f"not a multiple of {CQ_UNIT_SIZE}",
            )
        return StoreConfig(
            commitlog_file_size=self.commitlog_file_size,
            consume_queue_file_entries=self.consume_queue_file_size // CQ_UNIT_SIZE,
            index_hash_slots=self.index_hash_slots,
            index_max_entries=self.index_max_entries,
        )


def segment_paths(directory: Path, digits: int = 20) -> list[Path]:
    """Files of ``directory`` named by ``digits`` decimal digits, sorted (missing dir: [])."""
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return []
    return sorted(
        p
        for p in entries
        if len(p.name) == digits and p.name.isascii() and p.name.isdigit() and p.is_file()
    )


def infer_geometry(
    root: str | os.PathLike[str],
    *,
    commitlog_file_size: int | None = None,
    consume_queue_file_size: int | None = None,
    index_hash_slots: int | None = None,
    index_max_entries: int | None = None,
) -> Geometry:
    """Sizes of the store at ``root``: the given ones, else read from the files.

    Args:
        root: the store directory.
        commitlog_file_size, consume_queue_file_size: bytes, or None to infer.
        index_hash_slots, index_max_entries: or None to infer (see the module docstring).

    Returns:
        The geometry; ``notes`` say where each value came from.

    Raises:
        ValidationError: a given index dimension does not fit the index files' length.
        OSError: a file cannot be read.
    """
    root = Path(root)
    notes: list[str] = []
    commitlog = _infer_file_size(
        "commitlog", segment_paths(root / "commitlog"), commitlog_file_size,
        DEFAULT_COMMITLOG_FILE_SIZE, notes,
    )  # fmt: skip
    cq_files = [p for q in _queue_dirs(root / "consumequeue") for p in segment_paths(q)]
    consume_queue = _infer_file_size(
        "consumequeue", cq_files, consume_queue_file_size, DEFAULT_FILE_SIZE_BYTES, notes
    )
    index_files = [p for p in segment_paths(root / "index", 17) if p.stat().st_size > 0]
    slots, entries, how = _infer_index(index_files, index_hash_slots, index_max_entries)
    notes.append(f"index: {slots} hash slots x {entries} entries ({how})")
    return Geometry(commitlog, consume_queue, slots, entries, tuple(notes))


def _queue_dirs(directory: Path) -> list[Path]:
    try:
        topics = sorted(p for p in directory.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []
    return [q for t in topics for q in sorted(t.iterdir()) if q.is_dir()]


def _infer_file_size(
    what: str, paths: list[Path], given: int | None, default: int, notes: list[str]
) -> int:
    if given is not None:
        notes.append(f"{what}: {given} bytes per file (given)")
        return given
    sizes = [size for size in (p.stat().st_size for p in paths) if size > 0]
    if not sizes:
        notes.append(f"{what}: {default} bytes per file (no files; default)")
        return default
    size = max(set(sizes), key=sizes.count)
    notes.append(f"{what}: {size} bytes per file (from the file lengths)")
    return size


# --- index geometry ---------------------------------------------------------------------


def _infer_index(paths: list[Path], slots: int | None, entries: int | None) -> tuple[int, int, str]:
    """(hash slots, max entries, how they were found)."""
    if slots is not None and entries is not None:
        return slots, entries, "given"
    if not paths:
        return slots or DEFAULT_HASH_SLOTS, entries or DEFAULT_MAX_ENTRIES, "no files; default"
    # The length most files have: a file cut short (or damaged) must not decide it.
    lengths = [p.stat().st_size for p in paths]
    size = max(set(lengths), key=lengths.count)
    paths = [p for p, length in zip(paths, lengths, strict=True) if length == size]
    room = size - HEADER.size
    if slots is not None:
        return slots, _exact(room - slots * SLOT.size, ENTRY.size, "index_hash_slots"), "given"
    if entries is not None:
        return _exact(room - entries * ENTRY.size, SLOT.size, "index_max_entries"), entries, "given"
    headers = [(p, _read_header(p)) for p in paths]
    for path, header in headers[:-1]:  # every file but the newest rolled because it was full
        count = header[5]
        slot_bytes = room - count * ENTRY.size
        if count >= 2 and slot_bytes >= SLOT.size and slot_bytes % SLOT.size == 0:
            found = (slot_bytes // SLOT.size, count)
            if _consistent(path, size, *found, header):
                return *found, f"from the full file {path.name}"
    if size == index_file_size(DEFAULT_HASH_SLOTS, DEFAULT_MAX_ENTRIES):
        return DEFAULT_HASH_SLOTS, DEFAULT_MAX_ENTRIES, "RocketMQ's default file length"
    for path, header in reversed(headers):
        if header[5] >= 2:
            located = _locate_newest_entry(path, size, header)
            if located is not None:
                return *located, f"from the entries of {path.name}"
    if size % SLOT.size == 0 and size >= HEADER.size + SLOT.size + 2 * ENTRY.size:
        # No entry anywhere: the split between slots and entries cannot be seen and does
        # not matter for reading empty files.
        return (room - 2 * ENTRY.size) // SLOT.size, 2, "files hold no entries; any split"
    raise ValidationError(
        "index_geometry",
        "unknown",
        f"cannot tell the hash slots and entries of {size}-byte index files; "
        "give --index-hash-slots or --index-max-entries",
    )


def _exact(total: int, unit: int, given: str) -> int:
    if total < 2 * unit or total % unit:
        raise ValidationError(
            given, "geometry", f"{given}: does not fit the length of the index files"
        )
    return total // unit


def _read_header(path: Path) -> tuple[int, int, int, int, int, int]:
    with open(path, "rb") as f:
        data = f.read(HEADER.size).ljust(HEADER.size, b"\0")
    begin_ts, end_ts, begin_phys, end_phys, slot_count, count = HEADER.unpack(data)
    return begin_ts, end_ts, begin_phys, end_phys, slot_count, max(count, 1)


def _map(path: Path) -> mmap.mmap:
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _consistent(path: Path, size: int, slots: int, entries: int, header: tuple[int, ...]) -> bool:
    """Whether entries 1 and ``index_count - 1`` sit where (slots, entries) puts them."""
    count = header[5]
    if count < 2:
        return True
    if count > entries or index_file_size(slots, entries) != size:
        return False
    with _map(path) as mm:
        return _entries_match(mm, slots, count, header)


def _entries_match(mm: mmap.mmap, slots: int, count: int, header: tuple[int, ...]) -> bool:
    entry_base = HEADER.size + slots * SLOT.size
    last_hash, last_phys, _, _ = ENTRY.unpack_from(mm, entry_base + (count - 1) * ENTRY.size)
    _, first_phys, _, _ = ENTRY.unpack_from(mm, entry_base + ENTRY.size)
    if last_hash < 0 or last_phys != header[3] or first_phys != header[2]:
        return False
    (head,) = SLOT.unpack_from(mm, HEADER.size + (last_hash % slots) * SLOT.size)
    return bool(head == count - 1)


def _locate_newest_entry(path: Path, size: int, header: tuple[int, ...]) -> tuple[int, int] | None:
    """Find (slots, entries) from where the last written entry ends (module docstring)."""
    count = header[5]
    with _map(path) as mm:
        end = _last_nonzero_end(mm, size)
        # The newest entry's last non-zero byte is somewhere in its 20 bytes.
        for back in range(1, ENTRY.size + 1):
            entry_base = end - back - (count - 1) * ENTRY.size
            slot_bytes = entry_base - HEADER.size
            if slot_bytes < SLOT.size or slot_bytes % SLOT.size:
                continue
            rest = size - entry_base
            if rest % ENTRY.size or rest // ENTRY.size < count:
                continue
            slots = slot_bytes // SLOT.size
            if _entries_match(mm, slots, count, header):
                return slots, rest // ENTRY.size
    return None


def _last_nonzero_end(buf: mmap.mmap, size: int) -> int:
    """One past the last non-zero byte of ``buf`` (0 if all zero)."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK_BYTES)
        piece = buf[start:end].rstrip(b"\0")
        if piece:
            return start + len(piece)
        end = start
    return 0
