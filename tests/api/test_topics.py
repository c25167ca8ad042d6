"""Topics: list, create, get, update, delete; roles, errors, audit."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, send

pytestmark = pytest.mark.django_db


def create(client: APIClient, **body: Any) -> Any:
    return client.post("/api/v1/topics", {"name": "t1", **body}, format="json")


def test_create_get_update_delete_round_trip(operator: APIClient, broker: Broker) -> None:
    r = create(
        operator,
        read_queue_nums=3,
        write_queue_nums=3,
        perm=6,
        order=False,
        attributes={"message.type": "NORMAL"},
    )
    assert r.status_code == 201, r.content
    assert r["Location"] == "/api/v1/topics/t1"
    body = r.json()
    assert body["name"] == "t1"
    assert body["read_queue_nums"] == 3
    assert body["attributes"] == {"message.type": "NORMAL"}
    assert [q["queue_id"] for q in body["queues"]] == [0, 1, 2]
    assert body["message_count"] == 0

    send(broker, "t1", b"a", b"b", queue_id=1)
    r = operator.get("/api/v1/topics/t1")
    assert r.status_code == 200
    q1 = r.json()["queues"][1]
    assert (q1["min_offset"], q1["max_offset"], q1["message_count"]) == (0, 2, 2)
    assert q1["last_store_timestamp"] > 0
    assert r.json()["message_count"] == 2

    r = operator.patch("/api/v1/topics/t1", {"write_queue_nums": 2, "perm": 4}, format="json")
    assert r.status_code == 200, r.content
    assert (r.json()["write_queue_nums"], r.json()["perm"], r.json()["writable"]) == (2, 4, False)
    assert broker.admin.get_topic("t1").perm == 4

    # It still stores 2 messages: the delete needs ?confirm=true (tests/api/test_impact.py).
    assert_problem(operator.delete("/api/v1/topics/t1"), 409, "confirm", "required")
    r = operator.delete("/api/v1/topics/t1?confirm=true")
    assert r.status_code == 204
    assert_problem(operator.get("/api/v1/topics/t1"), 404, "topic", "not_found")


def test_list_has_queue_counts_and_message_totals(
    viewer: APIClient, broker: Broker, topic: str
) -> None:
    send(broker, topic, b"x", b"y", b"z")
    r = viewer.get("/api/v1/topics", {"kind": "normal"})
    assert r.status_code == 200
    page = r.json()
    assert page["count"] == 1 and page["next"] is None
    (row,) = page["results"]
    assert row["name"] == topic
    assert row["queue_count"] == 4
    assert row["message_count"] == 3


def test_list_includes_system_topics_and_pages(viewer: APIClient, broker: Broker) -> None:
    r = viewer.get("/api/v1/topics", {"limit": 2})
    page = r.json()
    assert page["count"] > 2 and len(page["results"]) == 2
    assert "offset=2" in page["next"]
    names = [t["name"] for t in viewer.get("/api/v1/topics", {"limit": 1000}).json()["results"]]
    assert names == sorted(names)
    assert "SCHEDULE_TOPIC_XXXX" in names
    r = viewer.get("/api/v1/topics", {"kind": "system", "search": "schedule"})
    assert [t["name"] for t in r.json()["results"]] == ["SCHEDULE_TOPIC_XXXX"]


def test_duplicate_topic_is_409(operator: APIClient, topic: str) -> None:
    assert_problem(create(operator, name=topic), 409)


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"name": ""}, "name", "blank"),
        ({"name": "bad name"}, "name", "characters"),
        ({"name": "x" * 128}, "name", "max_length"),
        ({"name": "TBW102"}, "name", "system_topic"),
        ({"read_queue_nums": 0}, "read_queue_nums", "range"),
        ({"read_queue_nums": 10**30}, "read_queue_nums", "range"),
        ({"read_queue_nums": "many"}, "read_queue_nums", "type"),
        ({"perm": 8}, "perm", "range"),
        ({"order": "perhaps"}, "order", "type"),
        ({"attributes": ["a"]}, "attributes", "type"),
        ({"attributes": {"queue.type": "Fancy"}}, "attributes.queue.type", "choice"),
        ({"topic_filter_type": "ALL"}, "topic_filter_type", "choice"),
        ({"colour": "blue"}, "colour", "unknown_field"),
    ],
)
def test_create_validation(
    operator: APIClient, body: dict[str, Any], field: str, rule: str
) -> None:
    assert_problem(create(operator, **body), 400, field, rule)


def test_create_requires_a_name(operator: APIClient) -> None:
    r = operator.post("/api/v1/topics", {}, format="json")
    assert_problem(r, 400, "name", "required")


def test_patch_validation(operator: APIClient, topic: str) -> None:
    assert_problem(operator.patch(f"/api/v1/topics/{topic}", {}, format="json"), 400, rule="empty")
    r = operator.patch(f"/api/v1/topics/{topic}", {"name": "other"}, format="json")
    assert_problem(r, 400, "name", "unknown_field")
    r = operator.patch(f"/api/v1/topics/{topic}", {"write_queue_nums": -1}, format="json")
    assert_problem(r, 400, "write_queue_nums", "range")
    assert_problem(operator.patch("/api/v1/topics/nope", {"perm": 6}, format="json"), 404)


def test_system_topics_cannot_be_deleted(operator: APIClient) -> None:
    assert_problem(
        operator.delete("/api/v1/topics/SCHEDULE_TOPIC_XXXX"), 400, "topic", "system_topic"
    )


def test_retry_topic_names_work_in_paths(viewer: APIClient, broker: Broker, group: str) -> None:
    broker.metadata.topics.create_retry_topic(group)
    r = viewer.get(f"/api/v1/topics/%25RETRY%25{group}")
    assert r.status_code == 200
    assert r.json()["kind"] == "retry"


def test_viewer_reads_but_cannot_change(viewer: APIClient, topic: str) -> None:
    assert viewer.get("/api/v1/topics").status_code == 200
    assert viewer.get(f"/api/v1/topics/{topic}").status_code == 200
    assert_problem(create(viewer), 403, rule="role")
    assert_problem(viewer.patch(f"/api/v1/topics/{topic}", {"perm": 6}, format="json"), 403)
    assert_problem(viewer.delete(f"/api/v1/topics/{topic}"), 403)


def test_anonymous_is_401(anonymous: APIClient) -> None:
    r = anonymous.get("/api/v1/topics")
    assert_problem(r, 401, rule="not_authenticated")
    assert r["WWW-Authenticate"] == "Token"
    r = anonymous.get("/api/v1/topics", HTTP_AUTHORIZATION="Token not-a-token")
    assert_problem(r, 401, rule="invalid_credentials")


def test_user_without_role_is_403(make_user: Any, broker: Broker) -> None:
    from tests.api.conftest import token_client

    client = token_client(make_user("nobody", None))
    assert_problem(client.get("/api/v1/topics"), 403, rule="role")


def test_mutations_are_audited_with_old_and_new(operator: APIClient) -> None:
    create(operator, read_queue_nums=2, write_queue_nums=2)
    operator.patch("/api/v1/topics/t1", {"perm": 4}, format="json")
    operator.delete("/api/v1/topics/t1")
    entries = list(AuditEntry.objects.filter(target="t1").order_by("id"))
    assert [e.action for e in entries] == ["topic.create", "topic.update", "topic.delete"]
    created, updated, deleted = entries
    assert created.username == "otto" and created.role == "operator"
    assert created.old_value is None and created.new_value["read_queue_nums"] == 2
    assert (updated.old_value["perm"], updated.new_value["perm"]) == (6, 4)
    assert deleted.old_value["perm"] == 4 and deleted.new_value is None


def test_failed_mutations_are_not_audited(operator: APIClient, topic: str) -> None:
    create(operator, name=topic)  # 409
    assert not AuditEntry.objects.exists()
