"""Status, audit log, users and tokens, session login, createtoken, OpenAPI and docs."""

from __future__ import annotations

import hashlib
import io
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from accounts.models import ApiToken, AuditEntry
from accounts.roles import role_of
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, send

pytestmark = pytest.mark.django_db


# -- status -----------------------------------------------------------------------------------


def test_status(viewer: APIClient, broker: Broker, topic: str) -> None:
    send(broker, topic, b"a", b"b")
    r = viewer.get("/api/v1/status")
    assert r.status_code == 200
    s = r.json()
    assert s["started"] is True and s["broker_name"] == "broker-a"
    assert s["store_size_bytes"] > 0
    assert s["disk_total_bytes"] >= s["disk_used_bytes"] > 0
    assert 0 < s["disk_used_ratio"] <= 1
    assert s["put_total"] == 2 and s["put_tps"] >= 0
    assert set(s["services"]) >= {"reput", "flush", "cleanup", "delay_delivery", "offsets_persist"}
    assert s["services_mode"] == "inline"
    assert s["services"]["reput"]["runs"] >= 1


def test_status_without_a_running_broker_is_503(viewer: APIClient, broker_runtime: Any) -> None:
    broker_runtime.stop()
    assert_problem(viewer.get("/api/v1/status"), 503, rule="not_started")


# -- audit ------------------------------------------------------------------------------------


def test_audit_is_readable_by_operators_and_admins_not_viewers(
    viewer: APIClient, operator: APIClient, admin: APIClient, topic: str
) -> None:
    operator.patch(f"/api/v1/topics/{topic}", {"perm": 4}, format="json")
    assert_problem(viewer.get("/api/v1/audit"), 403, rule="role")
    for client in (operator, admin):
        r = client.get("/api/v1/audit")
        assert r.status_code == 200
        (entry,) = r.json()["results"]
        assert entry["action"] == "topic.update" and entry["target"] == topic
        assert entry["username"] == "otto" and entry["role"] == "operator"
        assert entry["old_value"]["perm"] == 6 and entry["new_value"]["perm"] == 4
        assert entry["timestamp"] > 1_600_000_000_000


def test_audit_filters_and_pages(operator: APIClient) -> None:
    for name in ("a1", "a2", "a3"):
        operator.post("/api/v1/topics", {"name": name}, format="json")
    operator.delete("/api/v1/topics/a2")
    r = operator.get("/api/v1/audit", {"target": "a2"})
    assert [e["action"] for e in r.json()["results"]] == ["topic.delete", "topic.create"]
    r = operator.get("/api/v1/audit", {"action": "topic.create", "limit": 2})
    page = r.json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    assert [e["target"] for e in page["results"]] == ["a3", "a2"]  # newest first
    assert operator.get("/api/v1/audit", {"action": "topic."}).json()["count"] == 4
    assert operator.get("/api/v1/audit", {"username": "nobody"}).json()["count"] == 0
    assert operator.get("/api/v1/audit", {"since": 0, "until": 1}).json()["count"] == 0
    assert_problem(operator.get("/api/v1/audit", {"since": -1}), 400, "since", "range")
    assert_problem(operator.get("/api/v1/audit", {"limit": 0}), 400, "limit", "range")


# -- users, tokens, login ---------------------------------------------------------------------


def test_admin_manages_users(admin: APIClient) -> None:
    r = admin.post(
        "/api/v1/users",
        {"username": "pat", "role": "operator", "password": "long-enough"},
        format="json",
    )
    assert r.status_code == 201, r.content
    assert r.json()["role"] == "operator" and r.json()["has_token"] is False
    assert_problem(
        admin.post("/api/v1/users", {"username": "pat", "role": "viewer"}, format="json"), 409
    )
    assert_problem(
        admin.post("/api/v1/users", {"username": "x", "role": "king"}, format="json"),
        400,
        "role",
        "choice",
    )
    r = admin.patch("/api/v1/users/pat", {"role": "viewer"}, format="json")
    assert r.json()["role"] == "viewer"
    r = admin.post("/api/v1/tokens", {"name": "for-pat", "username": "pat"}, format="json")
    assert r.status_code == 201, r.content
    token = r.json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/topics").status_code == 200
    assert_problem(client.post("/api/v1/topics", {"name": "t"}, format="json"), 403)
    names = [u["username"] for u in admin.get("/api/v1/users").json()["results"]]
    assert "pat" in names and "ada" in names
    assert admin.delete("/api/v1/users/pat").status_code == 204
    assert_problem(admin.get("/api/v1/users/pat"), 404)
    actions = list(
        AuditEntry.objects.filter(target="pat").order_by("id").values_list("action", flat=True)
    )
    assert actions == ["user.create", "user.role", "token.issue", "user.delete"]
    for entry in AuditEntry.objects.all():
        assert "long-enough" not in str(entry.new_value) and token not in str(entry.new_value)


def test_only_admins_manage_users(viewer: APIClient, operator: APIClient, admin: APIClient) -> None:
    for client in (viewer, operator):
        assert_problem(client.get("/api/v1/users"), 403)
        assert_problem(
            client.post("/api/v1/users", {"username": "z", "role": "admin"}, format="json"), 403
        )
    assert_problem(admin.delete("/api/v1/users/ada"), 400, "username", "self")


