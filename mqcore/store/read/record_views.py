"""Records as raw bytes with the few fields a fetch needs: ``MessageStore.get_records``.

A pull returns ``MessageExt`` objects: every field decoded, the body, topic and properties
copied out, the properties parsed into a dict. A reader that re-encodes records in another
format (the Kafka fetch) needs the queue offset, the store time, the body, keys and
properties, and many fetches never look at most of them (a consumer that only counts). A
:class:`RecordView` holds the whole record as one ``bytes`` copy plus the fields the
ConsumeQueue already gave (queue and physical offset) and the store timestamp; the rest is
decoded on first use, and :meth:`RecordView.message` gives the full ``MessageExt``.

Views are plain values: safe to keep and pass between threads (no view of a mapping).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mqcore.format.layout import INT32, INT64, SYSFLAG_POSITION, store_timestamp_position
from mqcore.format.message_decode import decode_message
from mqcore.message import MessageExt
from mqcore.store.results import GetStatus


class RecordView:
    """One CommitLog record: ``raw`` (TOTALSIZE..PROPERTIES, exactly ``store_size`` bytes)
    and its offsets; other fields decoded lazily from ``raw``."""

    __slots__ = ("raw", "phys_offset", "queue_offset", "_message")

    def __init__(self, raw: bytes, phys_offset: int, queue_offset: int) -> None:
        self.raw = raw
        self.phys_offset = phys_offset
        self.queue_offset = queue_offset
        self._message: MessageExt | None = None

    @property
    def store_size(self) -> int:
        return len(self.raw)

    @property
    def sys_flag(self) -> int:
        return int(INT32.unpack_from(self.raw, SYSFLAG_POSITION)[0])

    @property
    def store_timestamp(self) -> int:
        position = store_timestamp_position(self.sys_flag)
        return int(INT64.unpack_from(self.raw, position)[0])

    def message(self) -> MessageExt:
        """The whole record decoded (as ``get_messages`` returns it), once.

        Raises:
            CorruptRecordError: ``raw`` is not one well-framed record.
        """
        message = self._message
        if message is None:
            message = self._message = decode_message(self.raw, 0, len(self.raw))
        return message

    @property
    def topic(self) -> str:
        return self.message().topic

    @property
    def body(self) -> bytes:
        return self.message().body

    @property
    def born_timestamp(self) -> int:
        return self.message().born_timestamp

    @property
    def properties(self) -> dict[str, str]:
        return self.message().properties

    @property
    def keys(self) -> tuple[str, ...]:
        return self.message().keys

    @property
    def tags(self) -> str | None:
        return self.message().tags

    def __repr__(self) -> str:
        return (
            f"RecordView(phys_offset={self.phys_offset}, queue_offset={self.queue_offset}, "
            f"store_size={self.store_size})"
        )


@dataclass(frozen=True, slots=True)
class RecordsResult:
    """``GetResult`` with views instead of messages (the same statuses and offsets)."""

    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: list[RecordView] = field(default_factory=list)
