"""The console's view of what Kafka clients did (issue 21): a record's headers shown as
headers, never the listener's ``__kafka.*`` properties; a group deleted over Kafka gone
from the groups page, its deletion on the audit page."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kafka_listener.mapping import record_to_message
from kafka_listener.record_codec import Record
from mqcore.broker import Broker
from tests.webui.conftest import client_for

pytestmark = pytest.mark.django_db


def test_message_page_shows_kafka_headers_not_reserved_properties(
    broker: Broker, viewer: Any
) -> None:
    broker.admin.create_topic("Orders")
    headers = (("trace", b"t-1"), ("trace", b"t-2"), ("bin", b"\xff"), ("nil", None))
    [sent] = broker.send("Orders", [record_to_message(Record(0, 1, b"k", b"v", headers), 0)])
    broker.store.dispatch_until_caught_up()
    page = client_for(viewer).get(f"/messages/{sent.offset_msg_id}/").content.decode()
    assert "__kafka." not in page
    block = re.search(r'data-testid="kafka-headers">(.*?)</table>', page, re.S)
    assert block is not None
    rows = re.findall(r'<th class="mono">([^<]*)</th><td class="mono break">(.*?)</td>', block[1])
    assert [name for name, _ in rows] == ["trace", "trace", "bin", "nil"]
    assert "t-1" in rows[0][1] and "t-2" in rows[1][1]
    assert "/w==" in rows[2][1] and "(base64)" in rows[2][1]
    assert "null" in rows[3][1]


def test_message_page_of_a_plain_message_has_no_kafka_headers(broker: Broker, viewer: Any) -> None:
    broker.admin.create_topic("Orders")
    [sent] = broker.send("Orders", [record_to_message(Record(0, 1, b"k", b"v", ()), 0)])
    broker.store.dispatch_until_caught_up()
    page = client_for(viewer).get(f"/messages/{sent.offset_msg_id}/").content.decode()
    assert 'data-testid="kafka-headers"' not in page and "Kafka headers" not in page
