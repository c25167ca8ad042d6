"""The segment backend interface of tiered storage (spec 10, RocketMQ ``FileSegment``).

A backend stores *segments*: one object or file per ``(topic, queue_id, type, base_offset)``.
A segment is an append-only byte string:

=============  ==================================================================
operation      meaning
=============  ==================================================================
``create``     make an empty segment (raises if it exists)
``exists``     whether it exists
``size``       its length in bytes (raises if missing)
``read``       ``length`` bytes at ``position`` (short only at the end)
``append``     add bytes at ``position``, which must equal the current size
``seal``       mark it complete; later appends raise
``is_sealed``  whether it was sealed
``truncate``   cut it back to ``size`` bytes (crash reconciliation only; unseals)
``delete``     remove it (no error if missing)
``list``       base offsets of one queue's segments of one type, ascending
=============  ==================================================================

Invariants: ``append`` is the only way bytes enter a segment, and it checks the expected
position, so a writer that resumes after a crash with a stale idea of the size gets a
:class:`SegmentPositionError` instead of silently writing a duplicate or a gap. ``truncate``
exists because RocketMQ's object stores cannot be trusted to have the same length as the
upload progress after a crash (``FileSegment.commitAsync`` re-reads the size on failure); the
flat file cuts everything past its durable commit position (``flat_file.py``). An object-store
backend implements it by rewriting the object or re-uploading from the committed prefix.

Base offsets are byte offsets in the per-queue flat file (flat CommitLog or flat
ConsumeQueue), never queue offsets. Every backend method is thread-safe.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass

from mqcore.errors import StoreError


class SegmentType(enum.IntEnum):
    """RocketMQ ``FileSegmentType``: the code is also the directory name's source."""

    COMMIT_LOG = 0
    CONSUME_QUEUE = 1
    INDEX = 2


@dataclass(frozen=True, slots=True)
class SegmentId:
    """Which segment: a queue, a file type and the first flat-file byte offset it holds."""

    topic: str
    queue_id: int
    type: SegmentType
    base_offset: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id}/{self.type.name}/{self.base_offset:020d}"


class TieredStoreError(StoreError):
    """Tiered storage cannot do what was asked (root of this module's errors)."""


class SegmentMissingError(TieredStoreError):
    """The segment does not exist."""

    def __init__(self, segment: SegmentId) -> None:
        super().__init__(f"tiered segment {segment} does not exist")
        self.segment = segment


class SegmentExistsError(TieredStoreError):
    """``create`` found the segment already there."""

    def __init__(self, segment: SegmentId) -> None:
        super().__init__(f"tiered segment {segment} exists already")
        self.segment = segment


class SegmentSealedError(TieredStoreError):
    """An append to a sealed segment."""

    def __init__(self, segment: SegmentId) -> None:
        super().__init__(f"tiered segment {segment} is sealed; appends are refused")
        self.segment = segment


class SegmentPositionError(TieredStoreError):
    """An append at a position other than the segment's size: a previous write was partial,
    or the caller's committed position is stale (``expected`` is the caller's, ``actual`` the
    backend's)."""

    def __init__(self, segment: SegmentId, expected: int, actual: int) -> None:
        super().__init__(
            f"tiered segment {segment}: append at position {expected}, "
            f"but the segment holds {actual} bytes"
        )
        self.segment = segment
        self.expected = expected
        self.actual = actual


class SegmentBackend(abc.ABC):
    """Where segments live. Implementations must be thread-safe for every method."""

    @abc.abstractmethod
    def create(self, segment: SegmentId) -> None:
        """Create an empty segment.

        Raises:
            SegmentExistsError: it exists already.
        """

    @abc.abstractmethod
    def exists(self, segment: SegmentId) -> bool:
        """Whether the segment exists."""

    @abc.abstractmethod
    def size(self, segment: SegmentId) -> int:
        """The segment's length in bytes.

        Raises:
            SegmentMissingError: it does not exist.
        """

    @abc.abstractmethod
    def read(self, segment: SegmentId, position: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``position``; shorter only where the segment ends.

        Raises:
            SegmentMissingError: it does not exist.
            ValueError: a negative position or length.
        """

    @abc.abstractmethod
    def append(self, segment: SegmentId, data: bytes, position: int) -> int:
        """Append ``data`` durably, which must start at ``position`` == the current size.

        Returns:
            The new size.

        Raises:
            SegmentMissingError: it does not exist.
            SegmentSealedError: it was sealed.
            SegmentPositionError: ``position`` is not the current size; nothing is written.
        """

    @abc.abstractmethod
    def seal(self, segment: SegmentId) -> None:
        """Mark the segment complete (idempotent).

        Raises:
            SegmentMissingError: it does not exist.
        """

    @abc.abstractmethod
    def is_sealed(self, segment: SegmentId) -> bool:
        """Whether the segment was sealed.

        Raises:
            SegmentMissingError: it does not exist.
        """

    @abc.abstractmethod
    def truncate(self, segment: SegmentId, size: int) -> None:
        """Cut the segment to ``size`` bytes and unseal it (crash reconciliation).

        Raises:
            SegmentMissingError: it does not exist.
            ValueError: ``size`` is negative or larger than the segment.
        """

    @abc.abstractmethod
    def delete(self, segment: SegmentId) -> None:
        """Remove the segment; a missing one is not an error."""

    @abc.abstractmethod
    def list_segments(self, topic: str, queue_id: int, type: SegmentType) -> list[int]:
        """Base offsets of the queue's segments of ``type``, ascending."""


def check_range(position: int, length: int) -> None:
    """Shared argument check for ``read``.

    Raises:
        ValueError: a negative position or length.
    """
    if position < 0 or length < 0:
        raise ValueError(f"position and length must be >= 0, got {position}, {length}")


def check_truncate(segment: SegmentId, size: int, current: int) -> None:
    """Shared argument check for ``truncate``.

    Raises:
        ValueError: ``size`` is negative or larger than ``current``.
    """
    if not 0 <= size <= current:
        raise ValueError(f"cannot truncate {segment} of {current} bytes to {size}")
