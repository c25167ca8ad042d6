"""Kafka error codes, and the one table that maps Cairn's exceptions onto them.

Kafka puts an ``int16`` error code in every response (per partition, per topic or at the
top level). The numbers never change once Kafka assigns them, so the table below is a
plain ``IntEnum``; it holds every code the spec (``kafka-protocol.md`` section 2.2) uses
plus the neighbouring ones a client may send back or a handler may want (-1 … 90, as in
Kafka's ``org.apache.kafka.common.protocol.Errors``).

Translation happens at exactly one boundary (STYLE.md section 5): handlers catch
``mqcore`` exceptions and call :func:`error_code_for` instead of inventing codes inline.
A :class:`~mqcore.errors.ProtocolError` carries its own ``error_code`` (for example the
record-batch decoder raises ``RemoteProtocolError(..., CORRUPT_MESSAGE)``), which wins.
"""

from __future__ import annotations

from enum import IntEnum

from mqcore.errors import (
    ConflictError,
    CorruptIndexError,
    CorruptRecordError,
    MessageIllegalError,
    MQError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    StoreError,
    ValidationError,
)


class ErrorCode(IntEnum):
    """Kafka's error codes (name → ``int16`` code on the wire)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90

    @classmethod
    def for_code(cls, code: int) -> ErrorCode:
        """Return the member for ``code``; codes this table does not know map to
        ``UNKNOWN_SERVER_ERROR`` (what Kafka's ``Errors.forCode`` does)."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR

    @property
    def retriable(self) -> bool:
        """True when clients retry this error by themselves (Kafka's ``RetriableException``)."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    }
)

# mqcore exception class → Kafka code, most specific first. ``error_code_for`` walks the
# exception's MRO, so a subclass not listed here inherits its parent's code. Handlers that
# need a per-API meaning (ConflictError is TOPIC_ALREADY_EXISTS in CreateTopics) pass
# their own ``overrides``.
MQERROR_TO_KAFKA: dict[type[BaseException], ErrorCode] = {
    CorruptRecordError: ErrorCode.KAFKA_STORAGE_ERROR,
    CorruptIndexError: ErrorCode.KAFKA_STORAGE_ERROR,
    StoreError: ErrorCode.KAFKA_STORAGE_ERROR,
    MessageIllegalError: ErrorCode.INVALID_RECORD,
    NotFoundError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ValidationError: ErrorCode.INVALID_REQUEST,
    ConflictError: ErrorCode.TOPIC_ALREADY_EXISTS,
    PermissionDeniedError: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    MQError: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def error_code_for(
    exc: BaseException,
    overrides: dict[type[BaseException], ErrorCode] | None = None,
) -> ErrorCode:
    """Map an exception onto the Kafka error code a response should carry.

    Args:
        exc: the exception a handler caught.
        overrides: per-API entries consulted before :data:`MQERROR_TO_KAFKA`.

    Returns:
        The ``error_code`` of a :class:`ProtocolError`; otherwise the entry of the first
        class in ``type(exc).__mro__`` found in ``overrides`` or the table; otherwise
        ``UNKNOWN_SERVER_ERROR``.
    """
    mro = type(exc).__mro__
    if overrides:
        for cls in mro:
            if cls in overrides:
                return overrides[cls]
    if isinstance(exc, ProtocolError):
        return ErrorCode.for_code(exc.error_code)
    for cls in mro:
        found = MQERROR_TO_KAFKA.get(cls)
        if found is not None:
            return found
    return ErrorCode.UNKNOWN_SERVER_ERROR
