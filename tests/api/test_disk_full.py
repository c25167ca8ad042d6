"""A store that refuses puts (a full disk) answers sends with 503 problem+json, code
``SERVICE_NOT_AVAILABLE`` and the store's own reason; reads go on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from cairn import runtime
from cairn.runtime import BrokerRuntime
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, make_runtime, send
from tests.support.tmpfs import fill, mounted_tmpfs

REASON = "disk full: the CommitLog partition is 93% used, over the warning ratio 90%"


@pytest.fixture
def broker_runtime(tmp_path: Path) -> Iterator[BrokerRuntime]:
    """The API's runtime with its store (and config files) on a tmpfs of its own."""
    with mounted_tmpfs(tmp_path / "disk", 16 << 20) as disk:
        rt = make_runtime(disk / "store")
        rt.start()
        runtime.install(rt)
        try:
            yield rt
        finally:
            rt.stop()
            runtime.reset()


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


def test_any_write_that_finds_the_disk_full_is_a_503_not_a_500(
    admin: APIClient, broker_runtime: BrokerRuntime
) -> None:
    """A config file written while the disk is full: the topic table (topics.json)."""
    fill(broker_runtime.store_dir.parent)
    response = admin.post("/api/v1/topics", {"name": "late"}, format="json")
    problem = assert_problem(response, 503, field="broker", rule="not_available")
    assert problem["code"] == "SERVICE_NOT_AVAILABLE"
    assert problem["detail"].startswith("disk full: ")
