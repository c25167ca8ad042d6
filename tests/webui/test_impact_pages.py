"""The console's confirmation steps through Django's test client, for what the browser tests
(tests/e2e/test_console_impact.py) do not reach: a preview token is its uploader's alone, a
table that changed since the preview is shown again, the message page's resend goes through
the same warning, and changes that lose nothing are not held up."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from accounts.models import AuditEntry
from mqcore.broker import Broker
from tests.webui.conftest import client_for, make_user, send

pytestmark = pytest.mark.django_db


def html(response: Any) -> str:
    return response.content.decode()


def _token(response: Any) -> str:
    (token,) = re.findall(r'name="token" value="([^"]+)"', html(response))
    return token


def _without(client: Any, name: str) -> str:
    document = json.loads(client.get("/config/topics.json/download/").content)
    del document["topicConfigTable"][name]
    return json.dumps(document)


def test_a_preview_is_applied_only_by_its_uploader(broker: Broker, admin: Any) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=2)
    client = client_for(admin)
    preview = client.post(
        "/config/", {"document": "topics.json", "text": _without(client, "Orders")}
    )
    assert preview.status_code == 200
    assert 'data-testid="diff-removed"' in html(preview) and "Orders" in html(preview)
    assert "No message is stored there: nothing is lost." in html(preview)
    token = _token(preview)
    other = client_for(make_user("adam", "admin"))
    stolen = other.post(
        "/config/", {"document": "topics.json", "action": "apply", "token": token, "confirm": "on"}
    )
    assert stolen.status_code == 400 and "this preview has expired" in html(stolen)
    assert broker.metadata.topics.get("Orders") is not None
    applied = client.post(
        "/config/", {"document": "topics.json", "action": "apply", "token": token, "confirm": "on"}
    )
    assert applied.status_code == 302
    assert broker.metadata.topics.get("Orders") is None
    flash = html(client.get("/config/"))
    assert "topics.json imported:" in flash and "0 added, 1 removed, 0 changed" in flash
    assert "nothing else changed" not in flash
    # Used once: the same token does not apply again.
    again = client.post(
        "/config/", {"document": "topics.json", "action": "apply", "token": token, "confirm": "on"}
    )
    assert (
        again.status_code == 400 and AuditEntry.objects.filter(action="config.import").count() == 1
    )


def test_a_table_changed_since_the_preview_is_shown_again(broker: Broker, admin: Any) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=2)
    client = client_for(admin)
    preview = client.post(
        "/config/", {"document": "topics.json", "text": _without(client, "Orders")}
    )
    token = _token(preview)
    broker.admin.create_topic(
        "Payments"
    )  # someone else's change: the upload would now remove it too
    moved = client.post(
        "/config/", {"document": "topics.json", "action": "apply", "token": token, "confirm": "on"}
    )
    assert moved.status_code == 200 and "changed since the preview" in html(moved)
    assert "Payments" in html(moved)
    assert broker.metadata.topics.get("Orders") is not None
    applied = client.post(
        "/config/",
        {"document": "topics.json", "action": "apply", "token": _token(moved), "confirm": "on"},
    )
    assert applied.status_code == 302
    assert broker.metadata.topics.get("Payments") is None


def test_a_broken_upload_shows_its_error_and_no_preview(broker: Broker, admin: Any) -> None:
    response = client_for(admin).post(
        "/config/", {"document": "topics.json", "text": '{"topicConfigTable": 7}'}
    )
    assert response.status_code == 400 and 'name="token"' not in html(response)


def test_shrinking_empty_queues_saves_without_asking(broker: Broker, operator: Any) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=4, write_queue_nums=4)
    send(broker, "Orders", queue_id=0)
    broker.store.dispatch_until_caught_up()
    form = {"read_queue_nums": "1", "write_queue_nums": "1", "perm": "6"}
    saved = client_for(operator).post("/topics/Orders/edit/", form)
    assert saved.status_code == 302 and broker.admin.get_topic("Orders").read_queue_nums == 1


def test_shrinking_queues_with_messages_asks_first(broker: Broker, operator: Any) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=4, write_queue_nums=4)
    send(broker, "Orders", queue_id=3)
    broker.store.dispatch_until_caught_up()
    client = client_for(operator)
    form = {"read_queue_nums": "2", "write_queue_nums": "4", "perm": "6"}
    asked = client.post("/topics/Orders/edit/", form)
    page = html(asked)
    assert asked.status_code == 200 and 'data-testid="shrink-impact"' in page
    assert "1 message stranded" in page and "No group consumes Orders" in page
    assert broker.admin.get_topic("Orders").read_queue_nums == 4
    saved = client.post("/topics/Orders/edit/", form | {"confirm_impact": "on"})
    assert saved.status_code == 302 and broker.admin.get_topic("Orders").read_queue_nums == 2


def test_the_message_pages_resend_warns_too(broker: Broker, operator: Any) -> None:
    broker.admin.create_topic("Orders")
    broker.admin.create_group("billing")
    sent = send(broker, "Orders", b"poison", keys=("order-9",))
    broker.store.dispatch_until_caught_up()
    broker.send_back("billing", sent.offset_msg_id, delay_level=-1)
    broker.store.dispatch_until_caught_up()
    client = client_for(operator)
    first = client.post("/groups/billing/dlq/", {"msg_id": [sent.msg_id]})
    assert "1 of 1 resent" in html(first)
    broker.store.dispatch_until_caught_up()
    # The message page's button posts the msgId: the same warning, nothing resent.
    second = client.post("/groups/billing/dlq/", {"msg_id": [sent.msg_id]})
    page = html(second)
    assert 'data-testid="resend-again"' in page and "by <strong>otto</strong>" in page
    assert 'data-testid="resend-outcomes"' not in page
    assert broker.admin.topic_status("Orders").message_count == 2
    third = client.post("/groups/billing/dlq/", {"msg_id": [sent.msg_id], "again": "1"})
    assert "resent again" in html(third)
    assert AuditEntry.objects.filter(action="message.dlq_resend", target=sent.msg_id).count() == 2
