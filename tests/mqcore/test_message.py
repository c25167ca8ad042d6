"""Message (producer side) and MessageExt (a decoded record)."""

from __future__ import annotations

import dataclasses

import pytest

from mqcore import message as message_module
from mqcore.format import properties as P
from mqcore.format.msgid import HostAddress, create_offset_msg_id
from mqcore.format.properties import encode_properties
from mqcore.format.record import decode_record, encode_record
from mqcore.message import Message, MessageExt

STORE = HostAddress("10.0.0.5", 10911)


def ext(properties: dict[str, str], phys_offset: int = 1073741947) -> MessageExt:
    return MessageExt(
        store_size=200,
        magic_code=-626843481,
        body_crc=0,
        queue_id=0,
        flag=0,
        queue_offset=0,
        phys_offset=phys_offset,
        sys_flag=0,
        born_timestamp=1,
        born_host=HostAddress("192.168.0.1", 5000),
        store_timestamp=2,
        store_host=STORE,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=b"x",
        topic="T",
        properties=properties,
    )


def test_property_names_match_the_properties_module() -> None:
    assert message_module._KEYS == P.PROPERTY_KEYS
    assert message_module._TAGS == P.PROPERTY_TAGS
    assert message_module._DELAY == P.PROPERTY_DELAY_TIME_LEVEL
    assert message_module._UNIQ_KEY == P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    assert message_module._KEY_SEPARATOR == P.KEY_SEPARATOR


def test_message_defaults() -> None:
    m = Message("T", b"body")
    assert (m.tags, m.keys, m.properties, m.flag) == (None, (), None, 0)
    assert (m.born_timestamp, m.born_host, m.reconsume_times, m.sys_flag, m.delay_level) == (
        None,
        None,
        0,
        0,
        0,
    )
    assert m.all_properties() == {}


def test_all_properties_merges_fields() -> None:
    user = {"orderId": "42", "TAGS": "old"}
    m = Message("T", b"b", tags="TagA", keys=["k1", "k2"], properties=user, delay_level=3)
    assert m.all_properties() == {"orderId": "42", "TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3"}
    assert user == {"orderId": "42", "TAGS": "old"}  # not modified


def test_keys_as_string_and_empty_fields() -> None:
    assert Message("T", b"b", keys="a b").all_properties() == {"KEYS": "a b"}
    assert Message("T", b"b", keys="a b").keys_value() == "a b"
    m = Message("T", b"b", tags="", keys=(), properties={"TAGS": "keep"}, delay_level=0)
    assert m.all_properties() == {"TAGS": "keep"}


def test_message_ext_derived_views() -> None:
    m = ext({"TAGS": "TagA", "KEYS": "k1  k2 ", "UNIQ_KEY": "ABC", "color": "red"})
    assert m.tags == "TagA"
    assert m.keys == ("k1", "k2")
    assert m.offset_msg_id == "0A00000500002A9F000000004000007B"
    assert m.msg_id == "ABC"
    assert m.user_properties() == {"color": "red"}


def test_message_ext_without_uniq_key_uses_offset_id() -> None:
    m = ext({"TAGS": ""})
    assert m.tags is None and m.keys == ()
    assert m.msg_id == m.offset_msg_id == create_offset_msg_id(STORE, 1073741947)


def test_user_properties_drop_transient_and_system_names() -> None:
    m = ext({"__RMQ.TRANSIENT.x": "1", "CLUSTER": "c", "REAL_TOPIC": "t", "mine": "v"})
    assert m.user_properties() == {"mine": "v"}


def test_message_ext_is_frozen() -> None:
    m = ext({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.queue_id = 3  # type: ignore[misc]
    assert not hasattr(m, "__dict__")


def test_message_to_record_and_back() -> None:
    m = Message("TopicTest", b"hello", tags="TagA", keys=("k1", "k2"), properties={"a": "1"})
    data = encode_record(
        topic=m.topic,
        queue_id=1,
        flag=m.flag,
        queue_offset=5,
        phys_offset=4096,
        sys_flag=m.sys_flag,
        born_timestamp=10,
        born_host=HostAddress("192.168.0.1", 5000),
        store_timestamp=20,
        store_host=STORE,
        reconsume_times=m.reconsume_times,
        prepared_transaction_offset=0,
        body=m.body,
        properties=encode_properties(m.all_properties()),
    )
    stored = decode_record(data, 0)
    assert (stored.tags, stored.keys, stored.body) == ("TagA", ("k1", "k2"), b"hello")
    assert stored.user_properties() == {"a": "1"}
    assert stored.msg_id == stored.offset_msg_id == create_offset_msg_id(STORE, 4096)
