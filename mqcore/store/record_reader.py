"""Decoding records straight from the CommitLog's mappings, one segment hold per run.

``CommitLog.read`` finds the segment, takes and drops a reference and copies the record,
for every record: on a pull of 32 consecutive messages that is 32 finds, 64 lock round
trips and 32 copies before any decoding. A :class:`RecordReader` holds the segment of the
last record it read and decodes the next one from the same mapping when it lies there (the
usual case: a queue's records are close together in the log), switching segments only
when a record lies elsewhere. ``decode_message`` copies the body, topic and properties it
returns, so no view of the mapping outlives the hold (``MappedFile.buffer``'s rule).
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from mqcore.errors import CorruptRecordError
from mqcore.message import MessageExt
from mqcore.store.mapped_file import MappedFile
from mqcore.store.message_decode import decode_message
from mqcore.store.record_layout import MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2, SIZE_MAGIC

if TYPE_CHECKING:
    from mqcore.store.commit_log import CommitLog


_MAGICS = (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)


class RecordReader:
    """Reads whole records by ``(phys_offset, size)``; use as a context manager (it holds a
    segment until closed). Not thread-safe: one per read call."""

    __slots__ = ("_commit_log", "_segment", "_base", "_end")

    def __init__(self, commit_log: CommitLog) -> None:
        self._commit_log = commit_log
        self._segment: MappedFile | None = None
        self._base = 0
        self._end = 0  # the held segment's wrote_position when it was taken (a lower bound)

    def message(self, phys_offset: int, size: int) -> MessageExt | None:
        """The record at ``phys_offset`` as a MessageExt, or None if those bytes are not
        readable (file deleted, beyond the written end): ``CommitLog.read``'s contract.

        Raises:
            CorruptRecordError: the bytes there are not one whole record of at most ``size``.
        """
        pos = phys_offset - self._base
        if self._segment is None or pos < 0 or pos + size > self._end:
            if not self._take(phys_offset):
                return None
            pos = phys_offset - self._base
            if pos < 0 or pos + size > self._end:
                return None
        segment = self._segment
        assert segment is not None
        return decode_message(segment.buffer, pos, pos + size)

    def raw(self, phys_offset: int, size: int) -> bytes | None:
        """A copy of the record at ``phys_offset`` (``size`` bytes), or None as :meth:`message`.

        Raises:
            CorruptRecordError: the bytes there do not start a record of exactly ``size``
                bytes (the ConsumeQueue unit and the CommitLog disagree).
        """
        pos = phys_offset - self._base
        if self._segment is None or pos < 0 or pos + size > self._end:
            if not self._take(phys_offset):
                return None
            pos = phys_offset - self._base
            if pos < 0 or pos + size > self._end:
                return None
        segment = self._segment
        assert segment is not None
        raw = segment.buffer[pos : pos + size]
        total, magic = SIZE_MAGIC.unpack_from(raw) if size >= SIZE_MAGIC.size else (0, 0)
        if total != size or magic not in _MAGICS:
            raise CorruptRecordError(
                str(segment.path), pos, f"no {size}-byte record here (TOTALSIZE {total})"
            )
        return raw

    def _take(self, phys_offset: int) -> bool:
        """Hold the segment holding ``phys_offset`` (re-taking the same one refreshes its
        written end)."""
        self.close()
        segment = self._commit_log.segments.find(phys_offset)
        if segment is None or not segment.hold():
            return False
        self._segment = segment
        self._base = segment.base_offset
        self._end = segment.wrote_position
        return True

    def close(self) -> None:
        segment, self._segment = self._segment, None
        if segment is not None:
            segment.release()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
