"""In-memory segment backend (RocketMQ ``MemoryFileSegment``), for tests and benchmarks.

Segments are ``bytearray`` values in a dict under one lock; nothing survives the process.
Tests "crash" a writer by dropping it and reopening over the same backend object.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from mqcore.tiered.backend import (
    SegmentBackend,
    SegmentExistsError,
    SegmentId,
    SegmentMissingError,
    SegmentPositionError,
    SegmentSealedError,
    SegmentType,
    check_range,
    check_truncate,
)


@dataclass(slots=True)
class _Segment:
    data: bytearray = field(default_factory=bytearray)
    sealed: bool = False


class MemoryBackend(SegmentBackend):
    """Segments in a dict. Thread-safe: every method holds one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._segments: dict[SegmentId, _Segment] = {}

    def _get_locked(self, segment: SegmentId) -> _Segment:
        try:
            return self._segments[segment]
        except KeyError:
            raise SegmentMissingError(segment) from None

    def create(self, segment: SegmentId) -> None:
        with self._lock:
            if segment in self._segments:
                raise SegmentExistsError(segment)
            self._segments[segment] = _Segment()

    def exists(self, segment: SegmentId) -> bool:
        with self._lock:
            return segment in self._segments

    def size(self, segment: SegmentId) -> int:
        with self._lock:
            return len(self._get_locked(segment).data)

    def read(self, segment: SegmentId, position: int, length: int) -> bytes:
        check_range(position, length)
        with self._lock:
            return bytes(self._get_locked(segment).data[position : position + length])

    def append(self, segment: SegmentId, data: bytes, position: int) -> int:
        with self._lock:
            seg = self._get_locked(segment)
            if seg.sealed:
                raise SegmentSealedError(segment)
            if position != len(seg.data):
                raise SegmentPositionError(segment, position, len(seg.data))
            seg.data += data
            return len(seg.data)

    def seal(self, segment: SegmentId) -> None:
        with self._lock:
            self._get_locked(segment).sealed = True

    def is_sealed(self, segment: SegmentId) -> bool:
        with self._lock:
            return self._get_locked(segment).sealed

    def truncate(self, segment: SegmentId, size: int) -> None:
        with self._lock:
            seg = self._get_locked(segment)
            check_truncate(segment, size, len(seg.data))
            del seg.data[size:]
            seg.sealed = False

    def delete(self, segment: SegmentId) -> None:
        with self._lock:
            self._segments.pop(segment, None)

    def list_segments(self, topic: str, queue_id: int, type: SegmentType) -> list[int]:
        with self._lock:
            return sorted(
                s.base_offset
                for s in self._segments
                if s.topic == topic and s.queue_id == queue_id and s.type == type
            )
