"""authz.py: Kafka's "allowed on some resource of a type" and the resources of names."""

from __future__ import annotations

from kafka_listener.handlers.authz import (
    group_resource,
    may_on_some,
    store_topic_resource,
    topic_resource,
)
from mqcore.access.authorizer import Authorizer, Subject
from mqcore.access.model import AclEntry, Operation, PatternType, Permission, Principal, Resource
from mqcore.access.model import ResourceType as RT

SVC = Subject("svc", None, "10.1.1.1")
WRITE = Operation.WRITE


def entry(name: str, pattern: PatternType = PatternType.LITERAL,
          permission: Permission = Permission.ALLOW, who: str = "User:svc",
          op: Operation = WRITE, host: str = "*") -> AclEntry:  # fmt: skip
    return AclEntry(Principal.parse(who), RT.TOPIC, name, pattern, op, permission, host)


def some(*entries: AclEntry, subject: Subject = SVC) -> bool:
    return may_on_some(Authorizer(entries), subject, WRITE, RT.TOPIC)


def test_an_allow_somewhere_is_enough_unless_denies_cover_it() -> None:
    assert not some()
    assert some(entry("orders|eu"))
    assert some(entry("orders|", PatternType.PREFIXED))
    assert some(entry("*"))
    assert not some(entry("orders|eu"), entry("orders|eu", permission=Permission.DENY))
    assert not some(entry("orders|eu"), entry("ord", PatternType.PREFIXED, Permission.DENY))
    assert not some(entry("orders|", PatternType.PREFIXED),
                    entry("orders", PatternType.PREFIXED, Permission.DENY))  # fmt: skip
    assert not some(entry("orders|eu"), entry("*", permission=Permission.DENY))
    # A literal deny of one name leaves the rest of a prefix, and of other names.
    assert some(entry("orders|", PatternType.PREFIXED),
                entry("orders|", permission=Permission.DENY))  # fmt: skip
    assert some(entry("a"), entry("b"), entry("a", permission=Permission.DENY))


def test_only_entries_for_the_subject_from_its_host_and_covering_the_operation_count() -> None:
    assert not some(entry("t", who="User:other"))
    assert not some(entry("t", host="10.9.9.9"))
    assert some(entry("t", host="10.1.1.1"))
    assert some(entry("t", op=Operation.ALL))
    assert not some(entry("t", op=Operation.READ))
    assert some(entry("t", who="Role:svc-role"), subject=Subject("svc", "svc-role"))
    assert some(entry("t", who="User:*"))


def test_a_role_allowing_it_everywhere_counts_unless_everything_is_denied() -> None:
    operator = Subject("olga", "operator")
    assert some(subject=operator)
    assert not some(subject=Subject("vic", "viewer"))
    assert not some(entry("*", who="Role:operator", permission=Permission.DENY), subject=operator)


def test_resources_use_store_names_and_topic_resources_are_shared_objects() -> None:
    assert topic_resource("orders.eu") == Resource(RT.TOPIC, "orders|eu")
    assert topic_resource("orders.eu") is store_topic_resource("orders|eu")
    assert group_resource("app.x y") == Resource(RT.GROUP, "app|x%20y")
