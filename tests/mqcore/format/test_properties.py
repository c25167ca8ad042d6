"""Property string encoding and RocketMQ's acceptance rule (spec 1.5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.errors import MessageIllegalError
from mqcore.format import properties as P
from mqcore.format.properties import decode_properties, encode_properties, split_keys


def test_constants_match_rocketmq_strings() -> None:
    assert P.PROPERTY_KEYS == "KEYS"
    assert P.PROPERTY_TAGS == "TAGS"
    assert P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX == P.PROPERTY_UNIQ_KEY == "UNIQ_KEY"
    assert P.PROPERTY_WAIT_STORE_MSG_OK == P.PROPERTY_WAIT == "WAIT"
    assert P.PROPERTY_DELAY_TIME_LEVEL == P.PROPERTY_DELAY == "DELAY"
    assert P.PROPERTY_REAL_QUEUE_ID == P.PROPERTY_REAL_QID == "REAL_QID"
    assert P.PROPERTY_TRANSACTION_PREPARED == P.PROPERTY_TRAN_MSG == "TRAN_MSG"
    assert P.PROPERTY_PRODUCER_GROUP == P.PROPERTY_PGROUP == "PGROUP"
    assert P.PROPERTY_FIRST_POP_TIME == "1ST_POP_TIME"
    assert P.PROPERTY_TRANSACTION_ID == "__transactionId__"
    assert P.PROPERTY_CRC32 == "__CRC32#"
    assert P.PROPERTY_SHARDING_KEY == "__SHARDINGKEY"
    assert P.PROPERTY_BORN_HOST == "__BORNHOST"
    assert P.KEY_SEPARATOR == " "
    assert P.MAX_PROPERTIES_BYTES == 32767


def test_system_property_names() -> None:
    for name in ("KEYS", "TAGS", "UNIQ_KEY", "DELAY", "REAL_TOPIC", "CLUSTER", "INNER_BASE"):
        assert name in P.SYSTEM_PROPERTY_NAMES
        assert P.is_system_property(name)
    assert P.is_system_property("__RMQ.TRANSIENT.anything")
    assert not P.is_system_property("orderId")
    assert "\x02" not in P.SYSTEM_PROPERTY_NAMES


def test_encode_format() -> None:
    assert encode_properties({}) == b""
    assert encode_properties({"a": "1"}) == b"a\x011\x02"
    assert encode_properties({"TAGS": "标签", "KEYS": "k1 k2"}) == (
        "TAGS\x01标签\x02KEYS\x01k1 k2\x02".encode()
    )


def test_encode_rejects_separators() -> None:
    with pytest.raises(MessageIllegalError) as info:
        encode_properties({"a\x01b": "v"})
    assert (info.value.field, info.value.rule) == ("properties", "separator")
    with pytest.raises(MessageIllegalError):
        encode_properties({"a\x02": "v"})
    with pytest.raises(MessageIllegalError):
        encode_properties({"a": "v\x02w"})
    with pytest.raises(MessageIllegalError) as info:
        encode_properties({"a": "\ud800"})
    assert info.value.rule == "utf8"


def test_value_may_hold_name_value_separator() -> None:
    # Java splits at the first \x01 only, so the rest (with its \x01) is the value.
    data = encode_properties({"a": "x\x01y"})
    assert decode_properties(data) == {"a": "x\x01y"}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", {}),
        (b"a\x011\x02", {"a": "1"}),
        (b"a\x011", {"a": "1"}),  # no trailing separator
        (b"a\x011\x02b\x012\x02", {"a": "1", "b": "2"}),
        (b"\x011\x02", {}),  # empty name
        (b"a\x01\x02", {}),  # empty value
        (b"ab\x02", {}),  # no separator at all
        (b"a\x02\x02b\x012\x02", {"b": "2"}),  # too short, empty segment
        (b"\x01\x02", {}),
        (b"a\x011\x02a\x012\x02", {"a": "2"}),  # later duplicate wins
        (b"k\x01\x01\x02", {"k": "\x01"}),  # value is the lone \x01 after the first
        (b"\x02\x02\x02", {}),
    ],
)
def test_decode_acceptance_rule(raw: bytes, expected: dict[str, str]) -> None:
    assert decode_properties(raw) == expected
    assert decode_properties(memoryview(raw)) == expected
    assert decode_properties(bytearray(raw)) == expected


def test_decode_replaces_malformed_utf8() -> None:
    assert decode_properties(b"a\x01\xff\x02") == {"a": "\ufffd"}


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"))


@given(st.dictionaries(_text.filter(bool), _text.filter(bool)))
def test_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


@given(st.dictionaries(_text, _text))
def test_empty_names_and_values_are_dropped(props: dict[str, str]) -> None:
    expected = {k: v for k, v in props.items() if k and v}
    assert decode_properties(encode_properties(props)) == expected


@given(st.binary())
def test_decode_never_raises(raw: bytes) -> None:
    result = decode_properties(raw)
    for name, value in result.items():
        assert name and value
        assert "\x02" not in name + value and "\x01" not in name


def test_split_keys() -> None:
    assert split_keys(None) == ()
    assert split_keys("") == ()
    assert split_keys("k1") == ("k1",)
    assert split_keys("k1 k2  k3 ") == ("k1", "k2", "k3")
    assert split_keys(" ") == ()


# --- encode_message_properties: the put path's dict-free encoder ------------------------------


def _encode_via_dict(tags: str | None, keys: str, delay_level: int, uniq: str) -> bytes:
    """What the store did before the fast path: Message.all_properties() + UNIQ_KEY."""
    props: dict[str, str] = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    if delay_level > 0:
        props["DELAY"] = str(delay_level)
    props["UNIQ_KEY"] = uniq
    return encode_properties(props)


def _outcome(fn: object, *args: object) -> object:
    try:
        return fn(*args)  # type: ignore[operator]
    except MessageIllegalError as exc:
        return (type(exc), exc.field, exc.rule, str(exc))


def test_message_properties_match_the_dict_encoding() -> None:
    cases = [
        ("TagA", "order-1 order-2", 3, "C0A8000130391B6D35860A1B2C3D0001"),
        (None, "", 0, "U"),
        ("", "k", -1, "U"),
        ("标签", "ключ", 18, "😀"),
        ("a\x01b", "k\x01", 0, "U"),  # \x01 is allowed inside values
        ("a\x02b", "k", 0, "U"),  # \x02 is not: the same error as encode_properties
        ("t", "k\x02", 2, "U"),
        ("t", "k", 0, "U\x02"),
        ("\ud800", "k", 0, "U"),  # lone surrogate: not encodable
    ]
    for case in cases:
        assert _outcome(P.encode_message_properties, *case) == _outcome(_encode_via_dict, *case)


@given(
    st.one_of(st.none(), st.text(max_size=20)),
    st.text(max_size=30),
    st.integers(-2, 20),
    st.text(max_size=40),
)
def test_message_properties_hypothesis(
    tags: str | None, keys: str, delay_level: int, uniq: str
) -> None:
    args = (tags, keys, delay_level, uniq)
    assert _outcome(P.encode_message_properties, *args) == _outcome(_encode_via_dict, *args)
