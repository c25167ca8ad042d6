"""The REST send path's own duties: born host, batches spread over queues, the audit row."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.test import APIClient

from accounts.models import AuditEntry
from api.views.messages import TopicMessagesView
from mqcore.broker import Broker
from tests.api.conftest import assert_problem, wait_dispatched

pytestmark = pytest.mark.django_db


def post(client: APIClient, topic: str, *messages: dict[str, Any], **extra: Any) -> Any:
    return client.post(
        f"/api/v1/topics/{topic}/messages", {"messages": list(messages)}, format="json", **extra
    )


def test_born_host_is_the_clients_address_and_port(
    operator: APIClient, broker: Broker, topic: str
) -> None:
    r = post(operator, topic, {"body": "x"}, REMOTE_ADDR="10.1.2.3", REMOTE_PORT=40123)
    assert r.status_code == 200, r.content
    wait_dispatched(broker)
    stored = broker.get_message(r.json()["results"][0]["msg_id"])
    assert stored is not None and str(stored.born_host) == "10.1.2.3:40123"
    # A server that gives no port (the test client, by default): port 0.
    r = post(operator, topic, {"body": "y", "properties": {"p": "v"}}, REMOTE_ADDR="::1")
    wait_dispatched(broker)
    stored = broker.get_message(r.json()["results"][0]["msg_id"])
    assert stored is not None and str(stored.born_host) == "[::1]:0"


def test_round_robin_batch_is_stored_queue_by_queue_in_order(
    operator: APIClient, broker: Broker, topic: str
) -> None:
    bodies = [f"m{i}" for i in range(10)]
    r = post(operator, topic, *({"body": b, "keys": [b]} for b in bodies))
    assert r.status_code == 200, r.content
    results = r.json()["results"]
    assert [x["queue_id"] for x in results] == [i % 4 for i in range(10)]
    assert [x["queue_offset"] for x in results] == [i // 4 for i in range(10)]
    wait_dispatched(broker)
    for queue_id in range(4):
        stored = broker.pull(None, topic, queue_id, 0).messages
        assert [m.body.decode() for m in stored] == bodies[queue_id::4]
        # One put per queue: the queue's records are adjacent in the CommitLog.
        for a, b in zip(stored, stored[1:], strict=False):
            assert b.phys_offset == a.phys_offset + a.store_size
    for x, body in zip(results, bodies, strict=True):
        stored_message = broker.get_message(x["msg_id"])
        assert stored_message is not None and stored_message.body.decode() == body
        assert stored_message.msg_id == x["msg_id"]


def test_oversized_keys_fail_the_whole_batch_before_anything_is_stored(
    operator: APIClient, broker: Broker, topic: str
) -> None:
    long_keys = [f"{i:02d}" + "k" * 1000 for i in range(40)]  # ~40 KB of KEYS: over 32767
    r = post(operator, topic, {"body": "ok"}, {"body": "too many keys", "keys": long_keys})
    assert_problem(r, 413, "messages[1].properties", "max_size")
    wait_dispatched(broker)
    assert all(broker.store.max_offset(topic, q) == 0 for q in range(4))


def test_send_audit_row_is_what_record_writes(operator: APIClient, topic: str) -> None:
    before = timezone.now()
    r = post(operator, topic, {"body": "a"}, REMOTE_ADDR="10.9.8.7")
    ids = [x["msg_id"] for x in r.json()["results"]]
    entry = AuditEntry.objects.get(action="message.send")
    assert (entry.user, entry.username, entry.role) == (operator.user, "otto", "operator")  # type: ignore[attr-defined]
    assert (entry.target_type, entry.target, entry.remote_addr) == ("topic", topic, "10.9.8.7")
    assert entry.old_value is None and entry.new_value == {"count": 1, "msg_ids": ids}
    assert before <= entry.timestamp <= timezone.now()
    # Read back through the API like any other entry.
    r = operator.get("/api/v1/audit", {"action": "message.send"})
    (row,) = r.json()["results"]
    assert row["new_value"] == {"count": 1, "msg_ids": ids} and row["username"] == "otto"


def test_a_send_leaves_no_reference_cycle_holding_its_view_request_or_body(
    operator: APIClient, topic: str
) -> None:
    """The view and DRF's Request are unlinked after dispatch (api.views.base), so a send's
    parsed body is freed when the request ends, not by the cyclic garbage collector."""
    marker = "cycle-probe-body"
    gc.collect()
    gc.disable()
    try:
        r = post(operator, topic, *({"body": marker, "keys": [f"k{i}"]} for i in range(20)))
        assert r.status_code == 200, r.content
        del r
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not [o for o in garbage if isinstance(o, TopicMessagesView | Request)]
    # The parsed JSON messages ({"body": marker, ...}) went with them.
    assert not [o for o in garbage if isinstance(o, dict) and o.get("body") == marker]
