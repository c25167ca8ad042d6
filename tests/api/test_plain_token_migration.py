"""Migration accounts.0002: tokens kept in clear by DRF's authtoken table become hashed API
tokens that keep working, and the clear rows are gone."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.roles import set_role
from accounts.tokens import digest

pytestmark = pytest.mark.django_db

migration = importlib.import_module("accounts.migrations.0002_hash_plain_tokens")


def test_plain_tokens_become_hashed_and_keep_working(broker_runtime: Any) -> None:
    user = get_user_model().objects.create_user("legacy")
    set_role(user, "viewer")
    key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "created datetime NOT NULL, user_id integer NOT NULL)"
        )
        cursor.execute(
            "INSERT INTO authtoken_token VALUES (%s, '2026-01-02 03:04:05', %s)", [key, user.pk]
        )
    migration.hash_plain_tokens(apps, SimpleNamespace(connection=connection))
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0
    token = ApiToken.objects.get(user=user)
    assert token.digest == digest(key) and token.name == "token"
    assert token.created.year == 2026 and token.created.month == 1
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/topics").status_code == 200


def test_without_the_old_table_it_does_nothing() -> None:
    migration.hash_plain_tokens(apps, SimpleNamespace(connection=connection))
    assert not ApiToken.objects.exists()
