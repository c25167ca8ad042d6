"""Error code table and the mqcore → Kafka mapping."""

from __future__ import annotations

from kafka_listener.errors import ErrorCode, error_code_for
from mqcore.errors import (
    ConflictError,
    CorruptRecordError,
    MessageIllegalError,
    MQError,
    NotFoundError,
    RemoteProtocolError,
    StoreClosedError,
    ValidationError,
)

# kafka-protocol.md section 2.2, copied by hand.
SPEC_CODES = {
    "UNKNOWN_SERVER_ERROR": -1,
    "NONE": 0,
    "OFFSET_OUT_OF_RANGE": 1,
    "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3,
    "LEADER_NOT_AVAILABLE": 5,
    "NOT_LEADER_OR_FOLLOWER": 6,
    "REQUEST_TIMED_OUT": 7,
    "MESSAGE_TOO_LARGE": 10,
    "OFFSET_METADATA_TOO_LARGE": 12,
    "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15,
    "NOT_COORDINATOR": 16,
    "INVALID_TOPIC_EXCEPTION": 17,
    "INVALID_REQUIRED_ACKS": 21,
    "ILLEGAL_GENERATION": 22,
    "INCONSISTENT_GROUP_PROTOCOL": 23,
    "INVALID_GROUP_ID": 24,
    "UNKNOWN_MEMBER_ID": 25,
    "INVALID_SESSION_TIMEOUT": 26,
    "REBALANCE_IN_PROGRESS": 27,
    "UNSUPPORTED_SASL_MECHANISM": 33,
    "ILLEGAL_SASL_STATE": 34,
    "UNSUPPORTED_VERSION": 35,
    "TOPIC_ALREADY_EXISTS": 36,
    "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38,
    "INVALID_CONFIG": 40,
    "INVALID_REQUEST": 42,
    "UNSUPPORTED_FOR_MESSAGE_FORMAT": 43,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
    "DUPLICATE_SEQUENCE_NUMBER": 46,
    "INVALID_PRODUCER_EPOCH": 47,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53,
    "SASL_AUTHENTICATION_FAILED": 58,
    "UNKNOWN_PRODUCER_ID": 59,
    "NON_EMPTY_GROUP": 68,
    "GROUP_ID_NOT_FOUND": 69,
    "UNSUPPORTED_COMPRESSION_TYPE": 76,
    "MEMBER_ID_REQUIRED": 79,
    "FENCED_INSTANCE_ID": 82,
    "INVALID_RECORD": 87,
}


def test_spec_codes() -> None:
    for name, code in SPEC_CODES.items():
        assert ErrorCode[name] == code
    assert len({int(c) for c in ErrorCode}) == len(ErrorCode)  # no aliases


def test_for_code_and_retriable() -> None:
    assert ErrorCode.for_code(16) is ErrorCode.NOT_COORDINATOR
    assert ErrorCode.for_code(12345) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode.NOT_COORDINATOR.retriable
    assert not ErrorCode.TOPIC_ALREADY_EXISTS.retriable


def test_error_code_for() -> None:
    assert error_code_for(RemoteProtocolError("x", 87)) is ErrorCode.INVALID_RECORD
    assert error_code_for(CorruptRecordError("f", 0, "d")) is ErrorCode.KAFKA_STORAGE_ERROR
    assert error_code_for(StoreClosedError()) is ErrorCode.KAFKA_STORAGE_ERROR
    assert error_code_for(MessageIllegalError("body", "too big")) is ErrorCode.INVALID_RECORD
    assert error_code_for(NotFoundError("topic", "unknown")) is (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert error_code_for(ValidationError("a", "b")) is ErrorCode.INVALID_REQUEST
    assert error_code_for(ConflictError()) is ErrorCode.TOPIC_ALREADY_EXISTS
    assert error_code_for(MQError()) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert error_code_for(KeyError()) is ErrorCode.UNKNOWN_SERVER_ERROR
    overrides: dict[type[BaseException], ErrorCode] = {NotFoundError: ErrorCode.GROUP_ID_NOT_FOUND}
    assert error_code_for(NotFoundError("g", "x"), overrides) is ErrorCode.GROUP_ID_NOT_FOUND
