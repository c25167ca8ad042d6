"""ACL entries over REST (``/api/v1/acls``, admin only) and REST decided by them: a prefixed
allow lets a user with no role send, a deny wins over the role, group operations too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, token_client

pytestmark = pytest.mark.django_db

SEND = {"messages": [{"body": "x"}]}


def entry(
    principal: str, name: str, operation: str, permission: str = "allow", **more: str
) -> dict[str, str]:
    return {
        "principal": principal,
        "resource_type": more.pop("resource_type", "topic"),
        "resource_name": name,
        "operation": operation,
        "permission": permission,
        **more,
    }


def add(admin: APIClient, *entries: dict[str, str]) -> Any:
    r = admin.post("/api/v1/acls", {"entries": list(entries)}, format="json")
    assert r.status_code == 201, r.content
    return r.json()


@pytest.fixture
def topics(broker: Broker) -> list[str]:
    names = ["orders-eu", "orders-us", "billing"]
    for name in names:
        broker.admin.create_topic(name, read_queue_nums=1, write_queue_nums=1)
    return names


def test_a_prefixed_allow_lets_a_user_with_no_role_send(
    admin: APIClient, make_user: Callable[..., Any], topics: list[str]
) -> None:
    svc = token_client(make_user("svc", None))
    assert_problem(svc.post("/api/v1/topics/orders-eu/messages", SEND, format="json"), 403)
    created = add(admin, entry("User:svc", "orders-", "write", pattern_type="prefixed"))
    assert created["created"] == 1 and created["entries"][0]["id"] > 0
    assert svc.post("/api/v1/topics/orders-eu/messages", SEND, format="json").status_code == 200
    assert svc.post("/api/v1/topics/orders-us/messages", SEND, format="json").status_code == 200
    body = assert_problem(svc.post("/api/v1/topics/billing/messages", SEND, format="json"), 403)
    assert "not allowed to User:svc (no role)" in body["detail"]
    # Writing implies describing, not reading; nothing else opens up.
    assert svc.get("/api/v1/topics/orders-eu").status_code == 200
    assert_problem(svc.get("/api/v1/topics/orders-eu/messages?queue_id=0"), 403)
    assert_problem(svc.get("/api/v1/topics"), 403)
    # A read-only dashboard user: read on every topic.
    add(admin, entry("User:svc", "*", "read"))
    assert svc.get("/api/v1/topics/billing/messages?queue_id=0").status_code == 200


def test_a_deny_wins_over_the_role_and_over_an_allow(
    admin: APIClient, operator: APIClient, topics: list[str]
) -> None:
    assert (
        operator.post("/api/v1/topics/orders-eu/messages", SEND, format="json").status_code == 200
    )
    add(
        admin,
        entry("User:otto", "orders-", "all", pattern_type="prefixed"),
        entry("Role:operator", "orders-eu", "write", "deny"),
    )
    body = assert_problem(
        operator.post("/api/v1/topics/orders-eu/messages", SEND, format="json"), 403, rule="role"
    )
    assert "denied to Role:operator by an ACL" in body["detail"]
    assert (
        operator.post("/api/v1/topics/orders-us/messages", SEND, format="json").status_code == 200
    )
    # A deny of reading on a host other than the client's does not apply.
    add(admin, entry("User:otto", "orders-us", "read", "deny", host="10.9.9.9"))
    assert operator.get("/api/v1/topics/orders-us/messages?queue_id=0").status_code == 200
    add(admin, entry("User:otto", "orders-us", "read", "deny", host="127.0.0.1"))
    assert_problem(operator.get("/api/v1/topics/orders-us/messages?queue_id=0"), 403)


def test_group_operations_are_decided_by_entries_too(
    admin: APIClient, operator: APIClient, broker: Broker, topics: list[str]
) -> None:
    broker.admin.create_group("billing-app")
    reset = {"topic": "orders-eu", "to": "earliest"}
    url = "/api/v1/groups/billing-app/offsets/reset"
    assert operator.post(url, reset, format="json").status_code == 200
    add(
        admin,
        entry(
            "User:otto", "billing-", "read", "deny", resource_type="group", pattern_type="prefixed"
        ),
    )
    assert_problem(operator.post(url, reset, format="json"), 403)
    add(admin, entry("Role:operator", "billing-app", "delete", "deny", resource_type="group"))
    assert_problem(operator.delete("/api/v1/groups/billing-app"), 403)
    assert operator.get("/api/v1/groups/billing-app").status_code == 200  # describe: the role's


def test_list_filter_and_delete(admin: APIClient) -> None:
    add(
        admin,
        entry("User:svc", "orders-", "write", pattern_type="prefixed"),
        entry("User:svc", "orders-eu", "read"),
        entry("User:dash", "*", "read"),
        entry("Role:viewer", "secret", "read", "deny"),
    )
    listed = admin.get("/api/v1/acls").json()
    assert listed["count"] == 4
    by_principal = admin.get("/api/v1/acls?principal=User:svc").json()["results"]
    assert {e["resource_name"] for e in by_principal} == {"orders-", "orders-eu"}
    # match: every entry that applies to a topic named orders-eu.
    matching = admin.get(
        "/api/v1/acls?resource_type=topic&resource_name=orders-eu&pattern_type=match"
    ).json()["results"]
    assert {(e["principal"], e["resource_name"]) for e in matching} == {
        ("User:svc", "orders-"),
        ("User:svc", "orders-eu"),
        ("User:dash", "*"),
    }
    one = by_principal[0]["id"]
    gone = admin.delete(f"/api/v1/acls?id={one}").json()
    assert gone["deleted"] == 1 and gone["entries"][0]["id"] == one
    gone = admin.delete("/api/v1/acls?permission=deny").json()
    assert [e["principal"] for e in gone["entries"]] == ["Role:viewer"]
    assert admin.get("/api/v1/acls").json()["count"] == 2
    # Adding an equal entry again keeps one.
    again = add(admin, entry("User:dash", "*", "read"))
    assert again["created"] == 0
    assert admin.get("/api/v1/acls").json()["count"] == 2
    audited = AuditEntry.objects.filter(target_type="acl").order_by("id")
    assert [e.action for e in audited] == ["acl.create"] * 4 + ["acl.delete"] * 2
    first = audited[0]
    assert (first.principal, first.front_end, first.remote_addr, first.username) == (
        "User:ada",
        "rest",
        "127.0.0.1",
        "ada",
    )
    assert first.new_value["resource_name"] == "orders-"


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"entries": [entry("alice", "t", "read")]}, "entries[0].principal", "format"),
        ({"entries": [entry("User:a", "t", "fly")]}, "entries[0].operation", "choice"),
        ({"entries": [entry("User:a", "t", "read", "maybe")]}, "entries[0].permission", "choice"),
        (
            {"entries": [entry("User:a", "*", "read", pattern_type="prefixed")]},
            "entries[0].resource_name",
            "prefix",
        ),
        (
            {"entries": [entry("User:a", "t", "read", resource_type="planet")]},
            "entries[0].resource_type",
            "choice",
        ),
        ({"entries": []}, "entries", None),
        ({"entries": [entry("User:a", "t", "read")], "extra": 1}, "extra", None),
    ],
)
def test_bad_entries_are_400_naming_the_field(
    admin: APIClient, body: dict[str, Any], field: str, rule: str | None
) -> None:
    assert_problem(admin.post("/api/v1/acls", body, format="json"), 400, field, rule)


def test_delete_needs_a_filter_and_bad_filters_are_400(admin: APIClient) -> None:
    assert_problem(admin.delete("/api/v1/acls"), 400, "id", "required")
    assert_problem(admin.get("/api/v1/acls?principal=bob"), 400, "principal", "format")
    assert_problem(admin.get("/api/v1/acls?pattern_type=match"), 400, "resource_name")
    assert_problem(admin.get("/api/v1/acls?operation=fly"), 400, "operation", "choice")


def test_only_admins_manage_acls(operator: APIClient, viewer: APIClient) -> None:
    for client in (operator, viewer):
        assert_problem(client.get("/api/v1/acls"), 403)
        assert_problem(
            client.post(
                "/api/v1/acls", {"entries": [entry("User:otto", "*", "all")]}, format="json"
            ),
            403,
        )


def test_lists_lookups_and_creation_follow_the_entries(
    admin: APIClient, operator: APIClient, broker: Broker, topics: list[str]
) -> None:
    from tests.api.conftest import send

    (sent,) = send(broker, "billing", b"secret")
    assert operator.get(f"/api/v1/messages/{sent.msg_id}").status_code == 200
    add(
        admin,
        entry("User:otto", "billing", "all", "deny"),
        entry("User:otto", "private-", "create", "deny", pattern_type="prefixed"),
    )
    names = [t["name"] for t in operator.get("/api/v1/topics").json()["results"]]
    assert "billing" not in names and "orders-eu" in names
    assert_problem(operator.get(f"/api/v1/messages/{sent.msg_id}"), 403)
    assert_problem(operator.post("/api/v1/topics", {"name": "private-x"}, format="json"), 403)
    assert operator.post("/api/v1/topics", {"name": "public-x"}, format="json").status_code == 201


def test_an_entry_may_name_topics_as_kafka_clients_do(
    admin: APIClient, make_user: Callable[..., Any], broker: Broker
) -> None:
    """Kafka's ``shop.orders`` is the store's ``shop|orders``: an entry typed either way
    covers it, and is shown (and filtered) by the store's name."""
    broker.admin.create_topic("shop|orders", read_queue_nums=1, write_queue_nums=1)
    svc = token_client(make_user("svc", None))
    created = add(admin, entry("User:svc", "shop.", "write", pattern_type="prefixed"))
    assert created["entries"][0]["resource_name"] == "shop|"
    assert svc.post("/api/v1/topics/shop|orders/messages", SEND, format="json").status_code == 200
    found = admin.get(
        "/api/v1/acls?resource_type=topic&resource_name=shop.orders&pattern_type=match"
    ).json()
    assert [e["resource_name"] for e in found["results"]] == ["shop|"]
