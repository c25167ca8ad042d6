"""The shared authorization decision: deny wins, allow entries grant, roles are defaults."""

from __future__ import annotations

import pytest

from mqcore.access.authorizer import (
    ADMIN,
    OPERATOR,
    VIEWER,
    Authorizer,
    CachedDecisions,
    Subject,
    allowed_on_any,
)
from mqcore.access.backend import LoginRefused, StaticAccess
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
from mqcore.errors import ValidationError

TOPIC = ResourceType.TOPIC
ORDERS = Resource.topic("orders.eu")


def entry(
    principal: str,
    operation: Operation,
    name: str = "orders.",
    pattern: PatternType = PatternType.PREFIXED,
    permission: Permission = Permission.ALLOW,
    rtype: ResourceType = TOPIC,
    host: str = "*",
) -> AclEntry:
    return AclEntry(Principal.parse(principal), rtype, name, pattern, operation, permission, host)


@pytest.mark.parametrize(
    ("role", "operation", "resource", "allowed"),
    [
        (VIEWER, Operation.READ, ORDERS, True),
        (VIEWER, Operation.DESCRIBE, ORDERS, True),
        (VIEWER, Operation.WRITE, ORDERS, False),
        (VIEWER, Operation.READ, Resource.group("billing"), False),  # membership: operator
        (VIEWER, Operation.CREATE, Resource.cluster(), False),
        (OPERATOR, Operation.WRITE, ORDERS, True),
        (OPERATOR, Operation.DELETE, ORDERS, True),
        (OPERATOR, Operation.READ, Resource.group("billing"), True),
        (OPERATOR, Operation.CREATE, Resource.cluster(), True),
        (OPERATOR, Operation.ALTER, Resource.cluster(), False),  # ACLs: admin
        (ADMIN, Operation.ALTER, Resource.cluster(), True),
        (None, Operation.DESCRIBE, ORDERS, False),
    ],
)
def test_roles_are_the_defaults(
    role: str | None, operation: Operation, resource: Resource, allowed: bool
) -> None:
    assert Authorizer().allowed(Subject("u", role), operation, resource) is allowed


def test_an_allow_entry_grants_a_user_without_a_role() -> None:
    acl = Authorizer([entry("User:svc", Operation.WRITE)])
    svc = Subject("svc", None)
    assert acl.allowed(svc, Operation.WRITE, ORDERS)
    assert acl.allowed(svc, Operation.DESCRIBE, ORDERS)  # implied by WRITE
    assert not acl.allowed(svc, Operation.READ, ORDERS)
    assert not acl.allowed(svc, Operation.WRITE, Resource.topic("payments"))
    assert not acl.allowed(Subject("other", None), Operation.WRITE, ORDERS)


def test_deny_wins_over_an_allow_and_over_the_role() -> None:
    acl = Authorizer(
        [
            entry("User:alice", Operation.ALL),
            entry("Role:operator", Operation.DELETE, permission=Permission.DENY),
        ]
    )
    alice = Subject("alice", OPERATOR)
    assert acl.allowed(alice, Operation.WRITE, ORDERS)
    decision = acl.decide(alice, Operation.DELETE, ORDERS)
    assert not decision and "denied to Role:operator" in decision.reason
    assert acl.allowed(alice, Operation.DELETE, Resource.topic("payments"))  # not covered


def test_a_deny_does_not_imply() -> None:
    acl = Authorizer([entry("User:*", Operation.WRITE, permission=Permission.DENY)])
    bob = Subject("bob", VIEWER)
    assert acl.allowed(bob, Operation.DESCRIBE, ORDERS)
    assert not acl.allowed(Subject("carol", OPERATOR), Operation.WRITE, ORDERS)


def test_literal_and_wildcard_names_and_hosts() -> None:
    acl = Authorizer(
        [
            entry("User:dash", Operation.READ, "orders.eu", PatternType.LITERAL),
            entry("User:ops", Operation.READ, "*", PatternType.LITERAL, host="10.0.0.7"),
        ]
    )
    assert acl.allowed(Subject("dash", None), Operation.READ, ORDERS)
    assert not acl.allowed(Subject("dash", None), Operation.READ, Resource.topic("orders.eu2"))
    assert acl.allowed(Subject("ops", None, host="10.0.0.7"), Operation.READ, ORDERS)
    assert not acl.allowed(Subject("ops", None, host="10.0.0.8"), Operation.READ, ORDERS)


def test_anonymous_acts_as_its_principal_and_role() -> None:
    acl = Authorizer([entry("User:ANONYMOUS", Operation.WRITE)])
    anonymous = Subject(None, None)
    assert str(anonymous.principal) == "User:ANONYMOUS"
    assert acl.allowed(anonymous, Operation.WRITE, ORDERS)
    everyone = Authorizer([entry("User:*", Operation.WRITE)])
    assert not everyone.allowed(anonymous, Operation.WRITE, ORDERS)  # * = authenticated users


