"""The on-disk form of idempotent producers' state: journal and snapshot entries, sans I/O.

Two kinds of file, both in ``<store>/kafka/producers/`` (``producer_files.py`` reads and
writes them; this module only encodes and decodes bytes)::

    00000000000000000007.snapshot   the whole state when generation 7 began
    00000000000000000007.journal    what happened after it, appended batch by batch

Both are a file head followed by entries::

    file head (FILE_HEAD, 14 bytes)
    0      4        magic            b"CKPS" (snapshot) or b"CKPJ" (journal)
    4      2        version          1
    6      8        generation       the number in the file name

    entry
    0      4        length           bytes of the payload that follows the CRC
    4      4        crc              zlib CRC-32 of the payload
    8      length   payload          kind (1 byte), fixed fields, then UTF-8 strings

=========  ==============================================================================
kind       payload fields (one ``struct.Struct`` each, below), then strings
=========  ==============================================================================
IDS        the highest producer id ever issued (ids are never reused: InitProducerId
           answers above it after a restart)
INTENT     a batch about to be appended: intent id, producer id, epoch, partition, first
           sequence, record count, the CommitLog end before the append (the batch lies
           at or after it), the masked body CRCs of its first and last record; topic,
           the born host as stored (``msgid.encode_host``). Written, and under sync
           flush made durable, *before* the append: a crash between the append and the
           BATCH entry leaves the intent, and the start finds the batch in the CommitLog
           by it (``producer_recovery.py``) instead of storing the producer's retry again.
BATCH      a stored batch: intent id (0 in snapshots), producer id, epoch, partition,
           first sequence, record count, base (queue) offset, the CommitLog position of
           its first record and an upper bound of its end (the CommitLog end read after
           the append); topic. Written before the produce is acknowledged.
ABANDONED  an intent whose append failed (nothing was stored).
END        last entry of a snapshot: how many entries precede it (a snapshot without
           its END is not used).
=========  ==============================================================================

Invariants and crash behaviour: a journal only grows, entry by entry (one ``write`` each).
A crash leaves at most one partial entry, at the end: :func:`decode_entries` stops at the
first entry whose length runs past the end of the data or whose CRC does not match, and
calls it a torn tail when nothing but zeros or a partial entry follows, *damage*
otherwise (reported, never silently skipped). Snapshots are written whole to a temporary
file and renamed, so a snapshot is complete or absent; one that fails to decode is
damaged.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

FILE_HEAD = struct.Struct(
    ">4s"  # magic
    "H"  # version
    "Q"  # generation
)
SNAPSHOT_MAGIC = b"CKPS"
JOURNAL_MAGIC = b"CKPJ"
VERSION = 1

ENTRY_HEAD = struct.Struct(
    ">I"  # length of the payload
    "I"  # CRC-32 of the payload
)


class Kind(IntEnum):
    IDS = 1
    INTENT = 2
    BATCH = 3
    ABANDONED = 4
    END = 5


_IDS = struct.Struct(
    ">B"  # kind
    "q"  # highest producer id issued
)
_INTENT = struct.Struct(
    ">B"  # kind
    "Q"  # intent id
    "q"  # producer id
    "h"  # producer epoch
    "i"  # partition
    "i"  # first sequence
    "i"  # record count
    "q"  # CommitLog end before the append
    "I"  # masked body CRC of the first record
    "I"  # masked body CRC of the last record
    "H"  # topic length
    "B"  # born host length
)
_BATCH = struct.Struct(
    ">B"  # kind
    "Q"  # intent id (0: none)
    "q"  # producer id
    "h"  # producer epoch
    "i"  # partition
    "i"  # first sequence
    "i"  # record count
    "q"  # base offset (queue offset of the first record)
    "q"  # CommitLog position of the first record
    "q"  # CommitLog end read after the append (>= the batch's end)
    "H"  # topic length
)
_ABANDONED = struct.Struct(
    ">B"  # kind
    "Q"  # intent id
)
_END = struct.Struct(
    ">B"  # kind
    "Q"  # entries before this one
)


class IdsIssued(NamedTuple):
    last_id: int


class Intent(NamedTuple):
    """Fields in ``_INTENT``'s order, then its strings."""

    intent_id: int
    producer_id: int
    epoch: int
    partition: int
    first_sequence: int
    record_count: int
    log_start: int  # the CommitLog end before the append: the batch starts at or after it
    first_crc: int
    last_crc: int
    topic: str
    born_host: bytes  # msgid.encode_host of the records' BORNHOST


