"""The tier's key index: message key -> (queue offset, store time), per queue, in the tier
backend (spec 10 "tiered index"; our own format, documented here).

Each queue has a log of fixed-size entries spread over ``SegmentType.INDEX`` segments
(``SegmentId(topic, queue_id, INDEX, base)``, ``base`` = byte offset in the log; a segment
rolls before an append would take it past ``key_index_segment_bytes``; rolled segments are
sealed)::

    entry (24 bytes, big-endian, :data:`ENTRY`)
    ┌──────────────────┬──────────────────┬──────────────────┐
    │ key hash  u64    │ queue offset i64 │ store time  i64  │
    └──────────────────┴──────────────────┴──────────────────┘

``key hash`` is the first 8 bytes of BLAKE2b over the key's UTF-8 bytes. A message gets one
entry per key: its UNIQ_KEY, each KEYS entry, and its offsetMsgId (so ``view_by_id`` by
offsetMsgId reaches a message whose local segment is gone). The key text is not stored: a
lookup returns candidates and the caller re-checks the decoded message (hash collisions
and the offsetMsgId entries never leak into key queries).

Appends are in queue-offset order and one backend append per batch. Crash behaviour: a
partial tail (not a whole entry) is cut when the writer opens the queue's log; indexing
then resumes *at* the last entry's queue offset (that message may have lost some of its
keys), so a message can have duplicate entries, never missing ones. Lookups drop
duplicates. Thread-safety: one lock for the writer's state; lookups read the backend only.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from dataclasses import dataclass

from mqcore.tiered.backend import SegmentBackend, SegmentId, SegmentType

ENTRY = struct.Struct(">QQq")
ENTRY_SIZE = ENTRY.size


def key_hash(key: str) -> bytes:
    """8 bytes identifying ``key`` in the index (BLAKE2b-64 of its UTF-8 bytes)."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()


@dataclass(frozen=True, slots=True)
class KeyHit:
    """One candidate: a queue offset of ``topic``/``queue_id`` stored at ``store_timestamp``."""

    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int


@dataclass(slots=True)
class _Log:
    segments: list[tuple[int, int]]  # (base, size), ascending
    next_offset: int  # next queue offset to index; -1 = nothing indexed yet

    @property
    def end(self) -> int:
        return self.segments[-1][0] + self.segments[-1][1] if self.segments else 0


class KeyIndex:
    """Writer and reader of every queue's key log.

    Args:
        backend: where the segments live.
        segment_bytes: roll size (rounded down to whole entries).
        readonly: never cut partial tails (another process writes).
    """

    def __init__(self, backend: SegmentBackend, segment_bytes: int, *, readonly: bool = False):
        self.backend = backend
        self.segment_bytes = max(ENTRY_SIZE, segment_bytes - segment_bytes % ENTRY_SIZE)
        self.readonly = readonly
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], _Log] = {}

    def _id(self, topic: str, queue_id: int, base: int) -> SegmentId:
        return SegmentId(topic, queue_id, SegmentType.INDEX, base)

    def _open(self, topic: str, queue_id: int) -> _Log:
        log = self._logs.get((topic, queue_id))
        if log is not None:
            return log
        segments = []
        for base in self.backend.list_segments(topic, queue_id, SegmentType.INDEX):
            segment_id = self._id(topic, queue_id, base)
            size = self.backend.size(segment_id)
            if size % ENTRY_SIZE:
                size -= size % ENTRY_SIZE
                self.backend.truncate(segment_id, size)
            segments.append((base, size))
        next_offset = -1
        for base, size in reversed(segments):
            if size:
                raw = self.backend.read(
                    self._id(topic, queue_id, base), size - ENTRY_SIZE, ENTRY_SIZE
                )
                next_offset = ENTRY.unpack(raw)[1]  # re-index the last message (docstring)
                break
        log = _Log(segments, next_offset)
        self._logs[(topic, queue_id)] = log
        return log

    def next_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to index, or -1 when the queue has no entries."""
        with self._lock:
            return self._open(topic, queue_id).next_offset

    def add(
        self, topic: str, queue_id: int, entries: list[tuple[str, int, int]], next_offset: int
    ) -> None:
        """Append ``(key, queue_offset, store_timestamp)`` entries (queue-offset order) and
        note that everything below ``next_offset`` is indexed.

        Raises:
            TieredStoreError, OSError: the backend refused; nothing is noted as indexed.
        """
        data = b"".join(ENTRY.pack(int.from_bytes(key_hash(k)), o, t) for k, o, t in entries)
        with self._lock:
            log = self._open(topic, queue_id)
            view = memoryview(data)
            while view:
                if not log.segments or log.segments[-1][1] >= self.segment_bytes:
                    if log.segments:
                        self.backend.seal(self._id(topic, queue_id, log.segments[-1][0]))
                    base = log.end
                    self.backend.create(self._id(topic, queue_id, base))
                    log.segments.append((base, 0))
                base, size = log.segments[-1]
                chunk = view[: self.segment_bytes - size]
                self.backend.append(self._id(topic, queue_id, base), bytes(chunk), size)
                log.segments[-1] = (base, size + len(chunk))
                view = view[len(chunk) :]
            log.next_offset = next_offset

    def lookup(
        self,
        topic: str,
        queue_id: int,
        key: str,
        begin_ms: int,
        end_ms: int,
        min_offset: int = 0,
    ) -> list[KeyHit]:
        """Candidates for ``key`` stored in [begin_ms, end_ms] at queue offsets >=
        ``min_offset``, by queue offset, without duplicates. Reads the backend (so a reader
        in another process sees the writer's appends)."""
        wanted = key_hash(key)
        found: dict[int, int] = {}
        for base in self.backend.list_segments(topic, queue_id, SegmentType.INDEX):
            segment_id = self._id(topic, queue_id, base)
            data = self.backend.read(segment_id, 0, self.backend.size(segment_id))
            position = data.find(wanted)
            while position >= 0:
                if position % ENTRY_SIZE == 0 and position + ENTRY_SIZE <= len(data):
                    _, offset, stored = ENTRY.unpack_from(data, position)
                    if offset >= min_offset and begin_ms <= stored <= end_ms:
                        found[offset] = stored
                position = data.find(wanted, position + 1)
        return [KeyHit(topic, queue_id, o, t) for o, t in sorted(found.items())]

    def size_bytes(self, topic: str, queue_id: int) -> int:
        """Bytes of the queue's key log."""
        return sum(
            self.backend.size(self._id(topic, queue_id, base))
            for base in self.backend.list_segments(topic, queue_id, SegmentType.INDEX)
        )

    def delete_below(self, topic: str, queue_id: int, min_offset: int) -> list[SegmentId]:
        """Retention: delete the sealed segments whose entries all point below
        ``min_offset`` (oldest first, never the last). Returns the deleted segments."""
        gone: list[SegmentId] = []
        with self._lock:
            log = self._open(topic, queue_id)
            while len(log.segments) > 1:
                base, size = log.segments[0]
                segment_id = self._id(topic, queue_id, base)
                last = self.backend.read(segment_id, size - ENTRY_SIZE, ENTRY_SIZE)
                if size and ENTRY.unpack(last)[1] >= min_offset:
                    break
                self.backend.delete(segment_id)
                gone.append(segment_id)
                log.segments.pop(0)
        return gone

    def forget(self, topic: str, queue_id: int) -> None:
        """Drop the cached writer state (it is reloaded from the backend on next use)."""
        with self._lock:
            self._logs.pop((topic, queue_id), None)
