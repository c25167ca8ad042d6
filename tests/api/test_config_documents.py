"""RocketMQ config documents: export (GET) and import (PUT, all or nothing)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from mqcore.broker import Broker
from mqcore.metadata.jsonfile import loads_fastjson
from tests.api.conftest import assert_problem
from tests.mqcore.metadata.support import fixture_text

pytestmark = pytest.mark.django_db

DOCUMENTS = {
    "topics.json": "topicConfigTable",
    "subscriptionGroup.json": "subscriptionGroupTable",
    "consumerOffset.json": "offsetTable",
}
_VERSION = re.compile(r'"dataVersion":\{[^}]*\}')


def put(client: APIClient, name: str, text: str, content_type: str = "application/json") -> Any:
    return client.put(f"/api/v1/config/{name}", text.encode("utf-8"), content_type=content_type)


def without_version(text: str) -> str:
    return _VERSION.sub('"dataVersion":{}', text)


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_import_then_export_round_trips_rocketmqs_own_text(admin: APIClient, name: str) -> None:
    document = fixture_text(name)
    r = put(admin, name, document)
    assert r.status_code == 200, r.content
    assert r.json()["applied"] is True and r.json()["document"] == name
    exported = admin.get(f"/api/v1/config/{name}")
    assert exported.status_code == 200
    assert exported["Content-Type"] == "application/json; charset=utf-8"
    text = exported.content.decode("utf-8")
    # Byte for byte RocketMQ's file, TABs and bare keys included; only the version moved on.
    assert without_version(text) == without_version(document)
    assert '"counter":' in text


def test_consumer_offsets_keep_bare_integer_keys(admin: APIClient, broker: Broker) -> None:
    put(admin, "topics.json", fixture_text("topics.json"))
    put(admin, "consumerOffset.json", fixture_text("consumerOffset.json"))
    text = admin.get("/api/v1/config/consumerOffset.json").content.decode()
    assert '"TopicTest@group_a":{0:250,1:251,2:250,3:249' in text
    assert broker.get_offsets("group_a", "TopicTest") == {
        "TopicTest": {0: 250, 1: 251, 2: 250, 3: 249}
    }
    strict = admin.get("/api/v1/config/consumerOffset.json", {"format": "json"}).json()
    assert strict["offsetTable"]["TopicTest@group_a"] == {"0": 250, "1": 251, "2": 250, "3": 249}


def test_imported_topics_and_groups_are_live(admin: APIClient, broker: Broker) -> None:
    put(admin, "topics.json", fixture_text("topics.json"))
    put(admin, "subscriptionGroup.json", fixture_text("subscriptionGroup.json"))
    assert admin.get("/api/v1/topics/TopicTest").json()["read_queue_nums"] == 4
    assert admin.get("/api/v1/groups/group_a").json()["retry_max_times"] == 4


def test_legacy_4x_documents_are_accepted(admin: APIClient) -> None:
    for name, fixture in [
        ("topics.json", "topics_legacy_4x.json"),
        ("subscriptionGroup.json", "subscriptionGroup_legacy_4x.json"),
        ("consumerOffset.json", "consumerOffset_legacy_4x.json"),
    ]:
        assert put(admin, name, fixture_text(fixture)).status_code == 200, name


def test_plain_json_and_text_plain_are_accepted(admin: APIClient) -> None:
    doc = {
        "topicConfigTable": {
            "Plain": {"topicName": "Plain", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
        }
    }
    assert put(admin, "topics.json", json.dumps(doc)).status_code == 200
    assert put(admin, "topics.json", json.dumps(doc), "text/plain").status_code == 200
    assert admin.get("/api/v1/topics/Plain").status_code == 200


def _bad_topics() -> list[tuple[str, str, str]]:
    good = loads_fastjson(fixture_text("topics.json"))
    cases = []
    for path, value, field, rule in [
        (("TopicTest", "perm"), 9, "topicConfigTable.TopicTest.perm", "range"),
        (("TopicTest", "readQueueNums"), 0, "topicConfigTable.TopicTest.read_queue_nums", "range"),
        (
            ("TopicTest", "readQueueNums"),
            "four",
            "topicConfigTable.TopicTest.readQueueNums",
            "type",
        ),
        (("TopicTest", "topicName"), "Other", "topicConfigTable.TopicTest.topicName", "mismatch"),
    ]:
        doc = json.loads(json.dumps(good))
        doc["topicConfigTable"][path[0]][path[1]] = value
        cases.append((json.dumps(doc), field, rule))
    cases.append(("{not json", "document", "json"))
    cases.append(('{"dataVersion": {}}', "topicConfigTable", "required"))
    cases.append(("[]", "", "type"))
    return cases


@pytest.mark.parametrize(("text", "field", "rule"), _bad_topics())
def test_invalid_document_changes_nothing(
    admin: APIClient, broker: Broker, text: str, field: str, rule: str
) -> None:
    broker.admin.create_topic("Keep", read_queue_nums=2)
    before = admin.get("/api/v1/config/topics.json").content
    r = put(admin, "topics.json", text)
    body = assert_problem(r, 400)
    if field:
        assert body["field"] == field, body
    assert body["rule"] == rule, body
    assert admin.get("/api/v1/config/topics.json").content == before
    assert broker.admin.get_topic("Keep").read_queue_nums == 2
    assert not AuditEntry.objects.filter(action="config.import").exists()


@pytest.mark.parametrize(
    ("name", "text", "rule"),
    [
        ("consumerOffset.json", '{"offsetTable":{"NoSeparator":{0:1}}}', "pattern"),
        ("consumerOffset.json", '{"offsetTable":{"T@g":{0:-3}}}', "range"),
        ("consumerOffset.json", '{"offsetTable":{"T@g":{"x":1}}}', None),
        (
            "subscriptionGroup.json",
            '{"subscriptionGroupTable":{"g":{"groupName":"g","retryQueueNums":5000}}}',
            "range",
        ),
        (
            "subscriptionGroup.json",
            '{"subscriptionGroupTable":{"g":{"groupName":"g","groupRetryPolicy":{"type":"NEVER"}}}}',
            "choice",
        ),
    ],
)
def test_invalid_offsets_and_groups_documents(
    admin: APIClient, name: str, text: str, rule: str | None
) -> None:
    before = admin.get(f"/api/v1/config/{name}").content
    body = assert_problem(put(admin, name, text), 400)
    if rule:
        assert body["rule"] == rule, body
    assert body["field"], body
    assert admin.get(f"/api/v1/config/{name}").content == before


def test_empty_body_is_400(admin: APIClient) -> None:
    assert_problem(put(admin, "topics.json", ""), 400, "body", "empty")


def test_deeply_nested_document_is_400(admin: APIClient) -> None:
    assert_problem(put(admin, "topics.json", "[" * 100_000), 400, "document", "json")


def test_oversize_document_is_413(admin: APIClient, settings: Any) -> None:
    settings.CAIRN_API = {**settings.CAIRN_API, "MAX_REQUEST_BYTES": 100}
    body = assert_problem(put(admin, "topics.json", fixture_text("topics.json")), 413)
    assert body["rule"] == "max_request_bytes"


def test_import_is_admin_only_and_export_is_for_every_role(
    viewer: APIClient, operator: APIClient, admin: APIClient
) -> None:
    text = fixture_text("topics.json")
    for client in (viewer, operator):
        assert_problem(put(client, "topics.json", text), 403, rule="role")
        assert client.get("/api/v1/config/topics.json").status_code == 200
    assert put(admin, "topics.json", text).status_code == 200


def test_import_is_audited_with_both_documents(admin: APIClient) -> None:
    put(admin, "consumerOffset.json", fixture_text("consumerOffset.json"))
    entry = AuditEntry.objects.get(action="config.import")
    assert entry.target == "consumerOffset.json" and entry.username == "ada"
    assert entry.old_value["offsetTable"] == {}
    assert entry.new_value["offsetTable"]["TopicTest@group_a"]["0"] == 250