class Batch(NamedTuple):
    """Fields in ``_BATCH``'s order, then its topic."""

    intent_id: int  # 0 when it comes from a snapshot or a resolved intent
    producer_id: int
    epoch: int
    partition: int
    first_sequence: int
    record_count: int
    base_offset: int
    first_phys: int  # CommitLog position of the first record
    log_end: int  # >= the CommitLog position after the last record
    topic: str


class Abandoned(NamedTuple):
    intent_id: int


class End(NamedTuple):
    entries: int


Entry = IdsIssued | Intent | Batch | Abandoned | End


class JournalFormatError(ValueError):
    """A file head that is not ours, or a snapshot that does not decode whole."""


# -- encoding ----------------------------------------------------------------------------


def _framed(payload: bytes) -> bytes:
    return ENTRY_HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def encode_entry(entry: Entry) -> bytes:
    """One framed entry.

    Raises:
        struct.error: a field outside its width (a topic over 65,535 bytes, ...).
    """
    if isinstance(entry, Batch):
        topic = entry.topic.encode()
        payload = _BATCH.pack(Kind.BATCH, *entry[:-1], len(topic)) + topic
    elif isinstance(entry, Intent):
        topic = entry.topic.encode()
        fixed = _INTENT.pack(Kind.INTENT, *entry[:-2], len(topic), len(entry.born_host))
        payload = fixed + topic + entry.born_host
    elif isinstance(entry, IdsIssued):
        payload = _IDS.pack(Kind.IDS, entry.last_id)
    elif isinstance(entry, Abandoned):
        payload = _ABANDONED.pack(Kind.ABANDONED, entry.intent_id)
    else:
        payload = _END.pack(Kind.END, entry.entries)
    return _framed(payload)


def encode_file_head(magic: bytes, generation: int) -> bytes:
    return FILE_HEAD.pack(magic, VERSION, generation)


def encode_snapshot(generation: int, entries: list[Entry]) -> bytes:
    """A whole snapshot file: head, ``entries``, END."""
    parts = [encode_file_head(SNAPSHOT_MAGIC, generation)]
    parts += map(encode_entry, entries)
    parts.append(encode_entry(End(len(entries))))
    return b"".join(parts)


# -- decoding ----------------------------------------------------------------------------


def decode_file_head(data: bytes, magic: bytes) -> int:
    """The generation in a file head.

    Raises:
        JournalFormatError: too short, another magic or an unknown version.
    """
    if len(data) < FILE_HEAD.size:
        raise JournalFormatError(f"{len(data)} bytes is shorter than a file head")
    found, version, generation = FILE_HEAD.unpack_from(data, 0)
    if found != magic:
        raise JournalFormatError(f"magic {found!r}, expected {magic!r}")
    if version != VERSION:
        raise JournalFormatError(f"version {version}, this broker reads version {VERSION}")
    return int(generation)


_FIXED: dict[int, tuple[struct.Struct, Callable[[int], Entry]]] = {
    Kind.IDS: (_IDS, IdsIssued),
    Kind.ABANDONED: (_ABANDONED, Abandoned),
    Kind.END: (_END, End),
}  # the kinds of one integer field


