"""Long polling: a pull waiting on an empty queue returns as soon as a message arrives.

The pull view blocks its request's thread (Django's ASGI handler gives each request's sync
view a thread of its own), and the broker wakes it from the reput thread when the message is
dispatched. These tests run the real reput loop of the runtime.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from rest_framework.test import APIClient

from mqcore.broker import Broker, OutgoingMessage

WAIT_MS = 10_000
LATENCY_BOUND_S = 0.050


def _send_later(
    broker: Broker, topic: str, delay_s: float, sent_at: list[float]
) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        broker.send(topic, [OutgoingMessage(body=b"wake up", queue_id=0)])
        sent_at.append(time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db
def test_waiting_pull_returns_within_50ms_of_a_send(
    viewer: APIClient, broker: Broker, topic: str
) -> None:
    latencies = []
    for offset in range(3):
        sent_at: list[float] = []
        thread = _send_later(broker, topic, 0.3, sent_at)
        started = time.monotonic()
        r = viewer.get(
            f"/api/v1/topics/{topic}/messages",
            {"queue_id": 0, "offset": offset, "wait_ms": WAIT_MS},
        )
        returned = time.monotonic()
        thread.join()
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "FOUND" and [m["body"] for m in body["messages"]] == ["wake up"]
        assert returned - started >= 0.25, "the pull did not wait for the message"
        latencies.append(returned - sent_at[0])
    # Each round is well under the wait (it was woken, not timed out); typically ~2 ms.
    assert max(latencies) < 1.0, latencies
    assert statistics.median(latencies) < LATENCY_BOUND_S, latencies


@pytest.mark.django_db
def test_pull_times_out_empty(viewer: APIClient, topic: str) -> None:
    started = time.monotonic()
    r = viewer.get(f"/api/v1/topics/{topic}/messages", {"queue_id": 1, "wait_ms": 200})
    elapsed = time.monotonic() - started
    assert r.json()["status"] == "NO_NEW_MSG" and r.json()["messages"] == []
    assert 0.18 <= elapsed < 2.0


@pytest.mark.django_db
def test_pull_without_wait_returns_at_once(viewer: APIClient, topic: str) -> None:
    started = time.monotonic()
    viewer.get(f"/api/v1/topics/{topic}/messages", {"queue_id": 1})
    assert time.monotonic() - started < 0.5


async def _asgi_get(app: Any, path: str, query: str, token: str) -> tuple[int, Any]:
    """One GET through an ASGI application, as a server (Daphne) would drive it."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"localhost"), (b"authorization", f"Token {token}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    communicator = ApplicationCommunicator(app, scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await communicator.receive_output(15)
    body = b""
    while True:
        event = await communicator.receive_output(15)
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    await communicator.wait(1)
    return start["status"], json.loads(body)


@pytest.mark.django_db(transaction=True)
def test_long_poll_does_not_block_other_requests_under_asgi(
    broker: Broker, topic: str, make_user: Any
) -> None:
    """Through Django's ASGI handler (what Daphne serves): while one request long-polls,
    another is answered at once, and the poll returns when a message is sent."""
    from django.core.asgi import get_asgi_application

    from tests.support.tokens import make_token

    token = make_token(make_user("asgi", "operator"))
    app = get_asgi_application()

    async def scenario() -> tuple[tuple[int, Any], float, float]:
        poll = asyncio.create_task(
            _asgi_get(
                app, f"/api/v1/topics/{topic}/messages", f"queue_id=2&wait_ms={WAIT_MS}", token
            )
        )
        await asyncio.sleep(0.3)
        started = time.monotonic()
        status, _ = await _asgi_get(app, "/api/v1/status", "", token)
        status_s = time.monotonic() - started
        assert status == 200
        assert not poll.done()
        await asyncio.to_thread(broker.send, topic, [OutgoingMessage(body=b"hi", queue_id=2)])
        sent = time.monotonic()
        response = await asyncio.wait_for(poll, 5)
        return response, status_s, time.monotonic() - sent

    (status, body), status_s, after_send_s = asyncio.run(scenario())
    assert status == 200
    assert [m["body"] for m in body["messages"]] == ["hi"]
    assert status_s < 2.0
    assert after_send_s < 1.0