def test_cached_decisions_follow_the_version() -> None:
    cache = CachedDecisions(Subject("svc", None))
    none = Authorizer(version=1)
    granted = Authorizer([entry("User:svc", Operation.WRITE)], version=2)
    assert not cache.check(none, Operation.WRITE, ORDERS)
    assert not cache.check(none, Operation.WRITE, ORDERS)
    assert cache.check(granted, Operation.WRITE, ORDERS)


def test_parsing_names_the_field_and_rule() -> None:
    assert Operation.parse("describe-configs") is Operation.DESCRIBE_CONFIGS
    assert Operation.DESCRIBE_CONFIGS.label == "describe-configs"
    with pytest.raises(ValidationError) as bad:
        Operation.parse("fly")
    assert (bad.value.field, bad.value.rule) == ("operation", "choice")
    with pytest.raises(ValidationError) as bad:
        Principal.parse("alice")
    assert bad.value.rule == "format"
    with pytest.raises(ValidationError):
        entry("User:x", Operation.READ, "*", PatternType.PREFIXED)
    assert entry("User:x", Operation.READ).as_dict() == {
        "principal": "User:x",
        "host": "*",
        "resource_type": "topic",
        "resource_name": "orders.",
        "pattern_type": "prefixed",
        "operation": "read",
        "permission": "allow",
    }


def test_filters_select_entries_as_kafka_does() -> None:
    literal = entry("User:a", Operation.READ, "orders.eu", PatternType.LITERAL)
    prefixed = entry("User:b", Operation.WRITE, "orders.")
    star = entry("User:c", Operation.READ, "*", PatternType.LITERAL)
    other = entry("User:a", Operation.READ, "pay", PatternType.LITERAL)
    everything = [literal, prefixed, star, other]

    def chosen(**kwargs: object) -> list[AclEntry]:
        selected = AclFilter(**kwargs)  # type: ignore[arg-type]
        return [e for e in everything if selected.matches(e)]

    assert chosen() == everything
    assert chosen(resource_name="orders.eu") == [literal]
    assert chosen(resource_name="orders.eu", pattern="match") == [literal, prefixed, star]
    assert chosen(pattern="prefixed") == [prefixed]
    assert chosen(principal=Principal.parse("User:a")) == [literal, other]
    assert chosen(operation=Operation.WRITE, permission=Permission.ALLOW) == [prefixed]
    with pytest.raises(ValidationError):
        AclFilter(pattern="regex")


def test_static_access_manages_and_audits_entries() -> None:
    access = StaticAccess(users={"root": ("admin", ("pw",))})
    root = Subject("root", "admin", "127.0.0.1", "kafka")
    allow = entry("User:svc", Operation.WRITE)
    before = access.authorizer().version
    assert access.create_acls(root, [allow, allow]) == [None, None]
    assert access.acl_entries(AclFilter()) == [allow]
    assert access.authorizer().version > before
    assert access.authorizer().allowed(Subject("svc", None), Operation.WRITE, ORDERS)
    assert access.delete_acls(root, AclFilter(principal=Principal.parse("User:svc"))) == [allow]
    assert [a[1] for a in access.audited] == ["acl.create", "acl.create", "acl.delete"]
    assert isinstance(access.authenticate_password("root", "nope", "h", "kafka"), LoginRefused)
    assert access.authenticate_password("root", "pw", "h", "kafka") == Subject(
        "root", "admin", "h", "kafka"
    )


def test_allowed_on_any_lets_a_deny_on_either_resource_win() -> None:
    """Topic creation: CREATE on the cluster or on the name; a deny on either refuses."""
    deny = entry("Role:operator", Operation.CREATE, "private-", permission=Permission.DENY)
    authorizer = Authorizer([deny, entry("User:svc", Operation.CREATE, "orders.")])
    operator, svc = Subject("otto", OPERATOR), Subject("svc", None)

    def create(subject: Subject, name: str) -> tuple[bool, bool]:
        found = [
            authorizer.decide(subject, Operation.CREATE, r)
            for r in (Resource.cluster(), Resource.topic(name))
        ]
        decision = allowed_on_any(found)
        return decision.allowed, decision.by_deny

    assert create(operator, "public-x") == (True, False)  # the role's, on the cluster
    assert create(operator, "private-x") == (False, True)  # the deny wins over the cluster
    assert create(svc, "orders.new") == (True, False)  # the allow on the name
    assert create(svc, "payroll") == (False, False)
    assert not allowed_on_any([authorizer.decide(svc, Operation.CREATE, Resource.cluster())])