def _decode_payload(payload: bytes) -> Entry:
    """Raises ValueError / struct.error / UnicodeDecodeError for a payload that is not an
    entry of this version."""
    kind = payload[0]
    if kind == Kind.BATCH:
        fields = _BATCH.unpack_from(payload, 0)
        topic_end = _BATCH.size + fields[-1]
        if len(payload) != topic_end:
            raise ValueError("BATCH length mismatch")
        return Batch._make((*fields[1:-1], payload[_BATCH.size : topic_end].decode()))
    if kind == Kind.INTENT:
        fields = _INTENT.unpack_from(payload, 0)
        topic_end = _INTENT.size + fields[-2]
        if len(payload) != topic_end + fields[-1]:
            raise ValueError("INTENT length mismatch")
        topic = payload[_INTENT.size : topic_end].decode()
        return Intent._make((*fields[1:-2], topic, payload[topic_end:]))
    found = _FIXED.get(kind)
    if found is None:
        raise ValueError(f"unknown entry kind {kind}")
    layout, make = found
    if len(payload) != layout.size:
        raise ValueError(f"entry kind {kind}: {len(payload)} bytes, expected {layout.size}")
    return make(layout.unpack(payload)[1])


@dataclass(frozen=True, slots=True)
class Decoded:
    """What :func:`decode_entries` read.

    Attributes:
        entries: the valid entries, in order.
        end: where the valid entries end (a journal is cut back to it before appending).
        damage: None when the data ends cleanly or with a torn tail (a partial last
            entry, or zeros); otherwise what is wrong and where: entries after that point
            could not be read.
        torn_bytes: bytes after ``end`` when the tail was torn (0 for a clean end).
    """

    entries: list[Entry]
    end: int
    damage: str | None = None
    torn_bytes: int = 0


def decode_entries(data: bytes, start: int) -> Decoded:
    """Decode the entries of ``data`` from ``start`` (just after the file head)."""
    entries: list[Entry] = []
    pos, size = start, len(data)
    while size - pos >= ENTRY_HEAD.size:
        length, crc = ENTRY_HEAD.unpack_from(data, pos)
        body_end = pos + ENTRY_HEAD.size + length
        if length == 0 or body_end > size:
            break  # zeros or a partial entry, or damage: the tail decides below
        payload = data[pos + ENTRY_HEAD.size : body_end]
        if zlib.crc32(payload) != crc:
            if _is_tail(data[body_end:]):  # a torn last write: its pages reached the disk in part
                return Decoded(entries, pos, None, size - pos)
            return Decoded(entries, pos, f"entry at byte {pos}: CRC mismatch")
        try:
            entries.append(_decode_payload(payload))
        except (ValueError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
            return Decoded(entries, pos, f"entry at byte {pos}: {exc}")
        pos = body_end
    if not _is_tail(data[pos:]):
        return Decoded(entries, pos, f"unreadable bytes at byte {pos}")
    return Decoded(entries, pos, None, size - pos)


def _is_tail(tail: bytes) -> bool:
    """``tail`` is what a torn append leaves: nothing, zeros, or the beginning of one
    entry that runs past the end."""
    if len(tail) < ENTRY_HEAD.size or not tail.strip(b"\x00"):
        return True
    length, _crc = ENTRY_HEAD.unpack_from(tail, 0)
    return bool(length > 0 and ENTRY_HEAD.size + length > len(tail))


def decode_snapshot(data: bytes) -> tuple[int, list[Entry]]:
    """A snapshot file's generation and entries (without its END).

    Raises:
        JournalFormatError: not a snapshot, damaged, or without its END entry.
    """
    generation = decode_file_head(data, SNAPSHOT_MAGIC)
    decoded = decode_entries(data, FILE_HEAD.size)
    if decoded.damage is not None:
        raise JournalFormatError(decoded.damage)
    entries = decoded.entries
    ends = [i for i, entry in enumerate(entries) if isinstance(entry, End)]
    if not ends:
        raise JournalFormatError("the snapshot is incomplete (no END entry)")
    if ends[0] != len(entries) - 1 or decoded.end != len(data):
        raise JournalFormatError("bytes after the END entry")
    end = entries[-1]
    assert isinstance(end, End)
    if end.entries != len(entries) - 1:
        raise JournalFormatError(f"END counts {end.entries} entries, {len(entries) - 1} precede it")
    return generation, entries[:-1]
