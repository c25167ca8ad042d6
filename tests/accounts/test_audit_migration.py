"""Migrations accounts 0003 and api 0004: the audit log's model moves from ``api`` to
``accounts`` and an existing database keeps its table, its rows and its content type."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from accounts.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [
    ("api", "0003_auditentry_front_end_auditentry_principal"),
    ("accounts", "0002_hash_plain_tokens"),
]
AFTER = [("api", "0004_move_auditentry_to_accounts"), ("accounts", "0003_auditentry")]


def migrate(targets: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.fixture
def before_the_move() -> Iterator[None]:
    """The database as the last release left it (the model still ``api``'s), then back to
    the latest migrations whatever the test did."""
    migrate(BEFORE)
    ContentType.objects.clear_cache()
    yield
    migrate(AFTER)
    ContentType.objects.clear_cache()


def test_rows_written_before_the_move_are_read_after_it(before_the_move: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO api_auditentry (timestamp, username, role, action, target_type, "
            "target, remote_addr, principal, front_end) VALUES "
            "('2026-11-01 10:00:00', 'root', 'admin', 'topic.create', 'topic', 'orders', "
            "'10.0.0.9', 'User:root', 'rest')"
        )
    migrate(AFTER)
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.action, entry.target, entry.front_end) == (
        "root",
        "topic.create",
        "orders",
        "rest",
    )
    assert AuditEntry._meta.db_table == "api_auditentry"


def test_the_content_type_moves_with_its_permissions(before_the_move: None) -> None:
    from django.contrib.auth.models import Permission

    # The test database's content types were made after its migrations (as on a real one):
    # going back to the release before the move gave the audit log's back to ``api``.
    old = ContentType.objects.get(app_label="api", model="auditentry")
    Permission.objects.create(content_type=old, codename="probe_auditentry", name="probe")
    migrate(AFTER)
    ContentType.objects.clear_cache()
    moved = ContentType.objects.get(pk=old.pk)
    assert (moved.app_label, moved.model) == ("accounts", "auditentry")
    assert not ContentType.objects.filter(app_label="api", model="auditentry").exists()
    assert Permission.objects.get(codename="probe_auditentry").content_type_id == old.pk
    assert moved.model_class() is AuditEntry


def test_a_fresh_database_has_one_audit_table() -> None:
    tables = connection.introspection.table_names()
    assert "api_auditentry" in tables
    assert not [t for t in tables if t.endswith("auditentry") and t != "api_auditentry"]
    AuditEntry.objects.create(username="u", action="a", target_type="t", target="x")
    assert AuditEntry.objects.count() == 1
