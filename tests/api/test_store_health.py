"""The store's health in ``GET /status`` and ``POST /status/acknowledge``: shape, roles,
acknowledging by id and all, unknown ids, the audit log, and the file it persists in."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from cairn.runtime import BrokerRuntime
from mqcore.store.health import FILE_NAME, StoreHealth
from tests.api.conftest import assert_problem

pytestmark = pytest.mark.django_db

QUARANTINE = "quarantine:00000000000004194304"
TOPICS = "config_recovered:topics.json"


def health_of(rt: BrokerRuntime) -> StoreHealth:
    assert rt.store is not None
    return rt.store.health


@pytest.fixture
def reported(broker_runtime: BrokerRuntime) -> StoreHealth:
    """Two open problems and one condition with progress."""
    health = health_of(broker_runtime)
    health.report(
        "quarantine",
        QUARANTINE,
        "CommitLog bytes 4194304..4194560 failed their CRC and were quarantined",
        {"file": "00000000000004194304", "position": 0, "length": 256, "reason": "body CRC"},
    )
    health.report(
        "config_recovered", TOPICS, "topics.json was recovered from topics.json.bak", {"lost": 1}
    )
    health.set_condition(
        "rebuilding",
        "rebuild:consumequeue",
        "Rebuilding ConsumeQueues from the CommitLog",
        {"queues": 8},
        progress=0.25,
    )
    return health


def test_status_of_a_healthy_store(viewer: APIClient) -> None:
    body = viewer.get("/api/v1/status").json()
    assert body["health"] == {"status": "ok", "problems": [], "conditions": [], "acknowledged": []}


def test_status_shows_problems_and_conditions_to_every_role(
    viewer: APIClient, reported: StoreHealth
) -> None:
    health = viewer.get("/api/v1/status").json()["health"]
    assert health["status"] == "degraded"
    quarantine, topics = health["problems"]
    assert quarantine["id"] == QUARANTINE and quarantine["kind"] == "quarantine"
    assert quarantine["summary"].startswith("CommitLog bytes 4194304")
    assert quarantine["detail"] == {
        "file": "00000000000004194304",
        "position": 0,
        "length": 256,
        "reason": "body CRC",
    }
    assert quarantine["first_seen_ms"] > 1_600_000_000_000
    assert set(quarantine) == {"id", "kind", "summary", "detail", "first_seen_ms"}
    assert topics["id"] == TOPICS
    (condition,) = health["conditions"]
    assert condition["progress"] == 0.25 and condition["detail"] == {"queues": 8}
    assert condition["summary"] == "Rebuilding ConsumeQueues from the CommitLog"
    assert health["acknowledged"] == []


def test_a_condition_alone_makes_the_store_degraded_until_it_clears(
    viewer: APIClient, broker_runtime: BrokerRuntime
) -> None:
    health = health_of(broker_runtime)
    health.set_condition("disk_full", "disk", "Disk full: puts are refused")
    body = viewer.get("/api/v1/status").json()["health"]
    assert body["status"] == "degraded" and body["problems"] == []
    assert body["conditions"][0]["progress"] is None
    health.clear_condition("disk")
    assert viewer.get("/api/v1/status").json()["health"]["status"] == "ok"


def test_operator_acknowledges_one_problem_by_id(
    operator: APIClient, viewer: APIClient, reported: StoreHealth, broker_runtime: BrokerRuntime
) -> None:
    r = operator.post("/api/v1/status/acknowledge", {"ids": [QUARANTINE]}, format="json")
    assert r.status_code == 200, r.content
    body = r.json()
    (done,) = body["acknowledged"]
    assert done["id"] == QUARANTINE and done["acknowledged_by"] == "otto"
    assert done["acknowledged_ms"] >= done["first_seen_ms"]
    assert body["already_acknowledged"] == []
    assert [p["id"] for p in body["health"]["problems"]] == [TOPICS]
    health = viewer.get("/api/v1/status").json()["health"]
    assert health["status"] == "degraded"  # the other problem and the condition remain
    assert [p["id"] for p in health["acknowledged"]] == [QUARANTINE]
    assert health["acknowledged"][0]["acknowledged_by"] == "otto"
    # Kept in health.json: a restarted broker (another StoreHealth) still knows who it was.
    assert broker_runtime.store is not None
    raw = json.loads((broker_runtime.store.root / FILE_NAME).read_text())
    kept = {p["id"]: p for p in raw["problems"]}
    assert kept[QUARANTINE]["acknowledged_by"] == "otto"
    assert kept[TOPICS]["acknowledged_ms"] is None

    # Again: nothing changes, it is listed apart, and no second audit entry is written.
    again = operator.post("/api/v1/status/acknowledge", {"ids": [QUARANTINE]}, format="json")
    assert again.status_code == 200
    assert again.json()["acknowledged"] == []
    assert [p["id"] for p in again.json()["already_acknowledged"]] == [QUARANTINE]
    assert AuditEntry.objects.filter(action="problem.acknowledge").count() == 1


def test_admin_acknowledges_all_and_the_store_is_ok_once_conditions_clear(
    admin: APIClient, reported: StoreHealth
) -> None:
    r = admin.post("/api/v1/status/acknowledge", {"all": True}, format="json")
    assert r.status_code == 200, r.content
    body = r.json()
    assert sorted(p["id"] for p in body["acknowledged"]) == sorted([QUARANTINE, TOPICS])
    assert {p["acknowledged_by"] for p in body["acknowledged"]} == {"ada"}
    assert body["health"]["problems"] == []
    assert body["health"]["status"] == "degraded"  # the rebuild still holds
    reported.clear_condition("rebuild:consumequeue")
    assert admin.get("/api/v1/status").json()["health"]["status"] == "ok"
    # Nothing open: acknowledging all again does nothing and is not an error.
    r = admin.post("/api/v1/status/acknowledge", {"all": True}, format="json")
    assert r.status_code == 200 and r.json()["acknowledged"] == []


def test_every_acknowledgement_is_audited_with_the_id_and_summary(
    operator: APIClient, reported: StoreHealth
) -> None:
    operator.post("/api/v1/status/acknowledge", {"all": True}, format="json")
    entries = {e.target: e for e in AuditEntry.objects.filter(action="problem.acknowledge")}
    assert set(entries) == {QUARANTINE, TOPICS}
    entry = entries[QUARANTINE]
    assert entry.username == "otto" and entry.role == "operator"
    assert entry.target_type == "problem"
    assert entry.old_value == {"acknowledged": False}
    assert entry.new_value["summary"].startswith("CommitLog bytes 4194304")
    assert entry.new_value["kind"] == "quarantine"
    assert entry.new_value["detail"]["reason"] == "body CRC"
    assert entry.new_value["acknowledged"] is True and entry.new_value["acknowledged_by"] == "otto"
    # Readable through the audit API, by target.
    page = operator.get("/api/v1/audit", {"target": TOPICS}).json()
    assert [e["action"] for e in page["results"]] == ["problem.acknowledge"]


def test_viewers_may_not_acknowledge(viewer: APIClient, reported: StoreHealth) -> None:
    for body in ({"all": True}, {"ids": [QUARANTINE]}):
        assert_problem(
            viewer.post("/api/v1/status/acknowledge", body, format="json"), 403, rule="role"
        )
    assert len(reported.problems()) == 2
    assert not AuditEntry.objects.exists()


def test_anonymous_may_not_acknowledge(anonymous: APIClient, reported: StoreHealth) -> None:
    r = anonymous.post("/api/v1/status/acknowledge", {"all": True}, format="json")
    assert_problem(r, 401)
    assert len(reported.problems()) == 2


def test_unknown_ids_acknowledge_nothing_and_are_named(
    operator: APIClient, reported: StoreHealth
) -> None:
    r = operator.post(
        "/api/v1/status/acknowledge",
        {"ids": [QUARANTINE, "quarantine:nope", TOPICS, "x"]},
        format="json",
    )
    body = assert_problem(r, 404, "ids[1]", "not_found")
    assert "ids[1] 'quarantine:nope'" in body["detail"] and "ids[3] 'x'" in body["detail"]
    assert len(reported.problems()) == 2
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({}, "ids", "required"),
        ({"all": False}, "all", "required"),
        ({"ids": []}, "ids", "min_length"),
        ({"ids": [QUARANTINE], "all": True}, "all", "exclusive"),
        ({"ids": "quarantine"}, "ids", "type"),
        ({"ids": [""]}, "ids[0]", "blank"),
        ({"ids": ["x" * 301]}, "ids[0]", "max_length"),
        ({"all": "maybe"}, "all", "type"),
        ({"everything": True}, "everything", "unknown_field"),
    ],
)
def test_bad_acknowledgements_are_400_naming_field_and_rule(
    operator: APIClient, reported: StoreHealth, body: dict[str, Any], field: str, rule: str
) -> None:
    r = operator.post("/api/v1/status/acknowledge", body, format="json")
    assert_problem(r, 400, field, rule)
    assert len(reported.problems()) == 2


def test_acknowledge_without_a_running_broker_is_503(
    operator: APIClient, broker_runtime: BrokerRuntime
) -> None:
    broker_runtime.stop()
    r = operator.post("/api/v1/status/acknowledge", {"all": True}, format="json")
    assert_problem(r, 503, rule="not_started")


def test_problems_reported_by_another_process_are_shown_and_acknowledged(
    operator: APIClient, broker_runtime: BrokerRuntime
) -> None:
    """An offline tool or a worker writes health.json; the broker's status reads it."""
    assert broker_runtime.store is not None
    other = StoreHealth(broker_runtime.store.root).load()
    other.report("derived_rebuilt", "rebuilt:cq:orders:0", "ConsumeQueue orders/0 was rebuilt")
    health = operator.get("/api/v1/status").json()["health"]
    assert [p["id"] for p in health["problems"]] == ["rebuilt:cq:orders:0"]
    r = operator.post("/api/v1/status/acknowledge", {"ids": ["rebuilt:cq:orders:0"]}, format="json")
    assert r.status_code == 200
    assert StoreHealth(broker_runtime.store.root).load().status == "ok"


def test_status_lists_the_most_recently_acknowledged_first_and_at_most_twenty(
    operator: APIClient, broker_runtime: BrokerRuntime
) -> None:
    health = health_of(broker_runtime)
    for n in range(25):
        health.report("derived_rebuilt", f"rebuilt:{n:02d}", f"file {n} rebuilt")
        health.acknowledge([f"rebuilt:{n:02d}"], "otto")
    listed = operator.get("/api/v1/status").json()["health"]["acknowledged"]
    assert [p["id"] for p in listed] == [f"rebuilt:{n:02d}" for n in range(24, 4, -1)]


def test_detail_that_json_cannot_hold_is_shown_as_text(
    viewer: APIClient, broker_runtime: BrokerRuntime
) -> None:
    health = health_of(broker_runtime)
    health.set_condition("rebuilding", "r", "rebuilding", {"root": broker_runtime.store_dir})
    (condition,) = viewer.get("/api/v1/status").json()["health"]["conditions"]
    assert condition["detail"] == {"root": str(broker_runtime.store_dir)}
