"""The REST send's round-robin path: api.send_input.round_robin_messages takes exactly the
usual bodies (text and keys only) and makes the store messages Broker.send would make of
plain_messages' result; a usual batch answers and stores what the general path does."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.conf import settings
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from api.send_input import plain_messages, round_robin_messages
from mqcore.broker import Broker
from mqcore.broker.sending import _plain_message
from mqcore.broker.types import OutgoingMessage
from mqcore.format.msgid import HostAddress
from mqcore.message import Message
from tests.api.conftest import assert_problem, wait_dispatched

MAX = int(settings.CAIRN_API["MAX_BATCH_MESSAGES"])
HOST = HostAddress("10.1.2.3", 4567)


def usual(message: Any) -> bool:
    return type(message) is dict and set(message) in ({"body"}, {"body", "keys"})


def as_send_makes_them(outgoing: list[OutgoingMessage], topic: str) -> list[Message]:
    """The store messages Broker.send makes of plain OutgoingMessages (place_messages)."""
    assert all(not o.properties and not o.delay_level for o in outgoing)
    batch = len(outgoing) > 1
    return [_plain_message(topic, o, HOST, i, batch, "0" * 32) for i, o in enumerate(outgoing)]


def check(data: Any) -> None:
    fast = round_robin_messages(data, MAX, "T", HOST)
    general = plain_messages(data, MAX)
    messages = data.get("messages") if type(data) is dict else None
    if general is not None and all(usual(m) for m in messages or ()):
        assert fast is not None, data
        assert all(o.queue_id is None and o.sharding_key is None for o in general)
        assert fast == as_send_makes_them(general, "T")
    else:
        assert fast is None, data


USUAL = [
    {"body": "hello"},
    {"body": "héllo ✓", "keys": ["k1", "k-2"]},
    {"body": "x", "keys": []},
    {"body": "x", "keys": ["k" * 1024] * 31},
]
NOT_USUAL = [
    {},
    {"body": ""},
    {"body": None},
    {"body": 5},
    {"body": "\ud800"},
    {"keys": ["a"]},
    {"body": "x", "tag": "t"},  # plain, not usual: the general path
    {"body": "x", "tag": None},
    {"body": "x", "keys": ["a"], "queue_id": 1},
    {"body": "x", "sharding_key": "k"},
    {"body": "x", "delay_level": 0},
    {"body": "x", "keys": "a b"},
    {"body": "x", "keys": None},
    {"body": "x", "keys": ["a b"]},
    {"body": "x", "keys": [""]},
    {"body": "x", "keys": [7]},
    {"body": "x", "keys": ["k"] * 65},
    {"body": "x", "keys": ["k" * 1025]},
    {"body": "x", "keys": ["a\x00"]},
    {"body": "x", "keys": ["\ud800"]},
    {"body": "x", "priority": 1},
    {"priority": 1, "keys": ["a"]},
]


def test_usual_bodies_and_the_rest() -> None:
    for message in USUAL:
        assert round_robin_messages({"messages": [message]}, MAX, "T", HOST) is not None
        check({"messages": [message]})
        check({"messages": [*USUAL, message]})
    for message in NOT_USUAL:
        assert round_robin_messages({"messages": [message]}, MAX, "T", HOST) is None, message
        check({"messages": [message]})
        assert round_robin_messages({"messages": [*USUAL, message]}, MAX, "T", HOST) is None
    for data in ({}, [], "x", {"messages": []}, {"messages": {}}, {"messages": [{}], "x": 1}):
        assert round_robin_messages(data, MAX, "T", HOST) is None, data
    assert round_robin_messages({"messages": [{"body": "x"}] * 3}, 2, "T", HOST) is None
    (m,) = round_robin_messages({"messages": [{"body": "é", "keys": ["a", "b"]}]}, 9, "T", None)
    assert m == Message("T", "é".encode(), keys="a b")


_weird = st.sampled_from(["", " a", "a b", "\x00", "\ud800", "x" * 1025, None, 3, [], {}])
_word = st.sampled_from(["a", "k-1", "é", "✓", "x" * 1024])
_usual_message = st.fixed_dictionaries(
    {"body": st.one_of(*[st.sampled_from(["x", "hello", "é"])] * 7, _weird)},
    optional={
        "keys": st.one_of(*[st.lists(st.one_of(*[_word] * 7, _weird), max_size=3)] * 7, _weird),
    },
)
_message = st.one_of(
    *[_usual_message] * 7,
    st.fixed_dictionaries(
        {"body": st.just("x")},
        optional={"tag": st.just("t"), "queue_id": st.just(1), "other": _weird},
    ),
)


@hsettings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(messages=st.lists(_message, min_size=1, max_size=4))
def test_round_robin_messages_are_what_send_would_store(messages: list[dict[str, Any]]) -> None:
    check({"messages": messages})


# -- through the API ---------------------------------------------------------------------------


def _normalized(reply: bytes, topic: str) -> list[dict[str, Any]]:
    """A send reply without what differs between two sends (ids, time, the topic's name)."""
    assert re.fullmatch(rb'\{"results":\[.*\]\}', reply)
    results: list[dict[str, Any]] = json.loads(reply)["results"]
    for r in results:
        assert r.pop("topic") == topic
        r.pop("msg_id")
        r.pop("offset_msg_id")
        r.pop("store_timestamp")
    return results


@pytest.mark.django_db
@pytest.mark.parametrize("count", [1, 3, 10])
def test_a_usual_batch_answers_and_stores_what_the_general_path_does(
    operator: APIClient, broker: Broker, count: int
) -> None:
    for name in ("usual", "general"):
        broker.admin.create_topic(name, read_queue_nums=3, write_queue_nums=3)
    for round_ in range(2):
        messages = [{"body": f"m{round_}-{i}", "keys": [f"k{i}", "é"]} for i in range(count)]
        # "tag": null makes a body plain but not usual: it takes the general path.
        replies = [
            operator.post(
                f"/api/v1/topics/{name}/messages",
                {"messages": [m | extra for m in messages]},
                format="json",
                REMOTE_ADDR="10.1.2.3",
                REMOTE_PORT=4567,
            )
            for name, extra in (("usual", {}), ("general", {"tag": None}))
        ]
        assert [r.status_code for r in replies] == [200, 200]
        assert [r["Content-Type"] for r in replies] == ["application/json"] * 2
        usual_reply = _normalized(replies[0].content, "usual")
        assert usual_reply == _normalized(replies[1].content, "general")
        assert {r["status"] for r in usual_reply} == {"SEND_OK"}
    wait_dispatched(broker)
    for q in range(3):
        mine = broker.pull(None, "usual", q, 0, 64).messages
        theirs = broker.pull(None, "general", q, 0, 64).messages
        assert len(mine) == len(theirs) == len(range(q, 2 * count, 3))
        for a, b in zip(mine, theirs, strict=True):
            assert (a.queue_offset, a.body, a.keys, a.tags, str(a.born_host), a.flag) == (
                b.queue_offset,
                b.body,
                b.keys,
                b.tags,
                str(b.born_host),
                b.flag,
            )


@pytest.mark.django_db
def test_a_usual_batch_is_refused_as_the_general_path_refuses(
    operator: APIClient, broker: Broker, topic: str
) -> None:
    def post(name: str, *messages: dict[str, Any]) -> Any:
        return operator.post(
            f"/api/v1/topics/{name}/messages", {"messages": list(messages)}, format="json"
        )

    big = "x" * (64 * 1024 + 1)  # over the test store's max_message_size
    for extra in ({}, {"tag": None}):  # the round-robin path, then the general one
        assert_problem(post(topic, {"body": big} | extra), 413, "messages[0].body", "max_size")
        assert_problem(
            post(topic, {"body": "x"} | extra, {"body": big} | extra),
            413,
            "messages[1].body",
            "max_size",
        )
        assert_problem(post("nope", {"body": "x"} | extra), 404, "topic", "not_found")
    broker.admin.update_topic(topic, perm=4)
    for extra in ({}, {"tag": None}):
        assert_problem(post(topic, {"body": "x"} | extra), 403, "topic", "topic_not_writable")
    wait_dispatched(broker)
    assert all(broker.store.max_offset(topic, q) == 0 for q in range(4))
