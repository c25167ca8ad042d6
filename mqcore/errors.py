"""Cairn's exceptions: one root, translated at exactly one boundary per layer.

::

    MQError
    ├── StoreError
    │   ├── CorruptRecordError      a CommitLog record fails its checks (file, position, detail)
    │   ├── CorruptIndexError       a derived file (ConsumeQueue, IndexFile) is unreadable
    │   ├── SegmentFullError        a mapped file has no room for the bytes asked
    │   ├── StoreClosedError        the store is not open
    │   ├── StoreLockedError        another process holds <root>/lock
    │   └── StoreNotWritableError   writes refused (disk full, read-only open, fenced)
    │       └── DiskFullError       no disk blocks could be reserved (ENOSPC, EDQUOT)
    ├── ValidationError             bad input, naming the field and the rule broken
    │   ├── MessageIllegalError     message too large, bad properties, bad topic in a record
    │   └── NotFoundError           an unknown topic, group, queue or message
    ├── ConflictError               the thing exists already, or changed under the caller
    ├── PermissionDeniedError       perm bits forbid the operation
    └── ProtocolError               a wire protocol was broken (``error_code`` per protocol)
        ├── LocalProtocolError      we were asked to send something invalid
        └── RemoteProtocolError     the peer sent something invalid

Expected outcomes (no message yet, offset out of range) are statuses on results, not
exceptions. Corruption and misuse raise.
"""

from __future__ import annotations


class MQError(Exception):
    """Root of every error Cairn raises on purpose."""


class StoreError(MQError):
    """The store cannot do what was asked."""


class CorruptRecordError(StoreError):
    """A CommitLog record fails its checks."""

    def __init__(self, file: str, position: int, detail: str) -> None:
        super().__init__(f"{file}@{position}: {detail}")
        self.file = file
        self.position = position
        self.detail = detail


class CorruptIndexError(StoreError):
    """A derived file cannot be read; it is rebuilt from the CommitLog, never trusted."""


class SegmentFullError(StoreError):
    """A mapped file has no room for the bytes asked."""


class StoreClosedError(StoreError):
    """The store is not open."""


class StoreLockedError(StoreError):
    """Another process holds the store's single-writer lock."""


class StoreNotWritableError(StoreError):
    """Writes are refused for now (disk over the warning ratio, read-only open)."""


class DiskFullError(StoreNotWritableError):
    """The file system has no room for the blocks a write needs (``ENOSPC``, ``EDQUOT``).

    Raised *before* anything is written: the write did not happen and may be retried once
    space is freed. Its message starts with ``disk full:``.
    """


class ValidationError(MQError):
    """Bad input. ``field`` names what was wrong and ``rule`` the rule it broke."""

    def __init__(self, field: str, rule: str, message: str | None = None) -> None:
        super().__init__(message or f"{field}: {rule}")
        self.field = field
        self.rule = rule


class MessageIllegalError(ValidationError):
    """A message cannot be stored as it is (RocketMQ's MESSAGE_ILLEGAL)."""


class NotFoundError(ValidationError):
    """An unknown topic, group, queue or message."""


class ConflictError(MQError):
    """The thing exists already, or changed under the caller."""


class PermissionDeniedError(MQError):
    """Perm bits (or a role) forbid the operation."""


class ProtocolError(MQError):
    """A wire protocol was broken; ``error_code`` is the protocol's own code."""

    def __init__(self, message: str, error_code: int = -1) -> None:
        super().__init__(message)
        self.error_code = error_code


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol does not allow."""
