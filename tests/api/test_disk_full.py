"""A store that refuses puts (a full disk) answers sends with 503 problem+json, code
``SERVICE_NOT_AVAILABLE`` and the store's own reason; reads go on."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from mqcore.broker import Broker
from tests.api.conftest import assert_problem, send

REASON = "disk full: the CommitLog partition is 93% used, over the warning ratio 90%"


def test_a_send_refused_for_a_full_disk_is_a_503_with_the_reason(
    operator: APIClient, broker: Broker, topic: str
) -> None:
    [kept] = send(broker, topic, b"before")
    # A source of its own: the running disk guard and reput lift only theirs.
    broker.store.set_writable(False, REASON, source="test")
    try:
        for body in (
            {"messages": [{"body": "plain"}]},  # the plain round-robin path
            {"messages": [{"body": "keyed", "keys": ["k"], "properties": {"p": "v"}}]},
            {"messages": [{"body": "to a queue", "queue_id": 1}]},
        ):
            response = operator.post(f"/api/v1/topics/{topic}/messages", body, format="json")
            problem = assert_problem(response, 503, field="broker", rule="not_available")
            assert problem["code"] == "SERVICE_NOT_AVAILABLE"
            assert problem["detail"] == f"{REASON} (SERVICE_NOT_AVAILABLE)"
            assert response["Retry-After"] == "1"
        # Reads go on.
        page: Any = operator.get(
            f"/api/v1/topics/{topic}/messages", {"queue_id": kept.queue_id, "offset": 0}
        ).json()
        assert [m["body"] for m in page["messages"]] == ["before"]
    finally:
        broker.store.set_writable(True, "", source="test")
    assert operator.post(
        f"/api/v1/topics/{topic}/messages", {"messages": [{"body": "after"}]}, format="json"
    ).status_code in (200, 201)
