"""REST shows a Kafka record's headers as headers, never the listener's reserved
``__kafka.*`` properties among the user's (issue 21)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from kafka_listener.mapping import record_to_message
from kafka_listener.record_codec import Record
from mqcore.broker import Broker
from tests.api.conftest import wait_dispatched

pytestmark = pytest.mark.django_db


def produce(broker: Broker, topic: str, record: Record) -> str:
    message = record_to_message(record, 0)
    [result] = broker.send(topic, [message])
    wait_dispatched(broker)
    return str(result.msg_id)


def only(client: APIClient, topic: str) -> dict:
    r = client.get(f"/api/v1/topics/{topic}/messages", {"queue_id": 0, "offset": 0})
    assert r.status_code == 200, r.content[:300]
    [message] = r.json()["messages"]
    return message


def test_plain_headers_are_properties_and_headers(
    viewer: APIClient, broker: Broker, topic: str
) -> None:
    produce(broker, topic, Record(0, 1_700_000_000_000, b"k", b"v", (("b", b"2"), ("a", b"1"))))
    m = only(viewer, topic)
    assert m["properties"] == {"a": "1", "b": "2"}
    assert not any(k.startswith("__kafka.") for k in m["system_properties"])
    assert m["headers"] == [
        {"name": "b", "value": "2", "value_encoding": "text"},
        {"name": "a", "value": "1", "value_encoding": "text"},
    ]


def test_headers_that_are_not_plain_properties(
    viewer: APIClient, broker: Broker, topic: str
) -> None:
    headers = (("dup", b"1"), ("dup", b"2"), ("bin", b"\xff\x00"), ("gone", None))
    produce(broker, topic, Record(0, 1_700_000_000_000, b"", None, headers))
    m = only(viewer, topic)
    reserved = [k for k in {**m["properties"], **m["system_properties"]} if k.startswith("__")]
    assert reserved == []
    assert m["headers"] == [
        {"name": "dup", "value": "1", "value_encoding": "text"},
        {"name": "dup", "value": "2", "value_encoding": "text"},
        {"name": "bin", "value": "/wA=", "value_encoding": "base64"},
        {"name": "gone", "value": None, "value_encoding": "text"},
    ]


def test_a_message_without_kafka_headers_has_none(
    viewer: APIClient, broker: Broker, topic: str
) -> None:
    produce(broker, topic, Record(0, 1_700_000_000_000, b"k", b"v", ()))
    assert only(viewer, topic)["headers"] is None
