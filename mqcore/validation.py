"""Input checks a message must pass before it is stored (spec 8.7, 11, 1.6).

Each check raises with the field that is wrong, a short machine-readable ``rule`` and a
sentence a person can act on, e.g. ``topic: must be at most 127 characters (got 130)``.
Front ends map ``rule`` to their own codes (RocketMQ: INVALID_PARAMETER for names,
MESSAGE_ILLEGAL for bodies and properties)::

    check                       rules                               raises
    validate_topic              blank, characters, max_length       ValidationError
    validate_group              blank, characters, max_length       ValidationError
    validate_body               empty, max_size                     MessageIllegalError
    validate_properties_size    max_size                            MessageIllegalError

Names are ASCII ``[%|a-zA-Z0-9_-]`` only. Topics may have 127 characters, or 255 when they
start with ``%RETRY%`` or ``%DLQ%`` (their names embed a group name); groups 120.
``NOT_ALLOWED_SEND_TOPICS`` lists the system topics producers may not send to (RocketMQ
answers NO_PERMISSION); checking membership is left to the caller, which knows whether the
sender is a producer or the broker itself.
"""

from __future__ import annotations

import re

from mqcore.errors import MessageIllegalError, ValidationError

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MAX_GROUP_LENGTH",
    "MAX_PROPERTIES_BYTES",
    "MAX_SYSTEM_TOPIC_LENGTH",
    "MAX_TOPIC_LENGTH",
    "NOT_ALLOWED_SEND_TOPICS",
    "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
    "validate_body",
    "validate_group",
    "validate_properties_size",
    "validate_topic",
]

# Nothing from mqcore.store is imported at load time: the store package imports this module,
# so an import back would be circular.
MAX_PROPERTIES_BYTES = 32767  # == mqcore.format.properties.MAX_PROPERTIES_BYTES (tests check)
MAX_TOPIC_LENGTH = 127
MAX_SYSTEM_TOPIC_LENGTH = 255  # %RETRY%{group} and %DLQ%{group}
MAX_GROUP_LENGTH = 120
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # maxMessageSize: the largest body, 4 MiB
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

NOT_ALLOWED_SEND_TOPICS: frozenset[str] = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
"""System topics a producer may not send to (``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``)."""

# fullmatch, not match + "$": "$" also matches before a trailing newline.
_NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
_ALLOWED_TEXT = "letters a-z A-Z, digits, '%', '|', '_' and '-'"


def _validate_name(name: str, field: str, kind: str, max_length: int) -> None:
    if not name or name.isspace():
        raise ValidationError(field, "blank", f"{field}: a {kind} name must not be blank")
    if not _NAME_PATTERN.fullmatch(name):
        bad = next(ch for ch in name if not _NAME_PATTERN.fullmatch(ch))
        raise ValidationError(
            field,
            "characters",
            f"{field}: may only contain {_ALLOWED_TEXT} (found {bad!r} in {name!r})",
        )
    if len(name) > max_length:
        raise ValidationError(
            field,
            "max_length",
            f"{field}: must be at most {max_length} characters (got {len(name)})",
        )


def validate_topic(name: str, field: str = "topic") -> None:
    """Check a topic name (``TopicValidator.validateTopic``).

    Args:
        name: the topic.
        field: how errors name the input (e.g. ``"retry_topic"``).

    Raises:
        ValidationError: rule ``blank``, ``characters`` or ``max_length`` (127, or 255 for a
            ``%RETRY%``/``%DLQ%`` topic).
    """
    limit = MAX_TOPIC_LENGTH
    if name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        limit = MAX_SYSTEM_TOPIC_LENGTH
    _validate_name(name, field, "topic", limit)


def validate_group(name: str, field: str = "group") -> None:
    """Check a consumer or producer group name.

    Raises:
        ValidationError: rule ``blank``, ``characters`` or ``max_length`` (120).
    """
    _validate_name(name, field, "group", MAX_GROUP_LENGTH)


def validate_body(
    body: bytes | bytearray | memoryview | None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> None:
    """Check a message body (before compression) against ``maxMessageSize``.

    Raises:
        MessageIllegalError: field ``body``, rule ``empty`` (None or zero bytes) or
            ``max_size`` (longer than ``max_message_size``).
    """
    if body is None or len(body) == 0:
        raise MessageIllegalError("body", "empty", "body: a message body must not be empty")
    if len(body) > max_message_size:
        raise MessageIllegalError(
            "body",
            "max_size",
            f"body: must be at most {max_message_size} bytes (got {len(body)})",
        )


def validate_properties_size(encoded: bytes | bytearray | memoryview) -> None:
    """Check encoded properties fit the record's 16-bit length (PROPERTIES_SIZE_EXCEEDED).

    Raises:
        MessageIllegalError: field ``properties``, rule ``max_size`` (over 32767 bytes).
    """
    if len(encoded) > MAX_PROPERTIES_BYTES:
        raise MessageIllegalError(
            "properties",
            "max_size",
            f"properties: must be at most {MAX_PROPERTIES_BYTES} bytes encoded"
            f" (got {len(encoded)})",
        )
