"""What store operations return: statuses for expected outcomes (spec 7.1, 11)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, overload

from mqcore.message import MessageExt


class PutStatus(StrEnum):
    """RocketMQ's PutMessageStatus, the subset a single broker produces."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass(frozen=True, slots=True)
class PutResult:
    status: PutStatus
    topic: str = ""
    queue_id: int = 0
    msg_id: str = ""
    offset_msg_id: str = ""
    phys_offset: int = -1
    queue_offset: int = -1
    store_timestamp: int = 0
    wrote_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


@dataclass(frozen=True, slots=True)
class RefusedPut(PutResult):
    """A put the store refused (``SERVICE_NOT_AVAILABLE``), with the reason to show."""

    reason: str = ""


class _PutResultBuilder:
    """Same slots as :class:`PutResult`, assignable; filled, then its ``__class__`` set
    (identical layouts), giving an ordinary frozen PutResult. A frozen dataclass's
    ``__init__`` costs ~1.4 us for nine fields, a slot store ~20 ns."""

    __slots__ = PutResult.__slots__


assert (
    _PutResultBuilder.__slots__ == PutResult.__slots__ == tuple(f.name for f in fields(PutResult))
)


def new_put_result() -> Any:
    """An empty, assignable PutResult: set every field, then ``__class__ = PutResult``."""
    return _PutResultBuilder()


class BatchPutResults(Sequence[PutResult]):
    """The PutResults of one batch put, kept as columns (the plain-batch path).

    One put stores its messages contiguously with one status, topic, queue and store time;
    what differs per message is the UNIQ_KEY, the CommitLog position and the queue offset.
    Keeping those as lists costs the put one list append a message where a PutResult
    object cost ~10 attribute stores and a GC-tracked allocation; callers that only need
    the batch (the Kafka listener's produce: the first offset) read the columns, and
    indexing or iterating gives ordinary PutResults equal to what the general path returns.

    ``offset_msg_ids`` is worked out on first use for the whole batch: it is a function of
    the store host and the positions (RocketMQ's ``AppendMessageResult`` takes a supplier
    for it for the same reason).
    """

    __slots__ = (
        "status",
        "topic",
        "queue_id",
        "store_timestamp",
        "msg_ids",
        "phys_offsets",
        "queue_offsets",
        "end",
        "_offset_msg_ids",
        "_make_offset_msg_ids",
    )

    def __init__(
        self,
        status: PutStatus,
        topic: str,
        queue_id: int,
        store_timestamp: int,
        msg_ids: Sequence[str],
        phys_offsets: list[int],
        queue_offsets: Sequence[int],
        end: int,
        make_offset_msg_ids: Callable[[list[int]], list[str]],
    ) -> None:
        self.status = status
        self.topic = topic
        self.queue_id = queue_id
        self.store_timestamp = store_timestamp
        self.msg_ids = msg_ids  #: UNIQ_KEY per message
        self.phys_offsets = phys_offsets  #: CommitLog position per message
        self.queue_offsets = queue_offsets  #: queue offset per message
        self.end = end  #: CommitLog position after the last record
        self._offset_msg_ids: list[str] | None = None
        self._make_offset_msg_ids = make_offset_msg_ids

    @property
    def offset_msg_ids(self) -> list[str]:
        """offsetMsgId per message (made for the whole batch on first use)."""
        ids = self._offset_msg_ids
        if ids is None:
            ids = self._offset_msg_ids = self._make_offset_msg_ids(self.phys_offsets)
        return ids

    def offset_msg_id_at(self, i: int) -> str:
        """The offsetMsgId of message ``i`` alone (the batch's are not made for it)."""
        ids = self._offset_msg_ids
        if ids is not None:
            return ids[i]
        return self._make_offset_msg_ids([self.phys_offsets[i]])[0]

    @property
    def wrote_bytes(self) -> int:
        """Bytes the batch's records took in the CommitLog."""
        return self.end - self.phys_offsets[0] if self.phys_offsets else 0

    def __len__(self) -> int:
        return len(self.msg_ids)

    def _result(self, i: int, offset_msg_id: str) -> PutResult:
        phys = self.phys_offsets
        following = phys[i + 1] if i + 1 < len(phys) else self.end
        return PutResult(
            self.status,
            self.topic,
            self.queue_id,
            self.msg_ids[i],
            offset_msg_id,
            phys[i],
            self.queue_offsets[i],
            self.store_timestamp,
            following - phys[i],
        )

    def to_list(self) -> list[PutResult]:
        """Every result as a PutResult object (what ``MessageStore.put_messages`` returns)."""
        status, topic, queue_id = self.status, self.topic, self.queue_id
        store_timestamp = self.store_timestamp
        phys = self.phys_offsets
        ends = phys[1:]
        ends.append(self.end)
        builder = _PutResultBuilder
        results: list[Any] = []
        append = results.append
        r: Any
        for msg_id, offset_msg_id, start, end, queue_offset in zip(
            self.msg_ids, self.offset_msg_ids, phys, ends, self.queue_offsets, strict=True
        ):
            # PutResult(...) field by field (``_PutResultBuilder`` says why).
            r = builder()
            r.status = status
            r.topic = topic
            r.queue_id = queue_id
            r.msg_id = msg_id
            r.offset_msg_id = offset_msg_id
            r.phys_offset = start
            r.queue_offset = queue_offset
            r.store_timestamp = store_timestamp
            r.wrote_bytes = end - start
            r.__class__ = PutResult
            append(r)
        return results

    @overload
    def __getitem__(self, index: int) -> PutResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[PutResult]: ...
    def __getitem__(self, index: int | slice) -> PutResult | list[PutResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self.msg_ids)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("put result index out of range")
        return self._result(index, self.offset_msg_ids[index])

    def __iter__(self) -> Iterator[PutResult]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return f"BatchPutResults({list(self)!r})"

    def with_status(self, status: PutStatus) -> BatchPutResults:
        """The same results with another status (a sync flush that timed out)."""
        copy = BatchPutResults(
            status,
            self.topic,
            self.queue_id,
            self.store_timestamp,
            self.msg_ids,
            self.phys_offsets,
            self.queue_offsets,
            self.end,
            self._make_offset_msg_ids,
        )
        copy._offset_msg_ids = self._offset_msg_ids
        return copy


class GetStatus(StrEnum):
    """RocketMQ's GetMessageStatus (spec 7.1)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True, slots=True)
class GetResult:
    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    #: Which store served the read: ``local`` or ``tier`` (``mqcore.tiered.tiered_store``).
    source: str = "local"
