"""Messages: send (encodings, batches, errors), pull, key query, browse, lookup by id."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, send, wait_dispatched

pytestmark = pytest.mark.django_db


def post(client: APIClient, topic: str, *messages: dict[str, Any]) -> Any:
    return client.post(
        f"/api/v1/topics/{topic}/messages", {"messages": list(messages)}, format="json"
    )


def test_send_one_message_returns_ids_queue_and_offset(
    operator: APIClient, broker: Broker, topic: str
) -> None:
    r = post(
        operator,
        topic,
        {
            "body": "hello",
            "keys": ["k1", "k2"],
            "tag": "TagA",
            "properties": {"color": "red"},
            "queue_id": 2,
        },
    )
    assert r.status_code == 200, r.content
    (result,) = r.json()["results"]
    assert result["queue_id"] == 2 and result["queue_offset"] == 0
    assert len(result["msg_id"]) == 32 and len(result["offset_msg_id"]) == 32
    assert result["store_timestamp"] > 0
    wait_dispatched(broker)
    stored = broker.get_message(result["msg_id"])
    assert stored is not None
    assert stored.body == b"hello" and stored.tags == "TagA" and stored.keys == ("k1", "k2")
    assert stored.user_properties() == {"color": "red"}


def test_batch_results_are_in_order(operator: APIClient, topic: str) -> None:
    r = post(operator, topic, *({"body": f"m{i}", "queue_id": 1} for i in range(5)))
    results = r.json()["results"]
    assert [x["queue_offset"] for x in results] == [0, 1, 2, 3, 4]
    assert len({x["msg_id"] for x in results}) == 5


@pytest.mark.parametrize(
    ("message", "stored"),
    [
        ({"body": "héllo ✓"}, "héllo ✓".encode()),
        (
            {"body": base64.b64encode(b"\x00\xff\x10").decode(), "body_encoding": "base64"},
            b"\x00\xff\x10",
        ),
        (
            {"body": {"a": [1, 2], "b": "é"}, "body_encoding": "json"},
            '{"a":[1,2],"b":"é"}'.encode(),
        ),
        ({"body": 42, "body_encoding": "json"}, b"42"),
    ],
)
def test_body_encodings(
    operator: APIClient, broker: Broker, topic: str, message: dict[str, Any], stored: bytes
) -> None:
    r = post(operator, topic, message)
    assert r.status_code == 200, r.content
    wait_dispatched(broker)
    assert broker.get_message(r.json()["results"][0]["msg_id"]).body == stored


def test_binary_bodies_come_back_as_base64(viewer: APIClient, broker: Broker, topic: str) -> None:
    send(broker, topic, b"\xff\xfe binary", b"plain text", queue_id=0)
    r = viewer.get(f"/api/v1/topics/{topic}/messages", {"queue_id": 0})
    first, second = r.json()["messages"]
    assert first["body_encoding"] == "base64"
    assert base64.b64decode(first["body"]) == b"\xff\xfe binary"
    assert (second["body"], second["body_encoding"]) == ("plain text", "text")
    r = viewer.get(f"/api/v1/topics/{topic}/messages", {"queue_id": 0, "body_encoding": "base64"})
    assert r.json()["messages"][1]["body"] == base64.b64encode(b"plain text").decode()


def test_unknown_topic_is_404(operator: APIClient, viewer: APIClient) -> None:
    assert_problem(post(operator, "nope", {"body": "x"}), 404, "topic", "not_found")
    assert_problem(viewer.get("/api/v1/topics/nope/messages"), 404, "topic", "not_found")


@pytest.mark.parametrize(
    ("message", "field", "rule"),
    [
        ({}, "messages[0].body", "required"),
        ({"body": ""}, "messages[0].body", "empty"),
        ({"body": None}, "messages[0].body", "null"),
        ({"body": "!!!", "body_encoding": "base64"}, "messages[0].body", "base64"),
        ({"body": "x", "body_encoding": "hex"}, "messages[0].body_encoding", "choice"),
        ({"body": 5}, "messages[0].body", "type"),
        ({"body": "\ud800"}, "messages[0].body", "encoding"),
        ({"body": "x", "queue_id": -1}, "messages[0].queue_id", "range"),
        ({"body": "x", "queue_id": 10**12}, "messages[0].queue_id", "range"),
        ({"body": "x", "queue_id": 4}, "messages[0].queue_id", "range"),
        ({"body": "x", "queue_id": "one"}, "messages[0].queue_id", "type"),
        ({"body": "x", "delay_level": -3}, "messages[0].delay_level", "range"),
        (
            {"body": "x", "keys": "a b", "tag": "t", "properties": {"TAGS": "x"}},
            "messages[0].properties",
            "reserved_name",
        ),
        (
            {"body": "x", "properties": {"__kafka.hdrs": "a"}},
            "messages[0].properties",
            "reserved_name",
        ),
        ({"body": "x", "keys": [""]}, "messages[0].keys[0]", "blank"),
        ({"body": "x", "keys": ["a b"]}, "messages[0].keys[0]", "characters"),
        ({"body": "x", "keys": 7}, "messages[0].keys", "type"),
        ({"body": "x", "properties": {"a": 1.5}}, None, None),
        ({"body": "x", "properties": ["a"]}, "messages[0].properties", "type"),
        ({"body": "x", "properties": {"a\u0001": "b"}}, "messages[0].properties", "characters"),
        ({"body": "x", "tag": "a\u0002"}, "messages[0].tag", "characters"),
        ({"body": "x", "priority": 1}, "messages[0].priority", "unknown_field"),
    ],
)
def test_send_validation(
    operator: APIClient, topic: str, message: dict[str, Any], field: str | None, rule: str | None
) -> None:
    # Raw JSON text: the test client's own encoder refuses lone surrogates.
    r = operator.post(
        f"/api/v1/topics/{topic}/messages",
        json.dumps({"messages": [message]}),
        content_type="application/json",
    )
    if field is None:  # accepted (a number is a valid property value as text)
        assert r.status_code == 200, r.content
        return
    assert_problem(r, 400, field, rule)


@pytest.mark.parametrize(
    ("payload", "field", "rule"),
    [
        ({"messages": []}, "messages", "empty"),
        ({"messages": {"body": "x"}}, "messages", "type"),
        ({}, "messages", "required"),
        ([], "", "type"),
        ("text", "", "type"),
    ],
)
def test_send_body_shape(
    operator: APIClient, topic: str, payload: Any, field: str, rule: str
) -> None:
    r = operator.post(f"/api/v1/topics/{topic}/messages", payload, format="json")
    assert_problem(r, 400, field, rule)


def test_malformed_json_is_400(operator: APIClient, topic: str) -> None:
    r = operator.post(
        f"/api/v1/topics/{topic}/messages", '{"messages": [', content_type="application/json"
    )
    assert_problem(r, 400, "body", "parse")
    r = operator.post(
        f"/api/v1/topics/{topic}/messages", b"\xff\xfe", content_type="application/json"
    )
    assert_problem(r, 400, "body", "parse")
    r = operator.post(
        f"/api/v1/topics/{topic}/messages", '{"messages": NaN}', content_type="application/json"
    )
    assert_problem(r, 400, "body", "parse")
    r = operator.post(
        f"/api/v1/topics/{topic}/messages", "[" * 100_000, content_type="application/json"
    )
    assert_problem(r, 400, "body", "parse")


def test_wrong_media_type_is_415(operator: APIClient, topic: str) -> None:
    r = operator.post(
        f"/api/v1/topics/{topic}/messages",
        "body=x",
        content_type="application/x-www-form-urlencoded",
    )
    assert_problem(r, 415, rule="media_type")


def test_oversize_message_is_413(operator: APIClient, broker: Broker, topic: str) -> None:
    limit = broker.store.config.max_message_size
    r = post(operator, topic, {"body": "x" * (limit + 1)})
    assert_problem(r, 413, "messages[0].body", "max_size")
    assert post(operator, topic, {"body": "x" * limit}).status_code == 200


def test_oversize_batch_is_413_and_stores_nothing(
    operator: APIClient, broker: Broker, topic: str
) -> None:
    limit = broker.store.config.max_message_size
    r = post(
        operator,
        topic,
        {"body": "x" * 10, "queue_id": 0},
        {"body": "y" * (limit + 1), "queue_id": 0},
    )
    assert_problem(r, 413, "messages[1].body", "max_size")
    assert broker.store.max_offset(topic, 0) == 0


def test_oversize_request_is_413_before_parsing(
    operator: APIClient, topic: str, settings: Any
) -> None:
    settings.CAIRN_API = {**settings.CAIRN_API, "MAX_REQUEST_BYTES": 1000}
    r = post(operator, topic, {"body": "x" * 2000})
    assert_problem(r, 413, "body", "max_request_bytes")


def test_too_many_messages_in_one_request(operator: APIClient, topic: str, settings: Any) -> None:
    settings.CAIRN_API = {**settings.CAIRN_API, "MAX_BATCH_MESSAGES": 3}
    r = post(operator, topic, *({"body": "x"} for _ in range(4)))
    assert_problem(r, 400, "messages", "max_length")


def test_delay_level_reports_the_schedule_topic(
    operator: APIClient, broker: Broker, topic: str
) -> None:
    r = post(operator, topic, {"body": "later", "delay_level": 3, "queue_id": 1})
    result = r.json()["results"][0]
    assert result["delayed"] is True and result["queue_id"] == 1
    wait_dispatched(broker)
    assert broker.store.max_offset(topic, 1) == 0  # not yet due


def test_send_is_audited(operator: APIClient, topic: str) -> None:
    ids = [
        x["msg_id"] for x in post(operator, topic, {"body": "a"}, {"body": "b"}).json()["results"]
    ]
    entry = AuditEntry.objects.get(action="message.send")
    assert entry.target == topic and entry.username == "otto"
    assert entry.new_value == {"count": 2, "msg_ids": ids}


def test_viewer_cannot_send(viewer: APIClient, topic: str) -> None:
    assert_problem(post(viewer, topic, {"body": "x"}), 403, rule="role")


def test_topic_not_writable_is_403(operator: APIClient, broker: Broker, topic: str) -> None:
    broker.admin.update_topic(topic, perm=4)
    assert_problem(post(operator, topic, {"body": "x"}), 403, "topic", "topic_not_writable")


def test_system_topic_send_is_403(operator: APIClient) -> None:
    assert_problem(
        post(operator, "SCHEDULE_TOPIC_XXXX", {"body": "x"}), 403, "topic", "not_allowed_send"
    )


class TestAutoCreate:
    @pytest.fixture
    def broker_options(self) -> dict[str, Any]:
        return {"auto_create_topics": True}

    def test_unknown_topic_is_created_from_tbw102(
        self, operator: APIClient, broker: Broker
    ) -> None:
        r = post(operator, "fresh", {"body": "x"})
        assert r.status_code == 200, r.content
        tbw = broker.admin.get_topic("TBW102")
        fresh = broker.admin.get_topic("fresh")
        assert fresh.perm == tbw.perm & ~1
        assert fresh.write_queue_nums <= tbw.write_queue_nums


# -- reading ----------------------------------------------------------------------------------


def read(client: APIClient, topic: str, **params: Any) -> Any:
    return client.get(f"/api/v1/topics/{topic}/messages", params)


def test_pull_by_queue_and_offset(viewer: APIClient, broker: Broker, topic: str) -> None:
    sent = send(broker, topic, b"a", b"b", b"c", queue_id=3, keys=["k"], tag="T")
    r = read(viewer, topic, queue_id=3, offset=1, limit=5)
    assert r.status_code == 200
    page = r.json()
    assert page["mode"] == "pull" and page["status"] == "FOUND"
    assert [m["body"] for m in page["messages"]] == ["b", "c"]
    assert (page["next_offset"], page["min_offset"], page["max_offset"]) == (3, 0, 3)
    m = page["messages"][0]
    assert m["msg_id"] == sent[1].msg_id and m["offset_msg_id"] == sent[1].offset_msg_id
    assert (m["topic"], m["queue_id"], m["queue_offset"]) == (topic, 3, 1)
    assert m["keys"] == ["k"] and m["tag"] == "T" and m["properties"] == {}
    assert "UNIQ_KEY" in m["system_properties"]
    assert m["born_timestamp"] > 0 and m["store_timestamp"] >= m["born_timestamp"] - 1000
    r = read(viewer, topic, queue_id=3, offset=3)
    assert (r.json()["status"], r.json()["messages"]) == ("NO_NEW_MSG", [])


def test_pull_with_tag_filter(viewer: APIClient, broker: Broker, topic: str) -> None:
    send(broker, topic, b"a", queue_id=0, tag="A")
    send(broker, topic, b"b", queue_id=0, tag="B")
    r = read(viewer, topic, queue_id=0, tag="B")
    assert [m["body"] for m in r.json()["messages"]] == ["b"]


@pytest.mark.parametrize(
    ("params", "field", "rule"),
    [
        ({"queue_id": -1}, "queue_id", "range"),
        ({"queue_id": 99}, "queue_id", "range"),
        ({"queue_id": 10**20}, "queue_id", "range"),
        ({"queue_id": "x"}, "queue_id", "type"),
        ({"queue_id": 0, "offset": -5}, "offset", "range"),
        ({"queue_id": 0, "offset": 2**64}, "offset", "range"),
        ({"queue_id": 0, "limit": 0}, "limit", "range"),
        ({"queue_id": 0, "limit": 5000}, "limit", "range"),
        ({"queue_id": 0, "wait_ms": 30_001}, "wait_ms", "range"),
        ({"queue_id": 0, "wait_ms": -1}, "wait_ms", "range"),
        ({"queue_id": 0, "tag": "||"}, "tag", "no_tags"),
        ({"queue_id": 0, "cursor": "abc"}, "cursor", "exclusive"),
        ({"queue_id": 0, "key": "k"}, "queue_id", "exclusive"),
        ({"begin": 10, "end": 5}, "end", "range"),
        ({"begin": -1}, "begin", "range"),
        ({"cursor": "garbage"}, "cursor", "invalid"),
        ({"body_encoding": "hex"}, "body_encoding", "choice"),
    ],
)
def test_read_validation(
    viewer: APIClient, topic: str, params: dict[str, Any], field: str, rule: str
) -> None:
    assert_problem(read(viewer, topic, **params), 400, field, rule)


def test_key_query(viewer: APIClient, broker: Broker, topic: str) -> None:
    send(broker, topic, b"one", keys=["order-1"])
    send(broker, topic, b"two", keys=["order-2", "x"])
    send(broker, topic, b"three", keys=["order-1"])
    r = read(viewer, topic, key="order-1", begin=0, end=2**62)
    assert r.status_code == 200
    assert sorted(m["body"] for m in r.json()["messages"]) == ["one", "three"]
    assert read(viewer, topic, key="order-1", begin=0, end=1).json()["messages"] == []


def test_browse_pages_with_cursor_until_exhausted(
    viewer: APIClient, broker: Broker, topic: str
) -> None:
    bodies = [f"m{i}".encode() for i in range(7)]
    for body in bodies:
        send(broker, topic, body)
    end = broker.clock.now_ms() + 1
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params: dict[str, Any] = {"begin": 0, "end": end, "limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = read(viewer, topic, **params).json()
        assert page["mode"] == "browse" and page["end"] == end
        seen += [m["body"] for m in page["messages"]]
        if page["exhausted"]:
            assert page["next_cursor"] is None
            break
        cursor = page["next_cursor"]
    assert sorted(seen) == sorted(b.decode() for b in bodies)
    times = [
        m["store_timestamp"]
        for m in read(viewer, topic, begin=0, end=end, limit=100).json()["messages"]
    ]
    assert times == sorted(times)


def test_browse_cursor_from_another_range_is_400(
    viewer: APIClient, broker: Broker, topic: str
) -> None:
    for i in range(3):
        send(broker, topic, b"x%d" % i)
    page = read(viewer, topic, begin=0, end=2**50, limit=1).json()
    r = read(viewer, topic, begin=1, end=2**50, limit=1, cursor=page["next_cursor"])
    assert_problem(r, 400, "cursor", "mismatch")


def test_message_by_either_id_with_consume_status(
    viewer: APIClient, broker: Broker, topic: str, group: str
) -> None:
    (sent,) = send(broker, topic, b"payload", queue_id=0, keys=["k"])
    broker.commit_offset(group, topic, 0, 1)
    for msg_id in (sent.msg_id, sent.offset_msg_id):
        r = viewer.get(f"/api/v1/messages/{msg_id}")
        assert r.status_code == 200, r.content
        body = r.json()
        assert body["msg_id"] == sent.msg_id and body["offset_msg_id"] == sent.offset_msg_id
        assert body["body"] == "payload" and body["home_topic"] == topic
        (status,) = [s for s in body["consume_status"] if s["group"] == group]
        assert status["state"] == "CONSUMED" and status["committed_offset"] == 1


def test_message_lookup_errors(viewer: APIClient, broker: Broker) -> None:
    assert_problem(viewer.get("/api/v1/messages/" + "0" * 32), 404, "msg_id", "not_found")
    assert_problem(viewer.get("/api/v1/messages/not-hex"), 400, "msg_id", "format")
    assert_problem(viewer.get("/api/v1/messages/" + "A" * 65), 400, "msg_id", "format")


def test_read_output_matches_send_output(operator: APIClient, broker: Broker, topic: str) -> None:
    result = post(
        operator, topic, {"body": {"n": 1}, "body_encoding": "json", "queue_id": 0}
    ).json()["results"][0]
    wait_dispatched(broker)
    m = read(operator, topic, queue_id=0).json()["messages"][0]
    assert (m["msg_id"], m["offset_msg_id"], m["queue_offset"]) == (
        result["msg_id"],
        result["offset_msg_id"],
        result["queue_offset"],
    )
    assert json.loads(m["body"]) == {"n": 1}
