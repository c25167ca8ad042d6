"""Groups: CRUD, lag, offsets (read and commit), reset with dry run, retry and DLQ resend."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, send, wait_dispatched

pytestmark = pytest.mark.django_db


def test_group_crud(operator: APIClient, broker: Broker) -> None:
    r = operator.post(
        "/api/v1/groups",
        {"name": "g1", "retry_max_times": 3, "consume_message_orderly": True},
        format="json",
    )
    assert r.status_code == 201, r.content
    assert r["Location"] == "/api/v1/groups/g1"
    assert r.json()["retry_max_times"] == 3 and r.json()["consume_message_orderly"] is True
    assert r.json()["retry_queue_nums"] == 1  # RocketMQ's default
    r = operator.get("/api/v1/groups/g1")
    assert r.status_code == 200 and r.json()["name"] == "g1" and r.json()["system"] is False
    r = operator.patch(
        "/api/v1/groups/g1",
        {"consume_enable": False, "group_retry_policy": {"type": "EXPONENTIAL"}},
        format="json",
    )
    assert r.status_code == 200, r.content
    assert r.json()["consume_enable"] is False
    assert r.json()["group_retry_policy"]["type"] == "EXPONENTIAL"
    names = [g["name"] for g in operator.get("/api/v1/groups", {"limit": 1000}).json()["results"]]
    assert "g1" in names and "TOOLS_CONSUMER" in names
    assert operator.delete("/api/v1/groups/g1").status_code == 204
    assert_problem(operator.get("/api/v1/groups/g1"), 404, "group", "not_found")
    actions = list(
        AuditEntry.objects.filter(target="g1").order_by("id").values_list("action", flat=True)
    )
    assert actions == ["group.create", "group.update", "group.delete"]
    update = AuditEntry.objects.get(action="group.update")
    assert (update.old_value["consume_enable"], update.new_value["consume_enable"]) == (True, False)


@pytest.mark.parametrize(
    ("body", "status", "field", "rule"),
    [
        ({"name": "bad group"}, 400, "name", "characters"),
        ({"name": "g", "retry_queue_nums": 2000}, 400, "retry_queue_nums", "range"),
        ({"name": "g", "retry_max_times": -1}, 400, "retry_max_times", "range"),
        (
            {"name": "g", "group_retry_policy": {"type": "SOMETIMES"}},
            400,
            "group_retry_policy.type",
            "choice",
        ),
        ({"name": "g", "group_retry_policy": "x"}, 400, "group_retry_policy", "type"),
        ({"name": "g", "shoe_size": 4}, 400, "shoe_size", "unknown_field"),
        ({"name": "TOOLS_CONSUMER"}, 409, None, None),
    ],
)
def test_group_create_errors(
    operator: APIClient, body: dict[str, Any], status: int, field: str | None, rule: str | None
) -> None:
    assert_problem(operator.post("/api/v1/groups", body, format="json"), status, field, rule)


def test_system_groups_cannot_be_deleted(operator: APIClient) -> None:
    assert_problem(operator.delete("/api/v1/groups/TOOLS_CONSUMER"), 400, rule="system_group")


def test_viewer_reads_groups_but_cannot_change_them(viewer: APIClient, group: str) -> None:
    assert viewer.get(f"/api/v1/groups/{group}").status_code == 200
    assert viewer.get(f"/api/v1/groups/{group}/lag").status_code == 200
    assert viewer.get(f"/api/v1/groups/{group}/offsets").status_code == 200
    assert_problem(viewer.post("/api/v1/groups", {"name": "x"}, format="json"), 403)
    assert_problem(
        viewer.patch(f"/api/v1/groups/{group}", {"consume_enable": False}, format="json"), 403
    )
    assert_problem(viewer.delete(f"/api/v1/groups/{group}"), 403)
    assert_problem(
        viewer.put(f"/api/v1/groups/{group}/offsets", {"offsets": []}, format="json"), 403
    )
    assert_problem(
        viewer.post(
            f"/api/v1/groups/{group}/offsets/reset", {"topic": "t", "to": "latest"}, format="json"
        ),
        403,
    )


def test_lag_per_queue_and_summary(
    viewer: APIClient, broker: Broker, topic: str, group: str
) -> None:
    send(broker, topic, b"a", b"b", b"c", queue_id=0)
    send(broker, topic, b"d", queue_id=1)
    broker.commit_offset(group, topic, 0, 1)
    r = viewer.get(f"/api/v1/groups/{group}/lag")
    assert r.status_code == 200
    body = r.json()
    (t,) = body["topics"]
    assert t["topic"] == topic and t["lag"] == 3
    q0, q1 = t["queues"][:2]
    assert (q0["broker_offset"], q0["consumer_offset"], q0["lag"]) == (3, 1, 2)
    assert (q1["consumer_offset"], q1["lag"]) == (None, 1)
    assert q0["lag_ms"] >= 0 and q0["oldest_unconsumed_timestamp"] > 0
    assert body["summary"]["total_lag"] == 3
    assert (
        body["summary"]["max_lag"],
        body["summary"]["max_lag_topic"],
        body["summary"]["max_lag_queue_id"],
    ) == (2, topic, 0)
    assert (
        viewer.get(f"/api/v1/groups/{group}/lag", {"topic": topic}).json()["summary"]["total_lag"]
        == 3
    )
    assert_problem(viewer.get(f"/api/v1/groups/{group}/lag", {"topic": "nope"}), 404, "topic")
    assert_problem(viewer.get("/api/v1/groups/nope/lag"), 404, "group")


def test_commit_and_read_offsets(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    r = operator.put(
        f"/api/v1/groups/{group}/offsets",
        {
            "offsets": [
                {"topic": topic, "queue_id": 0, "offset": 5},
                {"topic": topic, "queue_id": 3, "offset": 7},
            ]
        },
        format="json",
    )
    assert r.status_code == 200, r.content
    assert r.json()["offsets"] == [
        {"topic": topic, "queue_id": 0, "offset": 5},
        {"topic": topic, "queue_id": 3, "offset": 7},
    ]
    assert broker.get_offsets(group, topic) == {topic: {0: 5, 3: 7}}
    r = operator.get(f"/api/v1/groups/{group}/offsets", {"topic": topic})
    assert r.json() == {
        "group": group,
        "offsets": [
            {"topic": topic, "queue_id": 0, "offset": 5},
            {"topic": topic, "queue_id": 3, "offset": 7},
        ],
    }
    entry = AuditEntry.objects.get(action="group.offsets.commit")
    assert entry.old_value[0]["offset"] is None and entry.new_value[0]["offset"] == 5


@pytest.mark.parametrize(
    ("entry", "status", "field", "rule"),
    [
        ({"queue_id": 0, "offset": -1}, 400, "offsets[0].offset", "range"),
        ({"queue_id": -1, "offset": 0}, 400, "offsets[0].queue_id", "range"),
        ({"queue_id": 2**40, "offset": 0}, 400, "offsets[0].queue_id", "range"),
        ({"queue_id": 4, "offset": 0}, 400, "offsets[0].queue_id", "range"),
        ({"queue_id": 0, "offset": "x"}, 400, "offsets[0].offset", "type"),
        ({"queue_id": 0, "offset": 1, "topic": "nope"}, 404, "offsets[0].topic", "not_found"),
    ],
)
def test_commit_errors_change_nothing(
    operator: APIClient,
    broker: Broker,
    topic: str,
    group: str,
    entry: dict[str, Any],
    status: int,
    field: str,
    rule: str,
) -> None:
    good = {"topic": topic, "queue_id": 1, "offset": 1}
    r = operator.put(
        f"/api/v1/groups/{group}/offsets",
        {"offsets": [good, {"topic": topic, **entry}]},
        format="json",
    )
    body = assert_problem(r, status, field.replace("[0]", "[1]"), rule)
    assert body
    assert broker.get_offsets(group, topic) == {topic: {}}


def test_offsets_of_unknown_group_is_404(operator: APIClient, topic: str) -> None:
    assert_problem(operator.get("/api/v1/groups/nope/offsets"), 404, "group")
    r = operator.put(
        "/api/v1/groups/nope/offsets",
        {"offsets": [{"topic": topic, "queue_id": 0, "offset": 0}]},
        format="json",
    )
    assert_problem(r, 404, "group")


def test_reset_dry_run_then_apply(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    send(broker, topic, b"a", b"b", b"c", queue_id=0)
    broker.commit_offset(group, topic, 0, 3)
    url = f"/api/v1/groups/{group}/offsets/reset"
    r = operator.post(url, {"topic": topic, "to": "earliest", "dry_run": True}, format="json")
    assert r.status_code == 200, r.content
    q0 = r.json()["queues"][0]
    assert (q0["old_offset"], q0["new_offset"], q0["lag_before"], q0["lag_after"]) == (3, 0, 0, 3)
    assert r.json()["dry_run"] is True
    assert broker.get_offsets(group, topic)[topic][0] == 3
    assert not AuditEntry.objects.filter(action="group.offsets.reset").exists()
    r = operator.post(
        url,
        {"topic": topic, "to": "offsets", "offsets": [{"queue_id": 0, "offset": 1}]},
        format="json",
    )
    assert r.status_code == 200
    assert broker.get_offsets(group, topic)[topic][0] == 1
    entry = AuditEntry.objects.get(action="group.offsets.reset")
    assert entry.old_value[0]["offset"] == 3 and entry.new_value["offsets"][0]["offset"] == 1


def test_reset_to_timestamp_and_latest(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    send(broker, topic, b"a", queue_id=0)
    middle = broker.clock.now_ms() + 1
    import time

    time.sleep(0.01)
    send(broker, topic, b"b", queue_id=0)
    url = f"/api/v1/groups/{group}/offsets/reset"
    r = operator.post(url, {"topic": topic, "to": "timestamp", "timestamp": middle}, format="json")
    assert r.json()["queues"][0]["new_offset"] == 1
    r = operator.post(url, {"topic": topic, "to": "latest"}, format="json")
    assert r.json()["queues"][0]["new_offset"] == 2


@pytest.mark.parametrize(
    ("body", "status", "field", "rule"),
    [
        ({"to": "earliest"}, 400, "topic", "required"),
        ({"topic": "orders", "to": "sometime"}, 400, "to", "choice"),
        ({"topic": "orders", "to": "timestamp"}, 400, "timestamp", "required"),
        ({"topic": "orders", "to": "earliest", "timestamp": 5}, 400, "timestamp", "exclusive"),
        ({"topic": "orders", "to": "timestamp", "timestamp": -5}, 400, "timestamp", "range"),
        (
            {"topic": "orders", "to": "offsets", "offsets": [{"queue_id": 9, "offset": 0}]},
            400,
            None,
            None,
        ),
        ({"topic": "orders", "to": "latest", "dry_run": "maybe"}, 400, "dry_run", "type"),
        ({"topic": "nope", "to": "latest"}, 404, "topic", "not_found"),
    ],
)
def test_reset_errors(
    operator: APIClient,
    topic: str,
    group: str,
    body: dict[str, Any],
    status: int,
    field: str | None,
    rule: str | None,
) -> None:
    assert_problem(
        operator.post(f"/api/v1/groups/{group}/offsets/reset", body, format="json"),
        status,
        field,
        rule,
    )


def test_retry_then_dlq_then_resend(
    operator: APIClient, broker: Broker, topic: str, group: str
) -> None:
    (sent,) = send(broker, topic, b"fragile", queue_id=0)
    url = f"/api/v1/groups/{group}/messages/{sent.offset_msg_id}/retry"
    r = operator.post(url, {"delay_level": 1}, format="json")
    assert r.status_code == 200, r.content
    assert r.json()["action"] == "RETRY" and r.json()["reconsume_times"] == 1
    assert r.json()["result"]["msg_id"] == sent.msg_id
    r = operator.post(url, {"delay_level": -1}, format="json")
    assert r.json()["action"] == "DLQ"
    wait_dispatched(broker)
    dlq = broker.store.max_offset(f"%DLQ%{group}", 0)
    assert dlq == 1
    r = operator.post(f"/api/v1/groups/{group}/dlq/{sent.msg_id}/resend")
    assert r.status_code == 200, r.content
    assert r.json()["topic"] == topic and r.json()["msg_id"] == sent.msg_id
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["message.retry", "message.retry", "message.dlq_resend"]


def test_retry_and_resend_errors(
    operator: APIClient, viewer: APIClient, broker: Broker, topic: str, group: str
) -> None:
    (sent,) = send(broker, topic, b"x", queue_id=0)
    assert_problem(operator.post(f"/api/v1/groups/nope/messages/{sent.msg_id}/retry"), 404, "group")
    assert_problem(
        operator.post(f"/api/v1/groups/{group}/messages/{'0' * 32}/retry"), 404, "msg_id"
    )
    assert_problem(
        operator.post(f"/api/v1/groups/{group}/messages/zz/retry"), 400, "msg_id", "format"
    )
    assert_problem(
        operator.post(
            f"/api/v1/groups/{group}/messages/{sent.msg_id}/retry",
            {"delay_level": -2},
            format="json",
        ),
        400,
        "delay_level",
        "range",
    )
    assert_problem(operator.post(f"/api/v1/groups/{group}/dlq/{sent.msg_id}/resend"), 404)
    assert_problem(viewer.post(f"/api/v1/groups/{group}/messages/{sent.msg_id}/retry"), 403)
    assert_problem(viewer.post(f"/api/v1/groups/{group}/dlq/{sent.msg_id}/resend"), 403)
