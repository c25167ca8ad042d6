"""api.authentication: access is decided by the database on every request, even for changes
this process never saw (made here with queryset updates and deletes, which send no model
signals, as another process's changes would)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken, AuditEntry
from tests.api.conftest import assert_problem, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def otto(make_user: Callable[..., Any], broker_runtime: Any) -> APIClient:
    return token_client(make_user("otto", "operator"))


def test_a_token_deleted_elsewhere_stops_working_at_once(otto: APIClient) -> None:
    assert otto.get("/api/v1/topics").status_code == 200
    ApiToken.objects.filter(user=otto.user).update(revoked=timezone.now())  # type: ignore[attr-defined]
    body = assert_problem(otto.get("/api/v1/topics"), 401, rule="invalid_credentials")
    assert body["detail"] == "Invalid token."


def test_a_user_deactivated_elsewhere_is_refused_at_once(otto: APIClient) -> None:
    assert otto.get("/api/v1/topics").status_code == 200
    get_user_model().objects.filter(username="otto").update(is_active=False)
    body = assert_problem(otto.get("/api/v1/topics"), 401)
    assert body["detail"] == "User inactive or deleted."
    get_user_model().objects.filter(username="otto").update(is_active=True)
    assert otto.get("/api/v1/topics").status_code == 200


def test_role_changes_elsewhere_count_from_the_next_request(otto: APIClient) -> None:
    assert otto.post("/api/v1/topics", {"name": "t1"}, format="json").status_code == 201
    membership = get_user_model().groups.through.objects.filter(user__username="otto")
    membership.update(group=Group.objects.get_or_create(name="viewer")[0])
    assert_problem(otto.post("/api/v1/topics", {"name": "t2"}, format="json"), 403, rule="role")
    assert otto.get("/api/v1/topics").status_code == 200
    membership.delete()
    assert_problem(otto.get("/api/v1/topics"), 403, rule="role")
    get_user_model().objects.filter(username="otto").update(is_superuser=True)
    assert otto.get("/api/v1/users").status_code == 200  # superusers are admins


def test_a_bad_or_missing_token_is_401(otto: APIClient) -> None:
    client = APIClient()
    assert_problem(client.get("/api/v1/topics"), 401, rule="not_authenticated")
    client.credentials(HTTP_AUTHORIZATION="Token nope")
    assert_problem(client.get("/api/v1/topics"), 401, rule="invalid_credentials")
    client.credentials(HTTP_AUTHORIZATION="Token a b")
    assert_problem(client.get("/api/v1/topics"), 401, rule="invalid_credentials")


def test_a_user_saved_here_is_seen_at_once(otto: APIClient) -> None:
    assert otto.get("/api/v1/topics").status_code == 200
    user = get_user_model().objects.get(username="otto")
    user.username = "otto2"
    user.save()
    assert otto.post("/api/v1/topics", {"name": "t3"}, format="json").status_code == 201
    assert AuditEntry.objects.get(action="topic.create").username == "otto2"
