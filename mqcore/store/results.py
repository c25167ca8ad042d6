"""What store operations return: statuses for expected outcomes (spec 7.1, 11)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

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
