"""REST decided by ACL entries where the console is: group lists and pages, group edit,
delete, offset commits and resets, message retry, DLQ resend, topic creation and config
documents. For each, a deny entry refuses an operator and an allow entry lets a user with
no role (entries made over ``/api/v1/acls``); refusals are 403 problem+json naming the
operation and the resource."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, send, token_client, wait_dispatched
from tests.api.test_acls import add, entry

pytestmark = pytest.mark.django_db

GROUP = "billing-app"
DLQ = f"%DLQ%{GROUP}"


@pytest.fixture
def shop(broker: Broker) -> Broker:
    """Topics orders-eu and billing, groups billing-app and audit-app."""
    for name in ("orders-eu", "billing"):
        broker.admin.create_topic(name, read_queue_nums=1, write_queue_nums=1)
    broker.admin.create_group(GROUP, retry_max_times=2)
    broker.admin.create_group("audit-app")
    return broker


@pytest.fixture
def svc(make_user: Callable[..., Any], broker_runtime: Any) -> APIClient:
    """A user with no role: allowed only what entries allow it."""
    return token_client(make_user("svc", None))


def group_entry(principal: str, name: str, operation: str, permission: str = "allow") -> Any:
    return entry(principal, name, operation, permission, resource_type="group")


def refused(response: Any, *words: str) -> str:
    """The 403 problem+json; its detail names each of ``words``."""
    detail: str = assert_problem(response, 403, rule="role")["detail"]
    for word in words:
        assert word in detail, (word, detail)
    return detail


def listed(client: APIClient) -> list[str]:
    r = client.get("/api/v1/groups")
    assert r.status_code == 200, r.content
    return [g["name"] for g in r.json()["results"]]


# -- groups ---------------------------------------------------------------------------------


def test_the_group_list_shows_only_groups_the_user_may_describe(
    admin: APIClient, operator: APIClient, viewer: APIClient, svc: APIClient, shop: Broker
) -> None:
    assert {GROUP, "audit-app"} <= set(listed(operator))
    add(admin, group_entry("Role:operator", GROUP, "describe", "deny"))
    names = listed(operator)
    assert GROUP not in names and "audit-app" in names
    assert GROUP in listed(viewer)  # the deny speaks of operators only
    assert listed(operator) == [g for g in listed(admin) if g != GROUP]
    # The list itself stays the viewer role's, as the topic list is (a user with no role is
    # refused it whatever it is allowed); its groups are its pages.
    add(admin, group_entry("User:svc", "audit-app", "describe"))
    assert_problem(svc.get("/api/v1/groups"), 403)
    assert svc.get("/api/v1/groups/audit-app").status_code == 200
    refused(svc.get(f"/api/v1/groups/{GROUP}"), "describe on group", GROUP)


def test_a_group_page_edit_and_delete_follow_the_entries(
    admin: APIClient, operator: APIClient, svc: APIClient, shop: Broker
) -> None:
    change = {"retry_max_times": 5}
    assert operator.patch(f"/api/v1/groups/{GROUP}", change, format="json").status_code == 200
    add(admin, group_entry("User:otto", GROUP, "describe", "deny"))
    refused(operator.get(f"/api/v1/groups/{GROUP}"), "describe on group", repr(GROUP))
    refused(operator.get(f"/api/v1/groups/{GROUP}/lag"), "describe on group")
    # Edit stays the operator role's (no Kafka operation matches it), and like the console's
    # edit page it needs the group described: the deny refuses it, nothing changes.
    body = refused(
        operator.patch(f"/api/v1/groups/{GROUP}", {"retry_max_times": 9}, format="json"),
        "describe on group",
        "denied to User:otto by an ACL",
    )
    assert "otto" in body and shop.admin.get_group(GROUP).retry_max_times == 5
    add(admin, group_entry("Role:operator", GROUP, "delete", "deny"))
    refused(operator.delete(f"/api/v1/groups/{GROUP}"), "delete on group")
    assert shop.metadata.groups.get(GROUP) is not None
    # A user with no role: describe and delete by entries; edit stays refused (role only).
    add(admin, group_entry("User:svc", "audit-", "all") | {"pattern_type": "prefixed"})
    assert svc.get("/api/v1/groups/audit-app").status_code == 200
    assert svc.get("/api/v1/groups/audit-app/lag").status_code == 200
    r = svc.patch("/api/v1/groups/audit-app", change, format="json")
    assert "operator role" in assert_problem(r, 403)["detail"]
    assert svc.delete("/api/v1/groups/audit-app").status_code == 204
    assert shop.metadata.groups.get("audit-app") is None
    assert [e.username for e in AuditEntry.objects.filter(action="group.delete")] == ["svc"]


def test_resets_and_commits_need_group_read_and_topic_describe(
    admin: APIClient, operator: APIClient, svc: APIClient, shop: Broker
) -> None:
    send(shop, "orders-eu", b"a", b"b", queue_id=0)
    reset = {"topic": "orders-eu", "to": "latest"}
    commit = {"offsets": [{"topic": "orders-eu", "queue_id": 0, "offset": 1}]}
    url = f"/api/v1/groups/{GROUP}/offsets"
    assert operator.post(f"{url}/reset", reset, format="json").status_code == 200
    # A deny of describing the topic refuses the operator a reset and a commit on it.
    add(admin, entry("Role:operator", "orders-eu", "describe", "deny"))
    refused(operator.post(f"{url}/reset", reset, format="json"), "describe on topic", "orders-eu")
    refused(operator.put(url, commit, format="json"), "describe on topic", "orders-eu")
    assert shop.get_offsets(GROUP).get("orders-eu", {}).get(0) == 2  # the first reset's
    # A user with no role: group READ and topic DESCRIBE by entries.
    refused(svc.post(f"{url}/reset", reset, format="json"), "read on group", GROUP)
    add(admin, group_entry("User:svc", GROUP, "read"))
    refused(
        svc.post(f"{url}/reset", reset | {"to": "earliest"}, format="json"), "describe on topic"
    )
    assert shop.get_offsets(GROUP)["orders-eu"][0] == 2
    add(admin, entry("User:svc", "orders-eu", "describe"))
    r = svc.post(f"{url}/reset", reset | {"to": "earliest"}, format="json")
    assert r.status_code == 200, r.content
    assert shop.get_offsets(GROUP)["orders-eu"][0] == 0
    assert svc.put(url, commit, format="json").status_code == 200
    assert shop.get_offsets(GROUP)["orders-eu"][0] == 1


# -- retry and DLQ resend -------------------------------------------------------------------


def _retry(client: APIClient, msg_id: str, delay_level: int = 1) -> Any:
    url = f"/api/v1/groups/{GROUP}/messages/{msg_id}/retry"
    return client.post(url, {"delay_level": delay_level}, format="json")


def test_retry_needs_group_read_and_write_on_the_original_topic(
    admin: APIClient, operator: APIClient, svc: APIClient, shop: Broker
) -> None:
    (sent,) = send(shop, "orders-eu", b"fragile", queue_id=0)
    assert _retry(operator, sent.offset_msg_id).status_code == 200
    add(admin, entry("Role:operator", "orders-eu", "write", "deny"))
    refused(_retry(operator, sent.offset_msg_id), "write on topic", "orders-eu", "denied")
    assert AuditEntry.objects.filter(action="message.retry").count() == 1  # the first only
    # No role: refused until the group may be read and the original topic written.
    refused(_retry(svc, sent.offset_msg_id), "read on group", "(no role)")
    add(admin, group_entry("User:svc", GROUP, "read"))
    refused(_retry(svc, sent.offset_msg_id), "write on topic", "orders-eu")
    add(admin, entry("User:svc", "orders-eu", "write"))
    r = _retry(svc, sent.offset_msg_id)
    assert r.status_code == 200, r.content
    assert r.json()["action"] == "RETRY" and r.json()["result"]["msg_id"] == sent.msg_id


def test_dlq_resend_needs_the_dlq_read_and_the_original_topic_written(
    admin: APIClient, operator: APIClient, viewer: APIClient, svc: APIClient, shop: Broker
) -> None:
    (sent,) = send(shop, "orders-eu", b"poison", queue_id=0)
    assert _retry(operator, sent.offset_msg_id, delay_level=-1).json()["action"] == "DLQ"
    wait_dispatched(shop)
    url = f"/api/v1/groups/{GROUP}/dlq/{sent.msg_id}/resend"
    refused(viewer.post(url), "write on any topic", "(role viewer)")
    add(admin, entry("Role:operator", "orders-eu", "write", "deny"))
    refused(operator.post(url), "write on topic", "orders-eu", "denied to Role:operator")
    assert shop.admin.topic_status("orders-eu").message_count == 1  # nothing resent
    add(admin, entry("User:otto", DLQ, "read", "deny"))
    refused(operator.post(url), "read on topic", DLQ)
    # No role: the group described, its DLQ read, the original topic written.
    refused(svc.post(url), "write on any topic", "(no role)")
    add(admin, entry("User:svc", "orders-", "write", pattern_type="prefixed"))
    refused(svc.post(url), "describe on group", GROUP)
    add(admin, group_entry("User:svc", GROUP, "describe"))
    refused(svc.post(url), "read on topic", DLQ)
    add(admin, entry("User:svc", DLQ, "read"))
    r = svc.post(url)
    assert r.status_code == 200, r.content
    assert r.json()["topic"] == "orders-eu" and r.json()["msg_id"] == sent.msg_id
    wait_dispatched(shop)
    assert shop.admin.topic_status("orders-eu").message_count == 2


def test_a_resend_to_a_topic_not_allowed_is_refused_for_a_user_with_no_role(
    admin: APIClient, operator: APIClient, svc: APIClient, shop: Broker
) -> None:
    (sent,) = send(shop, "billing", b"poison", queue_id=0)
    assert _retry(operator, sent.offset_msg_id, delay_level=-1).status_code == 200
    wait_dispatched(shop)
    add(
        admin,
        entry("User:svc", "orders-", "write", pattern_type="prefixed"),
        group_entry("User:svc", GROUP, "describe"),
        entry("User:svc", DLQ, "read"),
    )
    refused(
        svc.post(f"/api/v1/groups/{GROUP}/dlq/{sent.msg_id}/resend"), "write on topic 'billing'"
    )
    assert shop.admin.topic_status("billing").message_count == 1


# -- topic creation -------------------------------------------------------------------------


def test_creating_a_topic_needs_create_on_the_cluster_or_on_its_name(
    admin: APIClient, operator: APIClient, viewer: APIClient, svc: APIClient, shop: Broker
) -> None:
    new = {"name": "orders-new", "read_queue_nums": 1, "write_queue_nums": 1}
    # Refused before the body is read (as by a role): an empty body is a 403, not a 400.
    refused(svc.post("/api/v1/topics", {}, format="json"), "create on any topic", "(no role)")
    refused(viewer.post("/api/v1/topics", {}, format="json"), "create", "(role viewer)")
    add(admin, entry("User:svc", "orders-", "create", pattern_type="prefixed"))
    r = svc.post("/api/v1/topics", new, format="json")
    assert r.status_code == 201, r.content
    assert shop.metadata.topics.get("orders-new") is not None
    refused(svc.post("/api/v1/topics", {"name": "payroll"}, format="json"), "create on topic")
    assert shop.metadata.topics.get("payroll") is None
    # CREATE on the cluster lets a user with no role create any topic.
    add(admin, entry("User:svc", "kafka-cluster", "create", resource_type="cluster"))
    assert svc.post("/api/v1/topics", {"name": "payroll"}, format="json").status_code == 201
    # A deny on the cluster refuses the operator whatever the name (its role's topic CREATE
    # does not win over a deny).
    add(admin, entry("Role:operator", "kafka-cluster", "create", "deny", resource_type="cluster"))
    refused(
        operator.post("/api/v1/topics", {"name": "anything"}, format="json"),
        "create on cluster",
        "denied to Role:operator",
    )
    assert shop.metadata.topics.get("anything") is None
    assert admin.post("/api/v1/topics", {"name": "anything"}, format="json").status_code == 201


# -- config documents -----------------------------------------------------------------------


def test_config_documents_are_cluster_describe_and_alter(
    admin: APIClient, operator: APIClient, viewer: APIClient, svc: APIClient, shop: Broker
) -> None:
    url = "/api/v1/config/topics.json"
    exported = admin.get(url)
    assert exported.status_code == 200
    text = exported.content

    def put(client: APIClient) -> Any:
        return client.put(url, text, content_type="application/json")

    add(admin, entry("User:vera", "kafka-cluster", "describe", "deny", resource_type="cluster"))
    refused(viewer.get(url), "describe on cluster", "denied to User:vera")
    refused(put(operator), "alter on cluster", "(role operator)")
    refused(svc.get(url), "describe on cluster", "(no role)")
    refused(put(svc), "alter on cluster", "(no role)")
    add(admin, entry("User:svc", "kafka-cluster", "alter", resource_type="cluster"))
    assert svc.get(url).status_code == 200  # alter implies describe
    r = put(svc)
    assert r.status_code == 200, r.content
    assert AuditEntry.objects.get(action="config.import").username == "svc"
    add(admin, entry("Role:admin", "kafka-cluster", "alter", "deny", resource_type="cluster"))
    refused(put(admin), "alter on cluster", "denied to Role:admin")