def test_a_number_where_a_string_belongs_is_refused(admin: APIClient) -> None:
    """JSON numbers are not names or passwords (DRF's CharField would store "86400.0")."""
    r = admin.post("/api/v1/users", {"username": 86400.0, "password": 12345678}, format="json")
    body = assert_problem(r, 400)
    assert "username" in str(body) and "password" in str(body) and "must be a string" in str(body)
    assert not get_user_model().objects.filter(username="86400.0").exists()


def test_superusers_are_admins(broker: Broker) -> None:
    user = get_user_model().objects.create_superuser("root", password="pw")
    assert role_of(user) == "admin"
    client = APIClient()
    client.force_authenticate(user)
    assert client.get("/api/v1/users").status_code == 200


def test_session_login_for_the_console(make_user: Any, broker: Broker) -> None:
    make_user("carol", "operator")
    client = APIClient(enforce_csrf_checks=True)
    assert client.get("/api/v1/auth/me").json() == {
        "authenticated": False,
        "username": None,
        "role": None,
    }
    r = client.post("/api/v1/auth/login", {"username": "carol", "password": "wrong"}, format="json")
    assert_problem(r, 401, rule="invalid_credentials")
    r = client.post(
        "/api/v1/auth/login", {"username": "carol", "password": "pw-carol"}, format="json"
    )
    assert r.status_code == 200 and r.json()["role"] == "operator"
    assert client.get("/api/v1/topics").status_code == 200
    # Unsafe requests in a session need the CSRF token, as Django requires.
    assert_problem(client.post("/api/v1/topics", {"name": "s1"}, format="json"), 403)
    csrf = client.cookies["csrftoken"].value
    r = client.post("/api/v1/topics", {"name": "s1"}, format="json", HTTP_X_CSRFTOKEN=csrf)
    assert r.status_code == 201, r.content
    assert client.post("/api/v1/auth/logout").status_code == 204
    assert_problem(client.get("/api/v1/topics"), 401)


# -- createtoken ------------------------------------------------------------------------------


def _createtoken(*args: str) -> str:
    out = io.StringIO()
    call_command("createtoken", *args, stdout=out)
    return out.getvalue()


def test_createtoken_prints_the_token_alone_on_the_last_line(broker: Broker) -> None:
    output = _createtoken("robot", "--role", "operator")
    token = output.rstrip("\n").splitlines()[-1]
    assert len(token) == 43 and token.replace("-", "").replace("_", "").isalnum()
    user = get_user_model().objects.get(username="robot")
    assert role_of(user) == "operator" and not user.has_usable_password()
    # Stored hashed: the text is nowhere in the token table.
    stored = ApiToken.objects.get(user=user)
    assert stored.digest == hashlib.sha256(token.encode()).hexdigest()
    assert token not in str(list(ApiToken.objects.values()))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.post("/api/v1/topics", {"name": "by-robot"}, format="json").status_code == 201
    # Again: a second token (the first keeps working), role changed; --rotate: a new token,
    # the others stop working.
    again = _createtoken("robot", "--role", "viewer").splitlines()[-1]
    assert again != token and role_of(get_user_model().objects.get(username="robot")) == "viewer"
    assert client.get("/api/v1/topics").status_code == 200
    rotated = _createtoken("robot", "--rotate", "--name", "ci").splitlines()[-1]
    assert rotated not in (token, again)
    assert_problem(client.get("/api/v1/topics"), 401)
    client.credentials(HTTP_AUTHORIZATION=f"Token {rotated}")
    assert client.get("/api/v1/topics").status_code == 200
    actions = list(
        AuditEntry.objects.filter(username="manage.py createtoken")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == [
        "user.create", "token.issue", "user.role", "token.issue", "token.revoke",
        "token.revoke", "token.issue",
    ]  # fmt: skip
    assert AuditEntry.objects.filter(front_end="command").count() == len(actions)


def test_createtoken_defaults_new_users_to_viewer(db: None) -> None:
    _createtoken("watcher")
    assert role_of(get_user_model().objects.get(username="watcher")) == "viewer"


def test_createtoken_rejects_unknown_roles(db: None) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError):
        call_command("createtoken", "x", "--role", "king")


# -- OpenAPI, docs, unknown paths -------------------------------------------------------------


def test_openapi_is_public_json(anonymous: APIClient) -> None:
    r = anonymous.get("/api/v1/openapi.json")
    assert r.status_code == 200
    spec = r.json()
    assert spec["openapi"].startswith("3.")
    for path in (
        "/api/v1/topics",
        "/api/v1/topics/{topic}/messages",
        "/api/v1/messages/{msg_id}",
        "/api/v1/groups/{group}/offsets/reset",
        "/api/v1/config/consumerOffset.json",
        "/api/v1/status",
        "/api/v1/audit",
    ):
        assert path in spec["paths"], path


def test_docs_page_renders_offline(anonymous: APIClient) -> None:
    r = anonymous.get("/api/v1/docs")
    assert r.status_code == 200
    html = r.content.decode()
    assert "/api/v1/topics/{topic}/messages" in html and "openapi.json" in html
    assert "cdn" not in html.lower()


def test_unknown_api_path_is_problem_404(viewer: APIClient) -> None:
    assert_problem(viewer.get("/api/v1/nothing/here"), 404, "path", "not_found")


def test_wrong_method_is_405(viewer: APIClient, operator: APIClient) -> None:
    assert_problem(operator.put("/api/v1/topics", {}, format="json"), 405, rule="method")
