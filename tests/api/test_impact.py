"""Destructive changes over REST: the impact first (``?dry_run=true``), a 409 that names what
would be lost or stranded unless ``?confirm=true``, and no confirmation when nothing would
be (an empty topic's delete works as it always did). Against a real store (api conftest)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, send, wait_dispatched

pytestmark = pytest.mark.django_db


def _backlog(broker: Broker, topic: str, group: str) -> None:
    """One message in each of the 4 queues; the group consumed queue 0 only, so it is 3
    messages behind, in queues 1-3 (the issue's example)."""
    for queue_id in range(4):
        send(broker, topic, f"m{queue_id}".encode(), queue_id=queue_id)
    for queue_id in range(4):
        broker.commit_offset(group, topic, queue_id, 1 if queue_id == 0 else 0)


def _stranded(impact: dict[str, Any]) -> list[tuple[int, int]]:
    return [(q["queue_id"], q["messages"]) for q in impact["queues"]]


# -- queue shrink -------------------------------------------------------------------------------


def test_shrinking_read_queues_with_messages_needs_confirmation(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    _backlog(broker, topic, group)
    change = {"read_queue_nums": 1, "write_queue_nums": 1}
    r = operator.patch(f"/api/v1/topics/{topic}", change, format="json")
    body = assert_problem(r, 409, "confirm", "required")
    assert body["type"] == "urn:cairn:problem:confirmation-required"
    impact = body["impact"]
    assert impact["read_queue_nums"] == {"old": 4, "new": 1}
    assert _stranded(impact) == [(1, 1), (2, 1), (3, 1)]
    assert impact["messages"] == 3 and impact["at_risk"] is True
    ((lagging),) = impact["groups"]
    assert lagging["group"] == group and lagging["lag"] == 3
    assert [q["queue_id"] for q in lagging["queues"]] == [1, 2, 3]
    assert "3 messages stranded" in body["detail"] and "?confirm=true" in body["detail"]
    assert broker.admin.get_topic(topic).read_queue_nums == 4  # nothing changed
    assert not AuditEntry.objects.filter(action="topic.update").exists()

    r = operator.patch(f"/api/v1/topics/{topic}?confirm=true", change, format="json")
    assert r.status_code == 200, r.content
    assert broker.admin.get_topic(topic).read_queue_nums == 1
    entry = AuditEntry.objects.get(action="topic.update")
    assert entry.new_value["read_queue_nums"] == 1
    assert entry.new_value["stranded"]["messages"] == 3


def test_shrinking_only_write_queues_or_empty_queues_needs_no_confirmation(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    _backlog(broker, topic, group)
    r = operator.patch(f"/api/v1/topics/{topic}", {"write_queue_nums": 1}, format="json")
    assert r.status_code == 200, r.content
    broker.admin.create_topic("empty", read_queue_nums=8, write_queue_nums=8)
    r = operator.patch("/api/v1/topics/empty", {"read_queue_nums": 2}, format="json")
    assert r.status_code == 200, r.content
    assert broker.admin.get_topic("empty").read_queue_nums == 2


# -- topic delete -------------------------------------------------------------------------------


def test_deleting_an_empty_topic_needs_no_confirmation(operator: APIClient, topic: str) -> None:
    assert operator.delete(f"/api/v1/topics/{topic}").status_code == 204


def test_deleting_a_topic_with_messages_shows_them_and_needs_confirmation(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    _backlog(broker, topic, group)
    dry = operator.delete(f"/api/v1/topics/{topic}?dry_run=true")
    assert dry.status_code == 200, dry.content
    assert dry.json()["dry_run"] is True
    impact = dry.json()["impact"]
    assert _stranded(impact) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert [(g["group"], g["lag"]) for g in impact["groups"]] == [(group, 3)]
    assert broker.metadata.topics.get(topic) is not None

    body = assert_problem(operator.delete(f"/api/v1/topics/{topic}"), 409, "confirm", "required")
    assert body["impact"] == impact | {"groups": body["impact"]["groups"]}  # lag_ms moves on
    assert "4 messages lost" in body["detail"] and f"{group} (3)" in body["detail"]
    assert broker.metadata.topics.get(topic) is not None
    assert_problem(operator.delete(f"/api/v1/topics/{topic}?confirm=maybe"), 400, "confirm")

    assert operator.delete(f"/api/v1/topics/{topic}?confirm=true").status_code == 204
    assert broker.metadata.topics.get(topic) is None
    entry = AuditEntry.objects.get(action="topic.delete")
    assert entry.old_value["impact"]["messages"] == 4


# -- group delete -------------------------------------------------------------------------------


def test_deleting_a_group_behind_needs_confirmation(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    _backlog(broker, topic, group)
    dry = operator.delete(f"/api/v1/groups/{group}?dry_run=true").json()["impact"]
    assert dry["lag"] == 3 and dry["at_risk"] is True
    ((on_topic),) = dry["topics"]
    assert on_topic["topic"] == topic and on_topic["lag"] == 3
    assert [(q["queue_id"], q["lag"], q["committed_offset"]) for q in on_topic["queues"]] == [
        (1, 1, 0),
        (2, 1, 0),
        (3, 1, 0),
    ]
    body = assert_problem(operator.delete(f"/api/v1/groups/{group}"), 409, "confirm", "required")
    assert body["impact"]["lag"] == 3 and "3 messages behind" in body["detail"]
    assert broker.metadata.groups.get(group) is not None
    assert operator.delete(f"/api/v1/groups/{group}?confirm=true").status_code == 204
    assert broker.metadata.groups.get(group) is None
    assert AuditEntry.objects.get(action="group.delete").old_value["impact"]["lag"] == 3


def test_deleting_a_group_that_is_caught_up_needs_no_confirmation(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    send(broker, topic, b"x", queue_id=0)
    broker.commit_offset(group, topic, 0, 1)
    assert operator.delete(f"/api/v1/groups/{group}").status_code == 204


# -- config import ------------------------------------------------------------------------------


def _topics_document(admin: APIClient) -> dict[str, Any]:
    r = admin.get("/api/v1/config/topics.json", {"format": "json"})
    assert r.status_code == 200
    data: dict[str, Any] = r.json()
    return data


def _put(admin: APIClient, document: dict[str, Any], query: str = "") -> Any:
    return admin.put(
        f"/api/v1/config/topics.json{query}",
        json.dumps(document).encode(),
        content_type="application/json",
    )


def test_config_import_dry_run_shows_the_diff_and_the_messages_and_groups_it_affects(
    admin: APIClient, broker: Broker, topic: str, group: str
) -> None:
    _backlog(broker, topic, group)
    broker.admin.create_topic("payments", read_queue_nums=2, write_queue_nums=2)
    before = admin.get("/api/v1/config/topics.json").content
    document = _topics_document(admin)
    table = document["topicConfigTable"]
    del table[topic]
    table["payments"]["perm"] = 4
    table["fresh"] = dict(table["payments"], topicName="fresh", perm=6)

    r = _put(admin, document, "?dry_run=true")
    assert r.status_code == 200, r.content
    answer = r.json()
    assert (answer["applied"], answer["dry_run"]) == (False, True)
    diff = answer["diff"]
    assert (diff["added"], diff["removed"]) == (["fresh"], [topic])
    assert diff["changed"] == [{"name": "payments", "fields": {"perm": {"old": 6, "new": 4}}}]
    ((removed),) = diff["impact"]
    assert removed["change"] == "topic.delete" and removed["topic"] == topic
    assert _stranded(removed) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert [(g["group"], g["lag"]) for g in removed["groups"]] == [(group, 3)]
    assert diff["at_risk"] is True
    assert diff["summary"] == "1 added, 1 removed, 1 changed; 4 messages in removed topics"
    assert admin.get("/api/v1/config/topics.json").content == before  # a dry run
    assert not AuditEntry.objects.exists()

    refused = assert_problem(_put(admin, document), 409, "confirm", "required")
    assert refused["impact"]["removed"] == [topic]
    assert broker.metadata.topics.get(topic) is not None

    applied = _put(admin, document, "?confirm=true")
    assert applied.status_code == 200, applied.content
    assert applied.json()["applied"] is True
    assert applied.json()["diff"]["removed"] == [topic]
    assert "nothing else changed" not in applied.content.decode()
    assert broker.metadata.topics.get(topic) is None
    assert broker.admin.get_topic("payments").perm == 4
    entry = AuditEntry.objects.get(action="config.import")
    assert entry.new_value["diff"]["removed"] == [topic]
    assert entry.new_value["diff"]["impact"][0]["messages"] == 4


def test_config_import_that_loses_nothing_needs_no_confirmation(
    admin: APIClient, broker: Broker
) -> None:
    broker.admin.create_topic("gone", read_queue_nums=2, write_queue_nums=2)
    broker.admin.create_topic("shrunk", read_queue_nums=4, write_queue_nums=4)
    send(broker, "shrunk", b"kept", queue_id=0)
    document = _topics_document(admin)
    del document["topicConfigTable"]["gone"]
    document["topicConfigTable"]["shrunk"]["readQueueNums"] = 1  # queues 1-3 are empty
    r = _put(admin, document)
    assert r.status_code == 200, r.content
    diff = r.json()["diff"]
    assert diff["removed"] == ["gone"] and diff["at_risk"] is False
    assert [i["change"] for i in diff["impact"]] == ["topic.delete", "topic.update"]
    assert diff["summary"] == "0 added, 1 removed, 1 changed"


def test_config_import_that_cuts_read_queues_with_messages_needs_confirmation(
    admin: APIClient, broker: Broker, topic: str, group: str
) -> None:
    _backlog(broker, topic, group)
    document = _topics_document(admin)
    document["topicConfigTable"][topic]["readQueueNums"] = 1
    body = assert_problem(_put(admin, document), 409, "confirm", "required")
    (shrink,) = body["impact"]["impact"]
    assert shrink["change"] == "topic.update" and _stranded(shrink) == [(1, 1), (2, 1), (3, 1)]
    assert "3 messages in cut queues" in body["detail"]


def test_group_and_offset_imports_show_what_they_remove(
    admin: APIClient, broker: Broker, topic: str, group: str
) -> None:
    _backlog(broker, topic, group)
    groups = admin.get("/api/v1/config/subscriptionGroup.json", {"format": "json"}).json()
    del groups["subscriptionGroupTable"][group]
    r = admin.put(
        "/api/v1/config/subscriptionGroup.json?dry_run=true",
        json.dumps(groups).encode(),
        content_type="application/json",
    )
    assert r.status_code == 200, r.content
    diff = r.json()["diff"]
    assert diff["removed"] == [group]
    assert [(i["change"], i["lag"]) for i in diff["impact"]] == [("group.remove", 3)]
    offsets = admin.get("/api/v1/config/consumerOffset.json", {"format": "json"}).json()
    offsets["offsetTable"] = {}
    r = admin.put(
        "/api/v1/config/consumerOffset.json?dry_run=true",
        json.dumps(offsets).encode(),
        content_type="application/json",
    )
    diff = r.json()["diff"]
    assert diff["removed"] == [f"{topic}@{group}"] and diff["at_risk"] is False
    assert [(i["change"], i["group"], i["lag"]) for i in diff["impact"]] == [
        ("offsets.remove", group, 3)
    ]


def test_openapi_documents_dry_run_confirm_and_the_409(anonymous: APIClient) -> None:
    spec = anonymous.get("/api/v1/openapi.json").json()
    put = spec["paths"]["/api/v1/config/topics.json"]["put"]
    assert {"dry_run", "confirm"} <= {p["name"] for p in put["parameters"]}
    assert "409" in put["responses"] and "diff" in put["description"]
    for path, method in (
        ("/api/v1/topics/{topic}", "delete"),
        ("/api/v1/topics/{topic}", "patch"),
        ("/api/v1/groups/{group}", "delete"),
        ("/api/v1/groups/{group}/dlq/{msg_id}/resend", "post"),
    ):
        operation = spec["paths"][path][method]
        assert "confirm" in {p["name"] for p in operation["parameters"]}, path
        problem = operation["responses"]["409"]["content"]["application/problem+json"]
        assert problem["schema"]["$ref"] == "#/components/schemas/ImpactProblem", path
        assert "?confirm=true" in operation["responses"]["409"]["description"], path
    schemas = spec["components"]["schemas"]
    assert {"impact", "field", "rule"} <= set(schemas["ImpactProblem"]["properties"])
    assert "diff" in schemas["ConfigImportResult"]["properties"]


# -- DLQ resend ---------------------------------------------------------------------------------


def test_a_second_dlq_resend_of_the_same_message_needs_confirmation(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    (sent,) = send(broker, topic, b"poison", queue_id=0)
    url = f"/api/v1/groups/{group}/messages/{sent.offset_msg_id}/retry"
    assert operator.post(url, {"delay_level": -1}, format="json").json()["action"] == "DLQ"
    wait_dispatched(broker)
    resend = f"/api/v1/groups/{group}/dlq/{sent.msg_id}/resend"
    first = operator.post(resend)
    assert first.status_code == 200, first.content
    assert first.json()["msg_id"] == sent.msg_id
    entry = AuditEntry.objects.get(action="message.dlq_resend")
    assert entry.target == sent.msg_id  # recorded under the id the lists show
    dlq_record = entry.new_value["dlq_offset_msg_id"]
    assert dlq_record != sent.msg_id and entry.new_value["group"] == group

    again = assert_problem(operator.post(resend), 409, "confirm", "required")
    ((earlier),) = again["impact"]["resent"]
    assert earlier["username"] == "otto" and earlier["topic"] == topic
    assert again["impact"]["msg_id"] == sent.msg_id
    assert f"Message {sent.msg_id} was resent" in again["detail"]
    wait_dispatched(broker)
    assert broker.admin.topic_status(topic).message_count == 2  # the original and one resend
    # The DLQ record's own id finds the same history.
    assert_problem(operator.post(f"/api/v1/groups/{group}/dlq/{dlq_record}/resend"), 409, "confirm")

    confirmed = operator.post(resend + "?confirm=true")
    assert confirmed.status_code == 200, confirmed.content
    wait_dispatched(broker)
    assert broker.admin.topic_status(topic).message_count == 3
    assert AuditEntry.objects.filter(action="message.dlq_resend", target=sent.msg_id).count() == 2
