"""Name, body and properties checks (spec 8.7, 11)."""

from __future__ import annotations

import pytest

from mqcore import validation
from mqcore.errors import MessageIllegalError, ValidationError
from mqcore.format import properties
from mqcore.validation import (
    NOT_ALLOWED_SEND_TOPICS,
    validate_body,
    validate_group,
    validate_properties_size,
    validate_topic,
)


@pytest.mark.parametrize(
    "name",
    ["TopicTest", "a", "%RETRY%group", "x|y", "A-b_9", "t" * 127, "%RETRY%" + "g" * 248],
)
def test_valid_topics(name: str) -> None:
    validate_topic(name)


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("", "blank"),
        ("   ", "blank"),
        ("a b", "characters"),
        ("topic\n", "characters"),  # "$" would have accepted the trailing newline
        ("标签", "characters"),
        ("é", "characters"),
        ("a/b", "characters"),
        ("t" * 128, "max_length"),
        ("%DLQ%" + "g" * 251, "max_length"),
        ("%RETRY%" + "g" * 249, "max_length"),
    ],
)
def test_invalid_topics(name: str, rule: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate_topic(name)
    assert (info.value.field, info.value.rule) == ("topic", rule)
    assert not isinstance(info.value, MessageIllegalError)


def test_messages_are_sentences() -> None:
    with pytest.raises(ValidationError) as info:
        validate_topic("t" * 130)
    assert str(info.value) == "topic: must be at most 127 characters (got 130)"
    with pytest.raises(ValidationError) as info:
        validate_topic("a b", field="retry_topic")
    assert info.value.field == "retry_topic"
    assert str(info.value).startswith("retry_topic: may only contain")
    assert "' '" in str(info.value)
    with pytest.raises(ValidationError) as info:
        validate_topic("")
    assert str(info.value) == "topic: a topic name must not be blank"


def test_groups() -> None:
    validate_group("CID_group-1")
    validate_group("g" * 120)
    with pytest.raises(ValidationError) as info:
        validate_group("g" * 121)
    assert (info.value.field, info.value.rule) == ("group", "max_length")
    assert str(info.value) == "group: must be at most 120 characters (got 121)"
    with pytest.raises(ValidationError) as info:
        validate_group("my group", field="consumer_group")
    assert (info.value.field, info.value.rule) == ("consumer_group", "characters")


def test_body() -> None:
    validate_body(b"x")
    validate_body(b"x" * (4 * 1024 * 1024))
    validate_body(b"x" * 10, max_message_size=10)
    for empty in (b"", None, bytearray()):
        with pytest.raises(MessageIllegalError) as info:
            validate_body(empty)
        assert (info.value.field, info.value.rule) == ("body", "empty")
    with pytest.raises(MessageIllegalError) as info:
        validate_body(b"x" * (4 * 1024 * 1024 + 1))
    assert info.value.rule == "max_size"
    assert str(info.value) == "body: must be at most 4194304 bytes (got 4194305)"


def test_properties_size() -> None:
    assert validation.MAX_PROPERTIES_BYTES == properties.MAX_PROPERTIES_BYTES == 32767
    validate_properties_size(b"x" * 32767)
    with pytest.raises(MessageIllegalError) as info:
        validate_properties_size(b"x" * 32768)
    assert (info.value.field, info.value.rule) == ("properties", "max_size")


def test_not_allowed_send_topics() -> None:
    assert NOT_ALLOWED_SEND_TOPICS == {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
    for topic in NOT_ALLOWED_SEND_TOPICS:
        validate_topic(topic)  # valid names, just not for producers
