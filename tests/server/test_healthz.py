import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.roles import VIEWER, set_role
from cairn import runtime
from cairn.runtime import BrokerRuntime
from tests.support.tokens import make_token


@pytest.mark.django_db
def test_healthz_answers_json_without_login() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    # Status and counts only: no store path, pid, version or uptime for strangers.
    assert response.json() == {"status": "ok", "problems": 0, "conditions": 0}


@pytest.fixture
def users(db: None, settings: Any) -> dict[str, Any]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    made = {}
    for name, role in (("vera", VIEWER), ("nobody", None)):
        user = get_user_model().objects.create_user(name, password="pw")
        if role:
            set_role(user, role)
        made[name] = user
    return made


def test_healthz_detail_needs_a_login_with_any_role(users: dict[str, Any]) -> None:
    anonymous = Client().get("/healthz?detail=1")
    assert anonymous.status_code == 401
    assert anonymous["Content-Type"].startswith("application/problem+json")
    assert "store_dir" not in anonymous.content.decode()

    no_role = Client()
    no_role.force_login(users["nobody"])
    assert no_role.get("/healthz?detail=1").status_code == 403

    # A session (the console's) or a token (programs).
    viewer = Client()
    viewer.force_login(users["vera"])
    token = make_token(users["vera"])
    for response in (
        viewer.get("/healthz?detail=1"),
        Client().get("/healthz?detail=1", HTTP_AUTHORIZATION=f"Token {token}"),
    ):
        assert response.status_code == 200
        body = response.json()
        assert (body["status"], body["problems"], body["conditions"]) == ("ok", 0, 0)
        assert body["version"]
        assert body["store_dir"].endswith("store")
        assert body["pid"] == os.getpid()
        assert isinstance(body["uptime_s"], float)
        assert "service_state" in body and "services" in body

    # Without ?detail a logged-in user gets the public answer too (one shape for probes).
    assert set(viewer.get("/healthz").json()) == {"status", "problems", "conditions"}
    assert set(viewer.get("/healthz?detail=0").json()) == {"status", "problems", "conditions"}


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
