"""mapping: Kafka names ↔ store names, and records ↔ messages, losslessly."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_listener import mapping
from kafka_listener.records import Record
from mqcore.broker.types import OutgoingMessage
from mqcore.format.msgid import HostAddress
from mqcore.format.properties import is_system_property
from mqcore.message import MessageExt
from mqcore.validation import validate_group, validate_topic

KAFKA_TOPICS = st.text(st.sampled_from("abcXYZ019._-"), min_size=1, max_size=127).filter(
    lambda s: s not in (".", "..")
)


@given(KAFKA_TOPICS)
def test_topic_names_map_both_ways(name: str) -> None:
    assert mapping.kafka_topic_error(name) is None
    store = mapping.to_store_topic(name)
    validate_topic(store)  # a legal RocketMQ name
    assert len(store) == len(name)
    assert mapping.from_store_topic(store) == name


def test_topic_name_rules() -> None:
    assert mapping.to_store_topic("orders.v1") == "orders|v1"
    for bad in ["", ".", "..", "a b", "a%b", "a|b", "x" * 128, "ü"]:
        assert mapping.kafka_topic_error(bad) is not None, bad
    for hidden in ["%RETRY%g", "%DLQ%g", "a.b"]:
        assert mapping.from_store_topic(hidden) is None


@given(st.text(min_size=1, max_size=30))
def test_group_ids_map_both_ways(group_id: str) -> None:
    store = mapping.to_store_group(group_id)
    if store is None:  # only the too-long ones, once escaped
        assert len(group_id.encode("utf-8", "surrogatepass")) * 3 > 120
        return
    validate_group(store)
    assert mapping.from_store_group(store) == group_id


def test_group_examples() -> None:
    assert mapping.to_store_group("console-consumer-1") == "console-consumer-1"
    assert mapping.to_store_group("my.group") == "my|group"
    assert mapping.to_store_group("a b@c|%") == "a%20b%40c%7C%25"
    assert mapping.to_store_group("") is None
    assert mapping.from_store_group("CID%zz") is None


def stored(msg: object, offset: int = 7) -> MessageExt:
    """What the store would hand back for an OutgoingMessage."""
    out = msg
    props = dict(out.properties or {})  # type: ignore[attr-defined]
    if out.keys:  # type: ignore[attr-defined]
        props["KEYS"] = out.keys  # type: ignore[attr-defined]
    props["UNIQ_KEY"] = "ABC"
    props = {k: v for k, v in props.items() if k and v}  # the store drops empty ones
    return MessageExt(
        0,
        0,
        0,
        0,
        0,
        offset,
        0,
        0,
        out.born_timestamp,
        HostAddress("1.2.3.4", 1),
        0,  # type: ignore[attr-defined]
        HostAddress("1.2.3.4", 1),
        0,
        0,
        out.body,
        "t",
        props,  # type: ignore[attr-defined]
    )


HEADERS = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=4
).map(tuple)


@given(
    key=st.none() | st.binary(max_size=10) | st.text(max_size=10).map(str.encode),
    value=st.none() | st.binary(max_size=10),
    headers=HEADERS,
    timestamp=st.integers(0, 2**45),
)
def test_records_round_trip(key, value, headers, timestamp) -> None:
    record = Record(0, timestamp, key, value, headers)
    msg = mapping.record_to_message(record, 3)
    assert msg.queue_id == 3 and msg.body  # never empty
    for name in msg.properties or {}:
        assert not is_system_property(name)
    back = mapping.message_to_record(stored(msg), 5)
    assert back == (2, timestamp, key, value, headers)


def test_text_key_and_headers_are_plain_properties() -> None:
    msg = mapping.record_to_message(Record(0, 1, b"order-1", b"v", (("trace", b"abc"),)), 0)
    assert msg.keys == "order-1"
    assert msg.properties == {"trace": "abc", "__kafka.hdrs": '["trace"]'}
    fast = mapping.record_to_message(Record(0, 1, b"k", b"v", ()), 0)
    assert fast.properties is None


def test_messages_from_elsewhere_become_records() -> None:
    msg = dataclasses.replace(
        stored(mapping.record_to_message(Record(0, 9, None, b"body", ()), 0)),
        properties={"UNIQ_KEY": "X", "KEYS": "a b", "TAGS": "t", "color": "red"},
    )
    assert mapping.message_to_record(msg, 7) == (0, 9, b"a b", b"body", (("color", b"red"),))


def test_produced_messages_are_ordinary_outgoing_messages() -> None:
    """record_to_message builds OutgoingMessage without its __init__: the result must be
    indistinguishable from one built the usual way (equal, frozen, hashable fields)."""
    built = mapping.record_to_message(Record(0, 1_700_000_000_000, b"k", b"v"), 3)
    expected = OutgoingMessage(b"v", keys="k", queue_id=3, born_timestamp=1_700_000_000_000)
    assert type(built) is OutgoingMessage
    assert built == expected
    assert dataclasses.asdict(built) == dataclasses.asdict(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.body = b"x"  # type: ignore[misc]
    tombstone = mapping.record_to_message(Record(0, 5, None, None), 0)
    assert tombstone == OutgoingMessage(
        mapping.EMPTY_BODY,
        keys="",
        properties={"__kafka.value": "null"},
        queue_id=0,
        born_timestamp=5,
    )
