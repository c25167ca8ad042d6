"""Decoding records straight from the CommitLog's mappings, one segment hold per run.

``CommitLog.read`` finds the segment, takes and drops a reference and copies the record,
for every record: on a pull of 32 consecutive messages that is 32 finds, 64 lock round
trips and 32 copies before any decoding. A :class:`RecordReader` holds the segment of the
last record it read and decodes the next one from the same mapping when it lies there (the
usual case: a queue's records are close together in the log), switching segments only
when a record lies elsewhere. ``decode_message`` copies the body, topic and properties it
returns, so no view of the mapping outlives the hold (``MappedFile.buffer``'s rule).

A reader given the queue its units come from checks each record's header against the unit
(TOTALSIZE equal to the unit's size, the queue's topic and queue id; with ``check_crc`` the
body CRC too) and raises :class:`CorruptRecordError` for a record that fails: the caller
skips it and lets ``CommitLog.quarantine_unreadable`` decide whether the log is damaged.
"""

from __future__ import annotations

import struct
from types import TracebackType
from typing import TYPE_CHECKING

from mqcore.errors import CorruptRecordError
from mqcore.format.body_crc import body_crc
from mqcore.format.layout import (
    HEADER_SIZES,
    INT32,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    QUEUE_ID_POSITION,
    SIZE_MAGIC,
    SYSFLAG_POSITION,
    TOPIC_LENGTH_V1,
    TOPIC_LENGTH_V2,
)
from mqcore.format.message_decode import decode_message
from mqcore.message import MessageExt
from mqcore.store.files.mapped_file import MappedFile

if TYPE_CHECKING:
    from mqcore.store.commit_log import CommitLog


_MAGICS = (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)
_V1_HEADER = HEADER_SIZES[0]  # V1, IPv4 hosts: BODYLENGTH ends the header
#: QUEUEID and BODYLENGTH of a V1 record with IPv4 hosts, in one unpack (the raw read's
#: queue check); the pad widths come from the layout's positions.
_QUEUE_ID_AND_BODY_LENGTH_V1 = struct.Struct(
    f">{QUEUE_ID_POSITION}xi{_V1_HEADER - INT32.size - QUEUE_ID_POSITION - INT32.size}xi"
)


class RecordReader:
    """Reads whole records by ``(phys_offset, size)``; use as a context manager (it holds a
    segment until closed). Not thread-safe: one per read call.

    Args:
        commit_log: the log to read.
        queue: ``(topic, queue_id)`` whose units give the offsets: each record is checked
            to belong there (module docstring). None: no header check beyond the framing.
        check_crc: also check each decoded message's body CRC (:meth:`message` only).
    """

    __slots__ = (
        "_commit_log",
        "_segment",
        "_base",
        "_end",
        "_queue",
        "_topic",
        "_topic_field",
        "_check_crc",
    )

    def __init__(
        self,
        commit_log: CommitLog,
        *,
        queue: tuple[str, int] | None = None,
        check_crc: bool = False,
    ) -> None:
        self._commit_log = commit_log
        self._segment: MappedFile | None = None
        self._base = 0
        self._end = 0  # the held segment's wrote_position when it was taken (a lower bound)
        self._queue = queue
        self._topic = queue[0].encode("utf-8", "surrogatepass") if queue is not None else b""
        # The V1 topic field (length byte, topic) and QUEUEID as a record holds them.
        self._topic_field = bytes([len(self._topic) & 0xFF]) + self._topic
        self._check_crc = check_crc

    def message(self, phys_offset: int, size: int) -> MessageExt | None:
        """The record at ``phys_offset`` as a MessageExt, or None if those bytes are not
        readable (file deleted, beyond the written end): ``CommitLog.read``'s contract.

        Raises:
            CorruptRecordError: the bytes there are not one whole record of at most ``size``
                (exactly ``size``, of the reader's queue, with a matching CRC, as asked).
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
        message = decode_message(segment.buffer, pos, pos + size)
        queue = self._queue
        if queue is not None and (
            message.store_size != size or message.queue_id != queue[1] or message.topic != queue[0]
        ):
            raise CorruptRecordError(
                str(segment.path),
                pos,
                f"a {message.store_size}-byte record of {message.topic}-{message.queue_id} "
                f"where {queue[0]}-{queue[1]}'s unit says {size} bytes",
            )
        if self._check_crc and body_crc(message.body) != message.body_crc:
            raise CorruptRecordError(
                str(segment.path),
                pos,
                f"body CRC mismatch: stored {message.body_crc}, computed {body_crc(message.body)}",
            )
        return message

    def raw(self, phys_offset: int, size: int) -> bytes | None:
        """A copy of the record at ``phys_offset`` (``size`` bytes), or None as :meth:`message`.

        Raises:
            CorruptRecordError: the bytes there do not start a record of exactly ``size``
                bytes (the ConsumeQueue unit and the CommitLog disagree), or one of another
                queue than the reader's.
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
        queue = self._queue
        if queue is None:
            return raw
        # The usual record (V1, IPv4 hosts): QUEUEID, and the topic field compared as bytes
        # where that layout puts it. Any other record fails to match here and gets the
        # full check below (an IPv6 host only moves BODYLENGTH).
        if magic == MESSAGE_MAGIC_CODE_V1:
            queue_id, body_length = _QUEUE_ID_AND_BODY_LENGTH_V1.unpack_from(raw)
            at = _V1_HEADER + body_length
            topic_field = self._topic_field
            if queue_id == queue[1] and at >= _V1_HEADER:
                if raw[at : at + len(topic_field)] == topic_field:
                    return raw
        if not _belongs(raw, magic, self._topic, queue[1]):
            raise CorruptRecordError(
                str(segment.path), pos, f"the record is not one of {queue[0]}-{queue[1]}"
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


def _belongs(raw: bytes, magic: int, topic: bytes, queue_id: int) -> bool:
    """Whether the framed record ``raw`` has this QUEUEID and TOPIC."""
    if INT32.unpack_from(raw, QUEUE_ID_POSITION)[0] != queue_id or len(raw) < SYSFLAG_POSITION + 4:
        return False
    header = HEADER_SIZES[(raw[SYSFLAG_POSITION + 3] >> 4) & 3]
    if len(raw) < header:
        return False
    at = header + INT32.unpack_from(raw, header - INT32.size)[0]
    width = (TOPIC_LENGTH_V1 if magic == MESSAGE_MAGIC_CODE_V1 else TOPIC_LENGTH_V2).size
    if at < header or at + width > len(raw):
        return False
    length = int.from_bytes(raw[at : at + width], "big")
    return length == len(topic) and raw[at + width : at + width + length] == topic
