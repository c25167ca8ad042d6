"""DescribeAcls, CreateAcls and DeleteAcls handlers over StaticAccess."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_listener.handlers import KafkaContext
from kafka_listener.messages import decode_request, encode_request
from kafka_listener.schemas import ApiKey
from mqcore.access.authorizer import Subject
from mqcore.access.model import AclEntry, Operation, PatternType, Permission, Principal
from mqcore.access.model import ResourceType as RT

from .test_authorization import ADMIN, OPERATOR, VIEWER, RecordingAccess, send
from .test_authorization import access as access  # noqa: F401 (fixtures)
from .test_authorization import broker as broker  # noqa: F401
from .test_authorization import ctx as ctx  # noqa: F401


def creation(principal: str = "User:alice", rtype: int = 2, name: str = "orders.eu",
             pattern: int = 3, op: int = 4, permission: int = 3, host: str = "*") -> dict:  # fmt: skip
    return {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": host,
        "operation": op,
        "permission_type": permission,
    }


def acl_filter(rtype: int = 1, name: str | None = None, pattern: int = 1,
               principal: str | None = None, op: int = 1, permission: int = 1) -> dict:  # fmt: skip
    return {
        "resource_type_filter": rtype,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": None,
        "operation": op,
        "permission_type": permission,
    }


def create(ctx: KafkaContext, who: Subject, *creations: dict) -> list[tuple[int, Any]]:
    reply = send(ctx, who, ApiKey.CREATE_ACLS, {"creations": list(creations)})
    return [(r["error_code"], r["error_message"]) for r in reply["results"]]


def describe(ctx: KafkaContext, who: Subject, **kwargs: Any) -> dict:
    reply: dict = send(ctx, who, ApiKey.DESCRIBE_ACLS, acl_filter(**kwargs))
    return reply


def test_only_admins_manage_and_describe_acls(ctx: KafkaContext) -> None:
    for who in (VIEWER, OPERATOR):
        (refused,) = create(ctx, who, creation())
        assert refused[0] == 31 and "alter on cluster" in refused[1]
        reply = send(ctx, who, ApiKey.DELETE_ACLS, {"filters": [acl_filter()]})
        assert reply["filter_results"][0]["error_code"] == 31
    assert describe(ctx, VIEWER)["error_code"] == 0  # viewers may DESCRIBE the cluster
    assert describe(ctx, Subject("nobody", None))["error_code"] == 31
    assert ctx.access.authorizer().entries == ()


def test_created_entries_are_stored_under_store_names_and_described_back(
    ctx: KafkaContext, access: RecordingAccess
) -> None:
    results = create(
        ctx,
        ADMIN,
        creation(),
        creation("Role:viewer", RT.TOPIC, "orders.", PatternType.PREFIXED, 4, 2),
        creation("User:bob", RT.GROUP, "app.x", op=int(Operation.READ)),
        creation("User:*", RT.CLUSTER, "kafka-cluster", op=int(Operation.DESCRIBE)),
    )
    assert results == [(0, None)] * 4
    stored = set(access.authorizer().entries)
    assert AclEntry(Principal("Role", "viewer"), RT.TOPIC, "orders|", PatternType.PREFIXED,
                    Operation.WRITE, Permission.DENY) in stored  # fmt: skip
    assert any(e.resource_name == "app|x" for e in stored)
    # The backend audits each creation once; the handler adds nothing.
    assert [a[1] for a in access.audited] == ["acl.create"] * 4
    resources = describe(ctx, ADMIN)["resources"]
    names = {(r["resource_type"], r["resource_name"], r["pattern_type"]) for r in resources}
    assert names == {(2, "orders.eu", 3), (2, "orders.", 4), (3, "app.x", 3),
                     (4, "kafka-cluster", 3)}  # fmt: skip
    # MATCH: every entry that applies to topic orders.eu (the literal and the prefix).
    matched = describe(ctx, ADMIN, rtype=2, name="orders.eu", pattern=2)["resources"]
    assert {r["resource_name"] for r in matched} == {"orders.eu", "orders."}
    literal = describe(ctx, ADMIN, rtype=2, name="orders.eu", pattern=3)["resources"]
    assert [(r["resource_name"], r["acls"]) for r in literal] == [
        ("orders.eu", [{"principal": "User:alice", "host": "*", "operation": 4,
                        "permission_type": 3}])]  # fmt: skip
    by_principal = describe(ctx, ADMIN, principal="User:bob")["resources"]
    assert [r["resource_name"] for r in by_principal] == ["app.x"]
    # A name for any resource type translates per type.
    assert [r["resource_type"] for r in describe(ctx, ADMIN, name="app.x")["resources"]] == [3]


def test_invalid_entries_get_invalid_request_with_a_reason_and_the_others_are_made(
    ctx: KafkaContext,
) -> None:
    results = create(
        ctx,
        ADMIN,
        creation("alice"),  # no User: prefix
        creation("Group:x"),
        creation(rtype=1),  # ANY is for filters
        creation(rtype=6),  # delegation tokens: not Cairn's
        creation(pattern=2),  # MATCH is for filters
        creation(op=1),
        creation(permission=1),
        creation(name="bad|name"),
        creation(rtype=4, name="other-cluster"),
        creation(name="*", pattern=4),
        creation(host=""),
        creation(),
    )
    assert [code for code, _ in results] == [42] * 11 + [0]
    assert all(message for _, message in results[:11])
    assert "User:<name>" in results[0][1] and "principal" in results[0][1]
    assert len(ctx.access.authorizer().entries) == 1


def test_filters_that_are_not_valid_or_name_other_resources(ctx: KafkaContext) -> None:
    reply = describe(ctx, ADMIN, pattern=0)
    assert reply["error_code"] == 42 and "pattern type" in reply["error_message"]
    assert describe(ctx, ADMIN, principal="nobody")["error_code"] == 42
    assert describe(ctx, ADMIN, op=0)["error_code"] == 42
    assert describe(ctx, ADMIN, rtype=7) == {"throttle_time_ms": 0, "error_code": 0,
                                            "error_message": None, "resources": []}  # fmt: skip


def test_delete_returns_what_each_filter_removed(
    ctx: KafkaContext, access: RecordingAccess
) -> None:
    create(ctx, ADMIN, creation(), creation(name="orders.", pattern=4), creation("User:bob"))
    reply = send(ctx, ADMIN, ApiKey.DELETE_ACLS, {"filters": [
        acl_filter(rtype=2, name="orders.eu", pattern=2, principal="User:alice"),
        acl_filter(pattern=0),
        acl_filter(rtype=7),
    ]})  # fmt: skip
    first, invalid, other = reply["filter_results"]
    assert first["error_code"] == 0
    assert sorted((m["resource_name"], m["pattern_type"]) for m in first["matching_acls"]) == [
        ("orders.", 4), ("orders.eu", 3)]  # fmt: skip
    assert invalid["error_code"] == 42 and invalid["error_message"]
    assert other == {"error_code": 0, "error_message": None, "matching_acls": []}
    (left,) = access.authorizer().entries
    assert left.principal == Principal.user("bob")
    assert [a[1] for a in access.audited].count("acl.delete") == 2


@pytest.mark.parametrize("version", [0, 1])
def test_acl_requests_decode_at_every_advertised_version(version: int) -> None:
    request = {"creations": [creation(name="orders.", pattern=4)]}
    raw = encode_request(ApiKey.CREATE_ACLS, version, request)
    decoded = decode_request(ApiKey.CREATE_ACLS, version, raw)
    expected = 4 if version >= 1 else 3  # v0 has no pattern type: LITERAL
    assert decoded["creations"][0]["resource_pattern_type"] == expected
