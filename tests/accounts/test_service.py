"""accounts.service: each operation does what it says and leaves an audit entry with the
actor's principal, address and front end; tokens are stored hashed; SCRAM keys follow the
password and the tokens (checked with mqcore's ScramExchange as a client would)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts import service
from accounts.access import DjangoAccess
from accounts.models import ApiToken, AuditEntry, ScramKey
from mqcore.access.authorizer import Subject
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
from mqcore.access.scram import MECHANISMS, ScramError, ScramExchange, parse_first
from mqcore.errors import ConflictError, NotFoundError, ValidationError

pytestmark = pytest.mark.django_db


def last_audit() -> AuditEntry:
    entry = AuditEntry.objects.order_by("-id").first()
    assert entry is not None
    return entry


def scram_login(access: DjangoAccess, mechanism: str, username: str, secret: str) -> bool:
    """A whole SCRAM exchange, the client's side computed here (RFC 5802 section 3)."""
    name = MECHANISMS[mechanism]
    first_bare = f"n={username},r=clientnonce123"
    first = parse_first(f"n,,{first_bare}".encode())
    exchange = ScramExchange(mechanism, first, access.scram_user(mechanism, username))
    server_first = exchange.server_first_message().decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
    salted = hashlib.pbkdf2_hmac(name, secret.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", name)
    stored_key = hashlib.new(name, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    try:
        exchange.finish(final)
    except ScramError:
        return False
    return True


def test_create_user_is_audited_with_the_actors_principal_address_and_front_end(
    actor: Subject,
) -> None:
    service.create_user(actor, "svc", None, password="s3cret-pass")
    entry = last_audit()
    assert (entry.action, entry.target, entry.username) == ("user.create", "svc", "root")
    assert (entry.principal, entry.remote_addr, entry.front_end) == (
        "User:root",
        "10.0.0.9",
        "rest",
    )
    assert entry.new_value == {"role": None, "is_active": True}
    with pytest.raises(ConflictError):
        service.create_user(actor, "svc", "viewer")
    with pytest.raises(ValidationError) as bad:
        service.create_user(actor, "other", "boss")
    assert bad.value.field == "role"


def test_role_disable_enable_and_delete(actor: Subject) -> None:
    service.create_user(actor, "u", "viewer")
    service.set_role(actor, "u", "operator")
    assert (last_audit().old_value["role"], last_audit().new_value["role"]) == (
        "viewer",
        "operator",
    )
    service.set_active(actor, "u", False)
    assert last_audit().action == "user.disable"
    assert not get_user_model().objects.get(username="u").is_active
    service.set_active(actor, "u", True)
    assert last_audit().action == "user.enable"
    service.delete_user(actor, "u")
    assert last_audit().action == "user.delete"
    with pytest.raises(NotFoundError):
        service.set_role(actor, "u", "viewer")


def test_tokens_are_stored_hashed_listed_and_revoked(actor: Subject) -> None:
    service.create_user(actor, "svc", "operator")
    issued = service.issue_token(actor, "svc", "ci", timezone.now() + timedelta(days=1))
    assert len(issued.text) >= 40
    assert last_audit().action == "token.issue"
    assert issued.text not in str(last_audit().new_value)
    stored = ApiToken.objects.get(pk=issued.token.pk)
    assert stored.digest == hashlib.sha256(issued.text.encode()).hexdigest()
    assert issued.text not in {
        v for row in ApiToken.objects.values() for v in map(str, row.values())
    }
    assert [t.name for t in service.list_tokens("svc")] == ["ci"]
    service.revoke_token(actor, issued.token.pk)
    assert service.list_tokens("svc")[0].revoked is not None
    assert last_audit().action == "token.revoke"
    with pytest.raises(ValidationError) as bad:
        service.issue_token(actor, "svc", "", None)
    assert bad.value.field == "name"
    with pytest.raises(ValidationError) as bad:
        service.issue_token(actor, "svc", "old", timezone.now() - timedelta(seconds=1))
    assert bad.value.field == "expires"


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_scram_keys_follow_the_password_and_the_tokens(actor: Subject, mechanism: str) -> None:
    access = DjangoAccess()
    service.create_user(actor, "kafka-user", "operator", password="first-password")
    assert scram_login(access, mechanism, "kafka-user", "first-password")
    assert not scram_login(access, mechanism, "kafka-user", "wrong-password")
    service.reset_password(actor, "kafka-user", "second-password")
    assert not scram_login(access, mechanism, "kafka-user", "first-password")
    assert scram_login(access, mechanism, "kafka-user", "second-password")
    issued = service.issue_token(actor, "kafka-user", "kafka", None)
    assert scram_login(access, mechanism, "kafka-user", issued.text)
    assert scram_login(access, mechanism, "kafka-user", "second-password")
    service.revoke_token(actor, issued.token.pk)
    assert not scram_login(access, mechanism, "kafka-user", issued.text)
    # Django's own path (changepassword, createsuperuser use it) derives them too.
    user = get_user_model().objects.get(username="kafka-user")
    user.set_password("third-password")
    user.save()
    assert scram_login(access, mechanism, "kafka-user", "third-password")
    assert ScramKey.objects.filter(user=user, token__isnull=True).count() == len(MECHANISMS)
    # A disabled user has no credentials.
    service.set_active(actor, "kafka-user", False)
    assert access.scram_user(mechanism, "kafka-user") is None


def test_acls_add_list_delete_bump_the_authorizer(actor: Subject) -> None:
    access = DjangoAccess()
    before = access.authorizer().version
    allow = AclEntry(
        Principal.user("svc"), ResourceType.TOPIC, "orders.", PatternType.PREFIXED,
        Operation.WRITE, Permission.ALLOW,
    )  # fmt: skip
    assert service.add_acls(actor, [allow, allow]) == [True, False]
    assert last_audit().action == "acl.create"
    assert access.authorizer().version > before
    svc = Subject("svc", None, "1.2.3.4", "kafka")
    assert access.authorizer().allowed(svc, Operation.WRITE, Resource.topic("orders.eu"))
    assert not access.authorizer().allowed(svc, Operation.WRITE, Resource.topic("billing"))
    assert [e for _, e in service.list_acls(AclFilter())] == [allow]
    gone = service.delete_acls(actor, AclFilter(principal=Principal.user("svc")))
    assert [e for _, e in gone] == [allow]
    assert last_audit().action == "acl.delete"
    assert not access.authorizer().allowed(svc, Operation.WRITE, Resource.topic("orders.eu"))
