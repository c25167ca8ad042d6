"""api.send_input: what it accepts, the serializer accepts the same way; the rest it leaves
to the serializer (whose errors are the API's, see test_messages.py)."""

from __future__ import annotations

import base64
from typing import Any

from django.conf import settings
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from api.send_input import plain_messages
from mqcore.broker.types import OutgoingMessage
from shared.serializers.messages import SendSerializer, message_from

MAX = int(settings.CAIRN_API["MAX_BATCH_MESSAGES"])


def by_serializer(data: Any) -> list[OutgoingMessage] | None:
    s = SendSerializer(data=data)
    if not s.is_valid():
        return None
    return [message_from(m) for m in s.validated_data["messages"]]


PLAIN = [
    {"body": "hello"},
    {"body": "héllo ✓", "keys": ["k1", "k-2"], "tag": "TagA"},
    {"body": base64.b64encode(b"\x00\xff").decode(), "body_encoding": "base64"},
    {"body": {"a": [1, 2], "b": "é"}, "body_encoding": "json"},
    {"body": "", "body_encoding": "json"},
    {"body": "x", "properties": {"color": "red", "empty": "", "sp": " a b "}},
    {"body": "x", "queue_id": 3, "delay_level": 2, "sharding_key": "order-1"},
    {"body": "x", "tag": "", "keys": [], "queue_id": None, "sharding_key": None},
    {"body": "x", "tag": None, "properties": {}},
]


def test_well_formed_bodies_take_the_plain_path_with_the_serializers_result() -> None:
    for message in PLAIN:
        data = {"messages": [message]}
        fast = plain_messages(data, MAX)
        assert fast is not None, message
        assert fast == by_serializer(data), message
    batch = {"messages": PLAIN}
    assert plain_messages(batch, MAX) == by_serializer(batch)


NOT_PLAIN = [
    {},  # no body
    {"body": ""},  # empty: mqcore's rule
    {"body": None},
    {"body": 5},
    {"body": "\ud800"},
    {"body": "!!!", "body_encoding": "base64"},
    {"body": "x", "body_encoding": "hex"},
    {"body": "x", "keys": "a b"},  # the serializer splits it
    {"body": "x", "keys": [" a"]},  # the serializer trims it
    {"body": "x", "keys": ["a b"]},
    {"body": "x", "keys": [7]},
    {"body": "x", "keys": ["k"] * 65},
    {"body": "x", "tag": " t"},
    {"body": "x", "tag": "a\x00"},
    {"body": "x", "tag": "t" * 1025},
    {"body": "x", "properties": {"a": 1.5}},  # the serializer makes it "1.5"
    {"body": "x", "properties": {"": "v"}},
    {"body": "x", "properties": {"a\x01": "b"}},
    {"body": "x", "queue_id": True},
    {"body": "x", "queue_id": 1.0},
    {"body": "x", "queue_id": -1},
    {"body": "x", "delay_level": None},
    {"body": "x", "sharding_key": ""},
    {"body": "x", "priority": 1},
]


def test_anything_else_goes_to_the_serializer() -> None:
    for message in NOT_PLAIN:
        assert plain_messages({"messages": [message]}, MAX) is None, message
    for data in ({}, [], "x", {"messages": []}, {"messages": {}}, {"messages": [{}], "x": 1}):
        assert plain_messages(data, MAX) is None, data
    assert plain_messages({"messages": [{"body": "x"}] * 3}, 2) is None


_weird = st.sampled_from(
    ["", " ", "a b", " a", "a ", "\x00", "\x01", "a\x02", "\ud800", "\t", "x" * 1025, None, True]
    + [-1, 2**31, 1.0, 1.5, [], {}, ["a"], {"a": "b"}]
)
_word = st.sampled_from(["a", "k-1", "é", "✓", "x" * 1024])


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid values seven times in eight, else anything odd."""
    return st.one_of(*[valid] * 7, _weird)


_fields = {
    "body": _mostly(st.sampled_from(["x", "hello", "é", "aGk=", "aGk"])),
    "body_encoding": _mostly(st.sampled_from(["text", "base64", "json"])),
    "keys": _mostly(st.lists(_mostly(_word), max_size=3)),
    "tag": _mostly(st.one_of(_word, st.just(""), st.none())),
    "properties": _mostly(
        st.dictionaries(
            st.one_of(_word, _word, st.sampled_from(["", " a", "\x00", "\x01", "\ud800"])),
            _mostly(st.sampled_from(["v", "", " v "])),
            max_size=2,
        )
    ),
    "queue_id": _mostly(st.one_of(st.none(), st.sampled_from([0, 3, 2**31 - 1]))),
    "sharding_key": _mostly(st.one_of(_word, st.none())),
    "delay_level": _mostly(st.sampled_from([0, 1, 18, 2**31 - 1])),
}
_message = st.fixed_dictionaries(
    {"body": _fields["body"]},
    optional={**{k: v for k, v in _fields.items() if k != "body"}, "other": _weird},
)


@hsettings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(messages=st.lists(_message, min_size=1, max_size=3))
def test_what_the_plain_path_accepts_the_serializer_accepts_the_same(
    messages: list[dict[str, Any]],
) -> None:
    data = {"messages": messages}
    fast = plain_messages(data, MAX)
    if fast is not None:
        assert fast == by_serializer(data)


def _key_kept(key: Any) -> bool:
    """One key the serializer keeps as it is (the rule send_input checks batch-wide)."""
    if type(key) is not str or [key] != key.split() or len(key) > 1024:
        return False
    if any(c in key for c in "\x00\x01\x02"):
        return False
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@hsettings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(
    keys=st.lists(st.lists(_mostly(_word), max_size=3), min_size=2, max_size=6),
    tagged=st.booleans(),
)
def test_keys_are_checked_across_the_batch_as_one_by_one(
    keys: list[list[Any]], tagged: bool
) -> None:
    """The keys of a batch are checked together after the loop: one odd key anywhere in it
    still sends the whole body to the serializer, and a clean batch is the serializer's."""
    extra = {"tag": "T"} if tagged else {}
    data = {"messages": [{"body": f"m{i}", "keys": k, **extra} for i, k in enumerate(keys)]}
    fast = plain_messages(data, MAX)
    assert (fast is not None) == all(_key_kept(key) for k in keys for key in k)
    if fast is not None:
        assert fast == by_serializer(data)


def test_a_bad_key_in_the_last_message_of_a_long_batch() -> None:
    good = [{"body": "x", "keys": [f"k{i}", "é✓"]} for i in range(MAX - 1)]
    for bad in (["a b"], [""], ["\x1c"], ["\ud800"], ["a\x02"], ["k" * 1025], [3], ["x"] * 65):
        assert plain_messages({"messages": [*good, {"body": "x", "keys": bad}]}, MAX) is None
    data = {"messages": [*good, {"body": "x", "keys": ["k" * 1024]}]}
    fast = plain_messages(data, MAX)
    assert fast is not None and fast == by_serializer(data)
