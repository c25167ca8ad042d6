"""The console's pages through Django's test client: roles, forms, audit, searches."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from accounts.models import AuditEntry
from mqcore.broker import Broker
from tests.webui.conftest import PASSWORD, client_for, make_user, send

pytestmark = pytest.mark.django_db


def html(response: Any) -> str:
    return response.content.decode()


# -- log in, roles ------------------------------------------------------------------------------


def test_pages_need_a_login(broker: Broker) -> None:
    for url in ("/", "/topics/", "/groups/", "/messages/", "/trace/", "/config/", "/audit/"):
        response = Client().get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/?next=")


def test_log_in_and_out(broker: Broker, viewer: Any) -> None:
    client = Client()
    page = client.get("/login/")
    assert page.status_code == 200 and "Log in" in html(page)
    wrong = client.post("/login/", {"username": "vera", "password": "nope"})
    assert wrong.status_code == 200 and "form-error" in html(wrong)
    ok = client.post("/login/", {"username": "vera", "password": PASSWORD, "next": "/topics/"})
    assert ok.status_code == 302 and ok["Location"] == "/topics/"
    assert client.get("/topics/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/topics/").status_code == 302


def test_viewer_sees_no_mutate_buttons_and_is_refused(broker: Broker, viewer: Any) -> None:
    broker.admin.create_topic("Orders")
    broker.admin.create_group("billing")
    client = client_for(viewer)
    topics = html(client.get("/topics/"))
    assert "New topic" not in topics
    topic = html(client.get("/topics/Orders/"))
    assert "Send a message" not in topic and "Edit" not in topic and "Delete" not in topic
    group = html(client.get("/groups/billing/"))
    assert "Reset offsets" not in group
    assert "Audit" not in html(client.get("/"))  # operators read the audit log
    # The server refuses what the buttons would do, whatever the page shows.
    for url, data in (
        ("/topics/new/", {"name": "X"}),
        ("/topics/Orders/send/", {"body": "x"}),
        ("/topics/Orders/delete/", {"confirm_name": "Orders"}),
        ("/groups/billing/reset/", {"topic": "Orders", "to": "latest", "action": "apply"}),
        ("/groups/new/", {"name": "g"}),
    ):
        response = client.post(url, data)
        assert response.status_code == 403, url
        assert "needs the operator role" in html(response)
    assert client.get("/topics/new/").status_code == 403
    assert client.get("/audit/").status_code == 403
    assert broker.metadata.topics.get("X") is None
    assert not AuditEntry.objects.exists()


def test_user_without_role_is_told_so(broker: Broker) -> None:
    client = client_for(make_user("nobody", None))
    response = client.get("/")
    assert response.status_code == 403
    assert "no console role" in html(response)


def test_broker_not_running_is_a_clear_503(viewer: Any) -> None:
    from cairn import runtime

    runtime.reset()
    response = client_for(viewer).get("/topics/")
    assert response.status_code == 503
    assert "not running" in html(response)


# -- overview -----------------------------------------------------------------------------------


def test_overview_shows_status_services_and_lag(broker: Broker, viewer: Any) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=2)
    broker.admin.create_group("billing")
    for n in range(3):
        send(broker, "Orders", b"x", keys=(f"k{n}",), queue_id=0)
    broker.store.dispatch_until_caught_up()
    broker.commit_offset("billing", "Orders", 0, 1)
    page = html(client_for(viewer).get("/"))
    assert "Running" in page
    assert "Dispatch (reput)" in page and "Flush" in page and "Cleanup" in page
    assert 'id="throughput-data"' in page
    lag = re.search(r'href="/groups/billing/">billing</a>.*?<strong>(\d+)</strong>', page, re.S)
    assert lag and lag.group(1) == "2"
    fragment = html(client_for(viewer).get("/?partial=live"))
    assert "<html" not in fragment and "Throughput" in fragment


# -- topics -------------------------------------------------------------------------------------


def test_operator_creates_edits_and_deletes_a_topic(broker: Broker, operator: Any) -> None:
    client = client_for(operator)
    form = {
        "name": "Orders",
        "read_queue_nums": "4",
        "write_queue_nums": "4",
        "perm": "6",
        "order": "on",
        "topic_filter_type": "SINGLE_TAG",
        "attributes": "+message.type=NORMAL",
    }
    response = client.post("/topics/new/", form)
    assert response.status_code == 302 and response["Location"] == "/topics/Orders/"
    info = broker.admin.get_topic("Orders")
    assert (info.read_queue_nums, info.order, info.attributes) == (
        4,
        True,
        {"+message.type": "NORMAL"},
    )
    entry = AuditEntry.objects.get(action="topic.create")
    assert (entry.username, entry.target, entry.role) == ("otto", "Orders", "operator")

    listed = html(client.get("/topics/?q=ord"))
    assert 'href="/topics/Orders/"' in listed

    edited = client.post("/topics/Orders/edit/", form | {"write_queue_nums": "2", "order": ""})
    assert edited.status_code == 302
    assert broker.admin.get_topic("Orders").write_queue_nums == 2
    assert broker.admin.get_topic("Orders").order is False
    update = AuditEntry.objects.get(action="topic.update")
    assert update.old_value["write_queue_nums"] == 4 and update.new_value["write_queue_nums"] == 2

    refused = client.post("/topics/Orders/delete/", {"confirm_name": "orders"})
    assert refused.status_code == 400 and broker.metadata.topics.get("Orders") is not None
    deleted = client.post("/topics/Orders/delete/", {"confirm_name": "Orders"})
    assert deleted.status_code == 302
    assert broker.metadata.topics.get("Orders") is None
    assert AuditEntry.objects.filter(action="topic.delete", target="Orders").exists()


def test_topic_form_shows_the_api_rules(broker: Broker, operator: Any) -> None:
    client = client_for(operator)
    response = client.post(
        "/topics/new/", {"name": "bad name!", "read_queue_nums": "0", "write_queue_nums": "4"}
    )
    assert response.status_code == 400
    page = html(response)
    assert "Please correct" in page
    assert "read_queue_nums" in page and "name" in page
    assert 'value="bad name!"' in page  # the input is kept
    broker.admin.create_topic("Orders")
    duplicate = client.post(
        "/topics/new/", {"name": "Orders", "read_queue_nums": "1", "write_queue_nums": "1"}
    )
    assert duplicate.status_code == 400 and "exists" in html(duplicate)
    assert client.get("/topics/Nope/").status_code == 404


def test_send_a_message_from_the_topic_page(broker: Broker, operator: Any) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=2)
    client = client_for(operator)
    response = client.post(
        "/topics/Orders/send/",
        {
            "keys": "order-42 customer-7",
            "tag": "created",
            "properties": "tenant=acme\nsource=console",
            "body": '{"order": 42}',
            "body_encoding": "json",
            "queue_id": "1",
            "delay_level": "0",
        },
    )
    assert response.status_code == 302
    broker.store.dispatch_until_caught_up()
    (message,) = broker.query_by_key("Orders", "order-42", 0, 2**62)
    assert message.body == b'{"order":42}'
    assert message.queue_id == 1 and message.tags == "created"
    assert message.user_properties() == {"tenant": "acme", "source": "console"}
    assert message.born_host.ip == "127.0.0.1"
    entry = AuditEntry.objects.get(action="message.send")
    assert entry.new_value == {"count": 1, "msg_ids": [message.msg_id]}
    page = html(client.get(response["Location"]))
    assert message.msg_id in page and "queue 1 at offset 0" in page


def test_send_form_errors_keep_the_input(broker: Broker, operator: Any) -> None:
    broker.admin.create_topic("Orders")
    client = client_for(operator)
    bad_json = client.post("/topics/Orders/send/", {"body": "{nope", "body_encoding": "json"})
    assert bad_json.status_code == 400 and "not valid JSON" in html(bad_json)
    assert "{nope" in html(bad_json)
    reserved = client.post(
        "/topics/Orders/send/", {"body": "x", "body_encoding": "text", "properties": "TAGS=x"}
    )
    assert reserved.status_code == 400 and "TAGS" in html(reserved)
    empty = client.post("/topics/Orders/send/", {"body": "", "body_encoding": "text"})
    assert empty.status_code == 400
    assert broker.admin.topic_status("Orders").message_count == 0


# -- groups -------------------------------------------------------------------------------------


def _orders_with_backlog(broker: Broker) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=2)
    broker.admin.create_group("billing")
    for n in range(6):
        send(broker, "Orders", f"m{n}".encode(), keys=(f"k{n}",), queue_id=n % 2)
    broker.store.dispatch_until_caught_up()
    broker.commit_offset("billing", "Orders", 0, 3)
    broker.commit_offset("billing", "Orders", 1, 1)


def test_group_pages_show_lag_per_queue(broker: Broker, viewer: Any) -> None:
    _orders_with_backlog(broker)
    client = client_for(viewer)
    listing = html(client.get("/groups/"))
    assert 'href="/groups/billing/"' in listing and "<strong>2</strong>" in listing
    detail = html(client.get("/groups/billing/"))
    assert "2 messages behind" in detail
    assert "Broker offset" in detail and "Lag (time)" in detail


def test_group_create_edit_delete(broker: Broker, operator: Any) -> None:
    client = client_for(operator)
    created = client.post(
        "/groups/new/",
        {
            "name": "billing",
            "consume_enable": "on",
            "retry_max_times": "3",
            "retry_queue_nums": "1",
            "group_retry_policy": '{"type": "CUSTOMIZED"}',
        },
    )
    assert created.status_code == 302
    info = broker.admin.get_group("billing")
    assert info.retry_max_times == 3 and info.consume_broadcast_enable is False
    edited = client.post(
        "/groups/billing/edit/", {"retry_max_times": "5", "group_retry_policy": "{bad"}
    )
    assert edited.status_code == 400 and "not valid JSON" in html(edited)
    edited = client.post("/groups/billing/edit/", {"retry_max_times": "5"})
    assert edited.status_code == 302
    assert broker.admin.get_group("billing").retry_max_times == 5
    assert broker.admin.get_group("billing").consume_enable is False  # unchecked box
    deleted = client.post(
        "/groups/billing/delete/", {"confirm_name": "billing", "remove_offsets": "on"}
    )
    assert deleted.status_code == 302
    assert [e.action for e in AuditEntry.objects.order_by("id")] == [
        "group.create",
        "group.update",
        "group.delete",
    ]


def test_offset_reset_previews_then_applies(broker: Broker, operator: Any) -> None:
    _orders_with_backlog(broker)
    client = client_for(operator)
    form = client.get("/groups/billing/reset/?topic=Orders")
    assert form.status_code == 200 and "Preview (dry run)" in html(form)
    preview = client.post(
        "/groups/billing/reset/", {"topic": "Orders", "to": "earliest", "action": "preview"}
    )
    page = html(preview)
    assert preview.status_code == 200
    assert 'data-testid="reset-preview"' in page and "Apply reset" in page
    assert "lag 2 → <strong>6</strong>" in page
    assert broker.get_offsets("billing", "Orders") == {"Orders": {0: 3, 1: 1}}  # dry run
    assert not AuditEntry.objects.exists()

    applied = client.post(
        "/groups/billing/reset/", {"topic": "Orders", "to": "earliest", "action": "apply"}
    )
    assert applied.status_code == 302
    assert broker.get_offsets("billing", "Orders") == {"Orders": {0: 0, 1: 0}}
    entry = AuditEntry.objects.get(action="group.offsets.reset")
    assert entry.new_value["request"] == {"topic": "Orders", "to": "earliest"}

    by_time = client.post(
        "/groups/billing/reset/",
        {"topic": "Orders", "to": "timestamp", "timestamp_ms": "4000000000000", "action": "apply"},
    )
    assert by_time.status_code == 302
    assert broker.get_offsets("billing", "Orders") == {"Orders": {0: 3, 1: 3}}
    explicit = client.post(
        "/groups/billing/reset/",
        {"topic": "Orders", "to": "offsets", "offsets": "0=1\n1=2", "action": "preview"},
    )
    assert explicit.status_code == 200 and "<strong>1</strong>" in html(explicit)
    missing = client.post(
        "/groups/billing/reset/", {"topic": "Orders", "to": "timestamp", "action": "preview"}
    )
    assert missing.status_code == 400 and "choose a time" in html(missing)


def test_dead_letters_are_listed_and_resent(broker: Broker, operator: Any) -> None:
    broker.admin.create_topic("Orders")
    broker.admin.create_group("billing")
    sent = send(broker, "Orders", b"poison", keys=("order-9",))
    broker.store.dispatch_until_caught_up()
    broker.commit_offset("billing", "Orders", sent.queue_id, 0)
    broker.send_back("billing", sent.offset_msg_id, delay_level=-1)
    broker.store.dispatch_until_caught_up()
    client = client_for(operator)
    page = html(client.get("/groups/billing/dlq/"))
    assert sent.msg_id in page and "Resend selected" in page
    (dlq_id,) = re.findall(r'name="msg_id" value="([0-9A-F]+)"', page)
    detail = html(client.get(f"/messages/{sent.offset_msg_id}/"))
    assert ">dlq</span>" in detail and "Resend from DLQ" in detail
    resent = client.post("/groups/billing/dlq/", {"msg_id": [dlq_id, "00FF"]})
    body = html(resent)
    assert resent.status_code == 200
    assert "1 of 2 resent" in body and ">failed</span>" in body
    # Recorded under the msgId the list shows; the DLQ record's offsetMsgId is in the value.
    entry = AuditEntry.objects.get(action="message.dlq_resend", target=sent.msg_id)
    assert entry.new_value["dlq_offset_msg_id"] == dlq_id
    broker.store.dispatch_until_caught_up()
    assert broker.admin.topic_status("Orders").message_count == 2


def test_empty_dead_letter_queue(broker: Broker, viewer: Any) -> None:
    broker.admin.create_group("billing")
    page = html(client_for(viewer).get("/groups/billing/dlq/"))
    assert "No dead letters" in page


# -- messages -----------------------------------------------------------------------------------


@pytest.fixture
def stocked(broker: Broker) -> list[Any]:
    broker.admin.create_topic("Orders", read_queue_nums=3)
    results = [
        send(
            broker,
            "Orders",
            json.dumps({"n": n}).encode(),
            keys=(f"order-{n % 4}",),
            tag="even" if n % 2 == 0 else "odd",
        )
        for n in range(20)
    ]
    broker.store.dispatch_until_caught_up()
    return results


def test_search_by_key_and_by_id(broker: Broker, viewer: Any, stocked: list[Any]) -> None:
    client = client_for(viewer)
    page = html(client.get("/messages/?mode=key&key=order-1&begin_ms=0"))
    assert page.count('class="id"') == 5 and "complete" in page
    limited = html(client.get("/messages/?mode=key&key=order-1&begin_ms=0&limit=2"))
    assert limited.count('class="id"') == 2 and "limit reached" in limited
    tagged = html(client.get("/messages/?mode=key&key=order-0&begin_ms=0&tag=odd"))
    assert tagged.count('class="id"') == 0 and "No message matches" in tagged
    target = stocked[7]
    go = client.get(f"/messages/?mode=id&msg_id={target.msg_id}&go=1")
    assert go.status_code == 302 and go["Location"] == f"/messages/{target.offset_msg_id}/"
    bad = client.get("/messages/?mode=id&msg_id=xyz")
    assert bad.status_code == 400 and "hexadecimal" in html(bad)


def test_browse_by_time_pages_through_everything(
    broker: Broker, viewer: Any, stocked: list[Any]
) -> None:
    client = client_for(viewer)
    url = "/messages/?mode=time&topic=Orders&begin_ms=0&limit=8&tag=even"
    seen: list[str] = []
    for _ in range(5):
        response = client.get(url)
        page = html(response)
        seen += re.findall(r'class="id" href="/messages/([0-9A-F]+)/"', page)
        nxt = re.search(r'data-role="next" href="\?([^"]+)"', page)
        if not nxt:
            assert "complete" in page
            break
        url = "/messages/?" + nxt.group(1).replace("&amp;", "&")
    expected = [r.offset_msg_id for n, r in enumerate(stocked) if n % 2 == 0]
    assert len(seen) == len(set(seen)) == len(expected)  # every match once, across pages
    assert set(seen) == set(expected)


def test_read_a_queue_from_an_offset(broker: Broker, viewer: Any, stocked: list[Any]) -> None:
    queue = stocked[0].queue_id
    page = html(
        client_for(viewer).get(
            f"/messages/?mode=queue&topic=Orders&queue_id={queue}&offset=2&limit=3"
        )
    )
    offsets = re.findall(r'<td class="num">(\d+) · (\d+)</td>', page)
    assert offsets == [(str(queue), "2"), (str(queue), "3"), (str(queue), "4")]


def test_search_streams_ndjson(broker: Broker, viewer: Any, stocked: list[Any]) -> None:
    async def fetch(url: str) -> tuple[int, list[dict[str, Any]]]:
        client = AsyncClient()
        await client.aforce_login(viewer)
        response = await client.get(url)
        chunks = (
            [chunk async for chunk in response.streaming_content]
            if response.streaming
            else [response.content]
        )
        body = b"".join(chunks).decode()
        return response.status_code, [json.loads(line) for line in body.splitlines() if line]

    status, events = async_to_sync(fetch)(
        "/messages/stream/?mode=time&topic=Orders&begin_ms=0&limit=15"
    )
    assert status == 200
    kinds = [e["type"] for e in events]
    assert kinds.count("message") == 15 and kinds[-1] == "done" and "progress" in kinds
    assert events[-1]["reason"] == "limit" and events[-1]["next"]["cursor"]
    status, events = async_to_sync(fetch)("/messages/stream/?mode=key&key=")
    assert status == 400
    anonymous = async_to_sync(AsyncClient().get)("/messages/stream/?mode=key&key=x")
    assert anonymous.status_code == 401


def test_message_detail_shows_properties_body_and_consume_status(
    broker: Broker, viewer: Any
) -> None:
    broker.admin.create_topic("Orders")
    broker.admin.create_group("billing")
    broker.admin.create_group("shipping")
    sent = send(
        broker,
        "Orders",
        b'{"order": 42, "items": [1, 2]}',
        keys=("order-42",),
        tag="created",
        properties={"tenant": "acme"},
    )
    broker.store.dispatch_until_caught_up()
    broker.commit_offset("billing", "Orders", sent.queue_id, sent.queue_offset + 1)
    broker.commit_offset("shipping", "Orders", sent.queue_id, sent.queue_offset)
    client = client_for(viewer)
    for msg_id in (sent.offset_msg_id, sent.msg_id):
        page = html(client.get(f"/messages/{msg_id}/"))
        assert sent.msg_id in page and sent.offset_msg_id in page
    assert "&quot;items&quot;: [\n" in page  # pretty JSON
    assert "7b 22 6f 72" in page  # hex
    assert re.search(r"UNIQ_KEY</th><td[^>]*>" + sent.msg_id, page)
    assert re.search(r"tenant</th><td[^>]*>acme", page)
    assert re.search(r'billing</a></td>\s*<td><span class="badge ok">consumed', page)
    assert re.search(r'shipping</a></td>\s*<td><span class="badge info">pending', page)
    body = client.get(f"/messages/{sent.msg_id}/body/")
    assert body.content == b'{"order": 42, "items": [1, 2]}'
    assert "attachment" in body["Content-Disposition"]
    assert client.get("/messages/00FF/").status_code == 404
    assert client.get("/messages/not-hex/").status_code == 404


def test_binary_body_shows_hex(broker: Broker, viewer: Any) -> None:
    broker.admin.create_topic("Orders")
    sent = send(broker, "Orders", bytes(range(250, 256)) + b"\x00\x01")
    broker.store.dispatch_until_caught_up()
    page = html(client_for(viewer).get(f"/messages/{sent.offset_msg_id}/"))
    assert "binary" in page and "fa fb fc fd fe ff 00 01" in page
    assert 'data-testid="body-text"' not in page


# -- trace page (no JavaScript) ------------------------------------------------------------------


def test_trace_page_lists_stored_matches(broker: Broker, viewer: Any, stocked: list[Any]) -> None:
    page = html(client_for(viewer).get("/trace/?key=order-2&begin_ms=0"))
    assert page.count('class="trace-item"') == 5
    assert '"autostart": true' in page
    assert "/ws/trace/" in page


# -- config -------------------------------------------------------------------------------------


def test_config_documents_view_download_and_upload(
    broker: Broker, admin: Any, operator: Any
) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=2)
    client = client_for(admin)
    page = html(client.get("/config/"))
    assert "topics.json" in page and "Replace it with a file" in page
    assert "Replace it with a file" not in html(client_for(operator).get("/config/"))
    download = client.get("/config/topics.json/download/")
    assert download["Content-Disposition"] == 'attachment; filename="topics.json"'
    document = download.content.decode()
    assert '"Orders"' in document

    changed = document.replace('"readQueueNums":2', '"readQueueNums":5')
    assert changed != document
    from django.core.files.uploadedfile import SimpleUploadedFile

    refused = client_for(operator).post(
        "/config/",
        {
            "document": "topics.json",
            "confirm": "on",
            "file": SimpleUploadedFile("t.json", changed.encode()),
        },
    )
    assert refused.status_code == 403
    # An upload shows its diff first; the apply step needs the box ticked.
    preview = client.post(
        "/config/",
        {"document": "topics.json", "file": SimpleUploadedFile("t.json", changed.encode())},
    )
    assert preview.status_code == 200 and 'data-testid="diff-changed"' in html(preview)
    (token,) = re.findall(r'name="token" value="([^"]+)"', html(preview))
    unconfirmed = client.post(
        "/config/", {"document": "topics.json", "action": "apply", "token": token}
    )
    assert unconfirmed.status_code == 400 and "tick the box" in html(unconfirmed)
    broken = client.post(
        "/config/",
        {
            "document": "topics.json",
            "confirm": "on",
            "file": SimpleUploadedFile("t.json", b'{"topicConfigTable": 7}'),
        },
    )
    assert broken.status_code == 400
    assert broker.admin.get_topic("Orders").read_queue_nums == 2
    applied = client.post(
        "/config/",
        {"document": "topics.json", "action": "apply", "token": token, "confirm": "on"},
    )
    assert applied.status_code == 302
    assert broker.admin.get_topic("Orders").read_queue_nums == 5
    assert AuditEntry.objects.filter(action="config.import", target="topics.json").count() == 1


# -- audit --------------------------------------------------------------------------------------


def test_audit_log_lists_and_filters(broker: Broker, operator: Any) -> None:
    client = client_for(operator)
    client.post("/topics/new/", {"name": "Orders", "read_queue_nums": "1", "write_queue_nums": "1"})
    client.post(
        "/topics/new/", {"name": "Payments", "read_queue_nums": "1", "write_queue_nums": "1"}
    )
    client.post("/topics/Orders/send/", {"body": "hi", "body_encoding": "text"})
    page = html(client.get("/audit/"))
    assert page.count("<code>topic.create</code>") == 2 and "<code>message.send</code>" in page
    filtered = html(client.get("/audit/?action=topic.create&target=pay"))
    assert filtered.count("<code>topic.create</code>") == 1 and "Payments" in filtered
    prefix = html(client.get("/audit/?action=message."))
    assert "<code>message.send</code>" in prefix and "<code>topic.create</code>" not in prefix


def test_kafka_named_topic_and_group_are_deleted_by_their_typed_names(
    broker: Broker, operator: Any
) -> None:
    # Kafka spells them shop.orders; the store keeps shop|orders. The delete pages take the
    # name as a person types it, as every other console form does (webui/names.py).
    broker.admin.create_topic("shop|orders", read_queue_nums=1, write_queue_nums=1)
    broker.admin.create_group("shop|billing")
    client = client_for(operator)
    refused = client.post("/topics/shop.orders/delete/", {"confirm_name": "shop.order"})
    assert refused.status_code == 400 and broker.metadata.topics.get("shop|orders") is not None
    deleted = client.post("/topics/shop.orders/delete/", {"confirm_name": "shop.orders"})
    assert deleted.status_code == 302 and broker.metadata.topics.get("shop|orders") is None
    deleted = client.post("/groups/shop.billing/delete/", {"confirm_name": "shop.billing"})
    assert deleted.status_code == 302
    assert AuditEntry.objects.filter(action="group.delete", target="shop|billing").exists()
