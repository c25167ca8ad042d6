"""DjangoAccess, the AccessBackend the Kafka listener gets: password or token logins, SCRAM
credentials, lockout through login_finished, certificates, audit and counts, ACLs."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from accounts import service
from accounts.access import DjangoAccess
from accounts.models import ActionCount, AuditEntry
from mqcore.access.authorizer import Subject
from mqcore.access.backend import AccessBackend, LoginRefused
from mqcore.access.model import (
    AclEntry,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Principal,
    Resource,
    ResourceType,
)
from tests.accounts.test_service import scram_login

pytestmark = pytest.mark.django_db


@pytest.fixture
def access() -> DjangoAccess:
    return DjangoAccess()


def test_it_is_an_access_backend(access: DjangoAccess) -> None:
    backend: AccessBackend = access  # mypy checks the protocol; this checks the methods
    for name in AccessBackend.__dict__:
        if not name.startswith("_"):
            assert callable(getattr(backend, name)), name


def test_password_or_token_logins(access: DjangoAccess, actor: Subject) -> None:
    service.create_user(actor, "app", "operator", password="app-password")
    token = service.issue_token(actor, "app", "kafka").text
    for secret in ("app-password", token):
        subject = access.authenticate_password("app", secret, "10.2.2.2", "kafka")
        assert subject == Subject("app", "operator", "10.2.2.2", "kafka")
    refused = access.authenticate_password("app", "nope", "10.2.2.2", "kafka")
    assert isinstance(refused, LoginRefused) and not refused.locked
    assert isinstance(access.authenticate_password("ghost", "x", "10.2.2.2", "kafka"), LoginRefused)
    audited = AuditEntry.objects.filter(front_end="kafka", action__startswith="login")
    assert sorted(audited.values_list("action", flat=True)) == [
        "login", "login", "login.failed", "login.failed",
    ]  # fmt: skip
    assert audited.filter(action="login").first().remote_addr == "10.2.2.2"  # type: ignore[union-attr]


def test_scram_failures_lock_out_through_login_finished(
    access: DjangoAccess, actor: Subject, settings: Any
) -> None:
    settings.CAIRN_ACCOUNTS = {**settings.CAIRN_ACCOUNTS, "THROTTLE_AFTER": 0, "LOCKOUT_AFTER": 2}
    service.create_user(actor, "app", "viewer", password="app-password")
    assert access.login_allowed("app", "10.3.3.3") is None
    for _ in range(2):
        assert isinstance(
            access.login_finished("app", "10.3.3.3", "kafka", False, "SCRAM-SHA-512"), LoginRefused
        )
    refused = access.login_allowed("app", "10.3.3.3")
    assert refused is not None and refused.locked
    # Even a good proof now counts as refused.
    late = access.login_finished("app", "10.3.3.3", "kafka", True, "SCRAM-SHA-512")
    assert isinstance(late, LoginRefused) and late.locked
    assert AuditEntry.objects.filter(action="login.lockout", target="app").count() == 1
    service.lift_lockout(actor, "app")
    assert access.login_allowed("app", "10.3.3.3") is None
    assert access.login_finished("app", "10.3.3.3", "kafka", True, "SCRAM-SHA-512") == Subject(
        "app", "viewer", "10.3.3.3", "kafka"
    )


def test_unknown_or_disabled_users_have_no_scram_credentials(
    access: DjangoAccess, actor: Subject
) -> None:
    assert access.scram_user("SCRAM-SHA-256", "ghost") is None
    service.create_user(actor, "tokens-only", "viewer")  # no password, no token yet
    assert access.scram_user("SCRAM-SHA-256", "tokens-only") is None
    token = service.issue_token(actor, "tokens-only", "k").text
    assert scram_login(access, "SCRAM-SHA-256", "tokens-only", token)
    assert access.scram_user("SCRAM-MD5", "tokens-only") is None


def test_certificates_name_enabled_users(access: DjangoAccess, actor: Subject) -> None:
    service.create_user(actor, "edge-01", "operator")
    assert access.subject_for_certificate("edge-01", "10.4.4.4", "kafka") == Subject(
        "edge-01", "operator", "10.4.4.4", "kafka"
    )
    assert access.subject_for_certificate("stranger", "10.4.4.4", "kafka") is None
    service.set_active(actor, "edge-01", False)
    assert access.subject_for_certificate("edge-01", "10.4.4.4", "kafka") is None


def test_audit_count_and_acls_from_the_kafka_side(access: DjangoAccess, actor: Subject) -> None:
    kafka = Subject("app", "admin", "10.5.5.5", "kafka")
    access.audit(kafka, "topic.delete", "topic", "old", old={"partitions": 3})
    entry = AuditEntry.objects.get(action="topic.delete")
    assert (entry.principal, entry.front_end, entry.remote_addr) == (
        "User:app",
        "kafka",
        "10.5.5.5",
    )
    for _ in range(3):
        access.count(kafka, "group.commit")
    assert ActionCount.objects.get(principal="User:app", action="group.commit").count == 3
    deny = AclEntry(
        Principal("Role", "operator"), ResourceType.TOPIC, "audit-", PatternType.PREFIXED,
        Operation.DELETE, Permission.DENY,
    )  # fmt: skip
    assert access.create_acls(kafka, [deny]) == [None]
    assert access.acl_entries(AclFilter(resource_type=ResourceType.TOPIC)) == [deny]
    ops = Subject("otto", "operator", "10.5.5.6", "kafka")
    assert not access.authorizer().allowed(ops, Operation.DELETE, Resource.topic("audit-log"))
    assert access.delete_acls(kafka, AclFilter(permission=Permission.DENY)) == [deny]
    assert access.authorizer().allowed(ops, Operation.DELETE, Resource.topic("audit-log"))
    assert list(
        AuditEntry.objects.filter(target_type="acl")
        .order_by("id")
        .values_list("action", "front_end")
    ) == [("acl.create", "kafka"), ("acl.delete", "kafka")]


def test_createsuperuser_and_changepassword_derive_scram_keys(
    access: DjangoAccess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "root-password-1")
    call_command("createsuperuser", "--noinput", "--username", "root", "--email", "")
    assert scram_login(access, "SCRAM-SHA-512", "root", "root-password-1")
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "root-password-2")
    call_command("changepassword", "root")
    assert not scram_login(access, "SCRAM-SHA-512", "root", "root-password-1")
    assert scram_login(access, "SCRAM-SHA-512", "root", "root-password-2")
