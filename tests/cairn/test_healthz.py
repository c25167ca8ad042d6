from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from cairn import runtime
from cairn.runtime import BrokerRuntime


@pytest.mark.django_db
def test_healthz_answers_json_without_login() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["status"] == "ok"
    assert body["version"]
    assert body["store_dir"].endswith("store")
    assert isinstance(body["uptime_s"], float)
    assert (body["problems"], body["conditions"]) == (0, 0)


@pytest.mark.django_db
def test_healthz_refuses_post() -> None:
    assert Client().post("/healthz").status_code == 405


@pytest.fixture
def started(tmp_path: Path) -> Iterator[BrokerRuntime]:
    rt = BrokerRuntime(store_dir=tmp_path / "store", services_mode="inline")
    rt.start()
    runtime.install(rt)
    try:
        yield rt
    finally:
        rt.stop()
        runtime.reset()


@pytest.mark.django_db
def test_healthz_counts_store_problems_and_conditions(started: BrokerRuntime) -> None:
    assert started.store is not None
    health = started.store.health
    body = Client().get("/healthz").json()
    assert (body["status"], body["problems"], body["conditions"]) == ("ok", 0, 0)

    health.report(
        "quarantine",
        "quarantine:00000000000000004096",
        "secret-summary: CommitLog bytes quarantined",
        {"file": "/very/private/path/00000000000000000000"},
    )
    health.set_condition("rebuilding", "rebuild:cq", "rebuilding", progress=0.5)
    response = Client().get("/healthz")
    assert response.status_code == 200  # alive: degraded is not dead
    body = response.json()
    assert (body["status"], body["problems"], body["conditions"]) == ("degraded", 1, 1)
    text = response.content.decode()
    for private in ("quarantine:", "secret-summary", "/very/private/path", "rebuild:cq"):
        assert private not in text  # counts only: what they are needs a login

    health.acknowledge(None, "ops")
    body = Client().get("/healthz").json()
    assert (body["status"], body["problems"], body["conditions"]) == ("degraded", 0, 1)
    health.clear_condition("rebuild:cq")
    body = Client().get("/healthz").json()
    assert (body["status"], body["problems"], body["conditions"]) == ("ok", 0, 0)
