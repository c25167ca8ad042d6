"""The console under real ACL entries: every page and form asks the one authorizer
(``webui.access.authorizer``, replaced here by a real :class:`Authorizer` holding the entries),
so a deny entry takes a topic away from an operator and an allow entry gives a user with no
role exactly its topics. Refusals are the console's 403 page naming what was refused."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from accounts.models import AuditEntry
from mqcore.access.authorizer import Authorizer
from mqcore.access.model import (
    AclEntry,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from mqcore.broker import Broker
from tests.webui.conftest import client_for, make_user, send

pytestmark = pytest.mark.django_db

Entries = Callable[..., None]


def html(response: Any) -> str:
    return response.content.decode()


def entry(
    principal: str,
    operation: Operation,
    name: str,
    *,
    rtype: ResourceType = ResourceType.TOPIC,
    pattern: PatternType = PatternType.LITERAL,
    permission: Permission = Permission.ALLOW,
) -> AclEntry:
    return AclEntry(Principal.parse(principal), rtype, name, pattern, operation, permission)


@pytest.fixture
def acls(monkeypatch: pytest.MonkeyPatch) -> Entries:
    """``acls(entry, ...)``: from now on the console decides with these entries."""

    def install(*entries: AclEntry) -> None:
        current = Authorizer(entries, version=len(entries) + 1)
        monkeypatch.setattr("webui.access.authorizer", lambda: current)

    return install


@pytest.fixture
def shop(broker: Broker) -> Broker:
    """Topics orders-eu, orders-us, billing (a message each, key ``k``) and group billing."""
    for topic in ("orders-eu", "orders-us", "billing"):
        broker.admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        send(broker, topic, f"in {topic}".encode(), keys=("k",))
    broker.admin.create_group("billing")
    broker.store.dispatch_until_caught_up()
    broker.commit_offset("billing", "billing", 0, 0)
    return broker


def test_an_operator_denied_a_topic_cannot_see_or_send_to_it(
    shop: Broker, operator: Any, acls: Entries
) -> None:
    acls(entry("User:otto", Operation.ALL, "billing", permission=Permission.DENY))
    client = client_for(operator)
    topics = html(client.get("/topics/"))
    assert "orders-eu" in topics and ">billing<" not in topics
    refused = client.get("/topics/billing/")
    assert refused.status_code == 403
    assert "Not allowed: describe on topic billing" in html(refused)
    assert "denied to User:otto by an ACL" in html(refused)
    sent = client.post("/topics/billing/send/", {"body": "x", "body_encoding": "text"})
    assert sent.status_code == 403 and "write on topic billing" in html(sent)
    assert shop.admin.topic_status("billing").message_count == 1
    for url in ("/topics/billing/edit/", "/topics/billing/delete/"):
        assert client.get(url).status_code == 403, url
    deleted = client.post("/topics/billing/delete/", {"confirm_name": "billing"})
    assert deleted.status_code == 403 and shop.metadata.topics.get("billing") is not None
    search = client.get("/messages/?mode=time&topic=billing&begin_ms=0")
    assert search.status_code == 403 and "read on topic billing" in html(search)
    # A search without a topic finds only what may be read; the select lists what may be seen.
    found = html(client.get("/messages/?mode=key&key=k&begin_ms=0"))
    assert "in orders-eu" in found and "in billing" not in found
    assert ">billing</option>" not in found
    # The group consuming it stays visible, but not its lag on the hidden topic.
    group = html(client.get("/groups/billing/"))
    assert 'href="/topics/billing/"' not in group
    assert not AuditEntry.objects.exists()
    # The other topics are the operator's as before.
    ok = client.post("/topics/orders-eu/send/", {"body": "x", "body_encoding": "text"})
    assert ok.status_code == 302


def test_a_user_without_role_sees_only_the_prefix_it_is_allowed(
    shop: Broker, acls: Entries
) -> None:
    svc = make_user("svc", None)
    acls(
        entry("User:svc", Operation.READ, "orders-", pattern=PatternType.PREFIXED),
        entry("User:svc", Operation.WRITE, "orders-", pattern=PatternType.PREFIXED),
        entry("User:svc", Operation.CREATE, "orders-", pattern=PatternType.PREFIXED),
    )
    client = client_for(svc)
    overview = client.get("/")
    assert overview.status_code == 200
    topics = html(client.get("/topics/"))
    assert "orders-eu" in topics and "orders-us" in topics and ">billing<" not in topics
    assert "New topic" in topics  # it may create orders-* topics
    assert 'href="/config/"' not in topics  # no role: nothing on the cluster
    assert client.get("/config/").status_code == 403
    page = html(client.get("/topics/orders-eu/"))
    assert "Send a message" in page and "Edit" not in page and "Delete…" not in page
    assert client.get("/topics/billing/").status_code == 403
    assert (
        client.post("/topics/orders-eu/send/", {"body": "hi", "body_encoding": "text"}).status_code
        == 302
    )
    assert AuditEntry.objects.get(action="message.send").username == "svc"
    assert client.post("/topics/billing/send/", {"body": "hi"}).status_code == 403
    found = html(client.get("/messages/?mode=key&key=k&begin_ms=0"))
    assert "in orders-eu" in found and "in orders-us" in found and "in billing" not in found
    billing_id = re.search(r"/messages/([0-9A-F]+)/", html(client_for(make_user("root", "admin")).get(
        "/messages/?mode=time&topic=billing&begin_ms=0"
    )))  # fmt: skip
    assert billing_id is not None
    assert client.get(f"/messages/{billing_id.group(1)}/").status_code == 403
    assert client.get(f"/messages/{billing_id.group(1)}/body/").status_code == 403
    # Create: allowed inside the prefix, refused outside it (nothing made).
    made = client.post(
        "/topics/new/", {"name": "orders-new", "read_queue_nums": "1", "write_queue_nums": "1"}
    )
    assert made.status_code == 302 and shop.metadata.topics.get("orders-new") is not None
    other = client.post(
        "/topics/new/", {"name": "payroll", "read_queue_nums": "1", "write_queue_nums": "1"}
    )
    assert other.status_code == 403 and "create on topic payroll" in html(other)
    assert shop.metadata.topics.get("payroll") is None
    # Groups: none allowed, none listed; the page still answers.
    groups = client.get("/groups/")
    assert groups.status_code == 200 and 'href="/groups/billing/"' not in html(groups)
    assert client.get("/groups/billing/").status_code == 403


def test_without_entries_a_user_without_role_is_still_refused(shop: Broker, acls: Entries) -> None:
    client = client_for(make_user("svc", None))
    acls(entry("User:other", Operation.READ, "orders-", pattern=PatternType.PREFIXED))
    for url in ("/", "/topics/", "/messages/", "/groups/"):
        response = client.get(url)
        assert response.status_code == 403 and "no console role" in html(response), url


def test_stream_search_keeps_to_readable_topics(shop: Broker, acls: Entries) -> None:
    svc = make_user("svc", None)
    acls(entry("User:svc", Operation.READ, "orders-", pattern=PatternType.PREFIXED))

    async def fetch(url: str) -> tuple[int, list[dict[str, Any]]]:
        client = AsyncClient()
        await client.aforce_login(svc)
        response = await client.get(url)
        chunks = (
            [chunk async for chunk in response.streaming_content]
            if response.streaming
            else [response.content]
        )
        body = b"".join(chunks).decode()
        return response.status_code, [json.loads(line) for line in body.splitlines() if line]

    status, events = async_to_sync(fetch)("/messages/stream/?mode=key&key=k&begin_ms=0")
    assert status == 200
    topics = sorted(e["message"]["topic"] for e in events if e["type"] == "message")
    assert topics == ["orders-eu", "orders-us"]
    status, events = async_to_sync(fetch)("/messages/stream/?mode=time&topic=billing&begin_ms=0")
    assert status == 403 and "read on topic billing" in events[0]["detail"]


def test_offset_reset_needs_group_read_and_topic_describe(
    shop: Broker, viewer: Any, acls: Entries
) -> None:
    client = client_for(viewer)
    assert client.get("/groups/billing/reset/").status_code == 403  # viewers: no group read
    acls(
        entry("User:vera", Operation.READ, "billing", rtype=ResourceType.GROUP),
        entry("User:vera", Operation.DESCRIBE, "orders-eu", permission=Permission.DENY),
    )
    assert "Reset offsets" in html(client.get("/groups/billing/"))
    form = html(client.get("/groups/billing/reset/"))
    assert ">billing</option>" in form and "orders-eu</option>" not in form
    applied = client.post(
        "/groups/billing/reset/", {"topic": "billing", "to": "earliest", "action": "apply"}
    )
    assert applied.status_code == 302
    assert shop.get_offsets("billing", "billing") == {"billing": {0: 0}}
    assert AuditEntry.objects.get(action="group.offsets.reset").username == "vera"
    hidden = client.post(
        "/groups/billing/reset/", {"topic": "orders-eu", "to": "earliest", "action": "apply"}
    )
    assert hidden.status_code == 403 and "describe on topic orders-eu" in html(hidden)
    assert shop.get_offsets("billing", "orders-eu") == {"orders-eu": {}}


def test_dlq_resend_needs_write_on_the_original_topic(
    shop: Broker, operator: Any, acls: Entries
) -> None:
    sent = send(shop, "orders-eu", b"poison", keys=("p",))
    shop.store.dispatch_until_caught_up()
    shop.commit_offset("billing", "orders-eu", sent.queue_id, 0)
    shop.send_back("billing", sent.offset_msg_id, delay_level=-1)
    shop.store.dispatch_until_caught_up()
    client = client_for(operator)
    page = html(client.get("/groups/billing/dlq/"))
    (dlq_id,) = re.findall(r'name="msg_id" value="([0-9A-F]+)"', page)
    acls(entry("Role:operator", Operation.WRITE, "orders-eu", permission=Permission.DENY))
    page = html(client.get("/groups/billing/dlq/"))
    assert sent.msg_id in page and 'name="msg_id"' not in page and "Resend selected" not in page
    refused = client.post("/groups/billing/dlq/", {"msg_id": [dlq_id]})
    assert refused.status_code == 403 and "write on topic orders-eu" in html(refused)
    assert not AuditEntry.objects.filter(action="message.dlq_resend").exists()
    assert "Resend from DLQ" not in html(client.get(f"/messages/{sent.offset_msg_id}/"))


def test_config_import_is_cluster_alter(shop: Broker, operator: Any, acls: Entries) -> None:
    client = client_for(operator)
    document = client.get("/config/topics.json/download/").content.decode()
    assert "Replace it with a file" not in html(client.get("/config/"))
    refused = client.post(
        "/config/", {"document": "topics.json", "text": document, "confirm": "on"}
    )
    assert refused.status_code == 403 and "alter on cluster kafka-cluster" in html(refused)
    assert "needs the admin role" in html(refused)
    acls(entry("User:otto", Operation.ALTER, "kafka-cluster", rtype=ResourceType.CLUSTER))
    assert "Replace it with a file" in html(client.get("/config/"))
    preview = client.post("/config/", {"document": "topics.json", "text": document})
    (token,) = re.findall(r'name="token" value="([^"]+)"', html(preview))
    done = client.post(
        "/config/", {"document": "topics.json", "action": "apply", "token": token, "confirm": "on"}
    )
    assert done.status_code == 302 and AuditEntry.objects.filter(action="config.import").exists()
    acls(entry("Role:operator", Operation.DESCRIBE, "kafka-cluster", rtype=ResourceType.CLUSTER,
               permission=Permission.DENY))  # fmt: skip
    assert 'href="/config/"' not in html(client.get("/topics/"))
    assert client.get("/config/").status_code == 403
    assert client.get("/config/topics.json/download/").status_code == 403


def test_dead_letters_need_read_on_the_dlq_topic(
    shop: Broker, operator: Any, acls: Entries
) -> None:
    sent = send(shop, "billing", b"poison", keys=("p",))
    shop.store.dispatch_until_caught_up()
    shop.send_back("billing", sent.offset_msg_id, delay_level=-1)
    shop.store.dispatch_until_caught_up()
    client = client_for(operator)
    assert 'href="/groups/billing/dlq/"' in html(client.get("/groups/"))
    acls(entry("User:otto", Operation.READ, "%DLQ%", pattern=PatternType.PREFIXED,
               permission=Permission.DENY))  # fmt: skip
    assert 'href="/groups/billing/dlq/"' not in html(client.get("/groups/"))
    assert 'href="/groups/billing/dlq/"' not in html(client.get("/groups/billing/"))
    refused = client.get("/groups/billing/dlq/")
    assert refused.status_code == 403 and "read on topic %DLQ%billing" in html(refused)


def test_a_deny_on_the_topic_name_refuses_an_operator_creating_it(
    shop: Broker, operator: Any, acls: Entries
) -> None:
    """CREATE on the cluster or on the name, but a deny on either wins (as REST decides)."""
    acls(
        entry(
            "Role:operator",
            Operation.CREATE,
            "private-",
            pattern=PatternType.PREFIXED,
            permission=Permission.DENY,
        )
    )
    client = client_for(operator)
    form = {"read_queue_nums": "1", "write_queue_nums": "1"}
    denied = client.post("/topics/new/", {"name": "private-x", **form})
    assert denied.status_code == 403 and "create on topic private-x" in html(denied)
    assert "denied to Role:operator by an ACL" in html(denied)
    assert shop.metadata.topics.get("private-x") is None
    made = client.post("/topics/new/", {"name": "public-x", **form})
    assert made.status_code == 302 and shop.metadata.topics.get("public-x") is not None
