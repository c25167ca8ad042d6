"""The live-trace consumer at /ws/trace/, driven with Channels' WebsocketCommunicator over a
real broker runtime (inline reput thread → store listener → bridge → channel layer)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.authtoken.models import Token

from mqcore.broker import Broker
from tests.webui.conftest import make_user, send
from webui.bridge import bridge
from webui.routing import websocket_application

pytestmark = pytest.mark.django_db(transaction=True)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def next_frame(comm: WebsocketCommunicator, timeout: float = 5) -> dict[str, Any]:
    return json.loads(await comm.receive_from(timeout))


async def until_live(comm: WebsocketCommunicator) -> list[dict[str, Any]]:
    """Frames up to the end of backfill (the first ``progress`` of phase ``live``)."""
    out = []
    while True:
        frame = await next_frame(comm)
        out.append(frame)
        if frame["type"] == "progress" and frame["phase"] == "live":
            return out


def token_for(username: str, role: str | None = "viewer") -> str:
    return Token.objects.create(user=make_user(username, role)).key


def connect(path: str, headers: list[tuple[bytes, bytes]] | None = None) -> WebsocketCommunicator:
    return WebsocketCommunicator(websocket_application(), path, headers=headers)


@pytest.fixture
def token(db: None) -> str:
    return token_for("prog")


@pytest.fixture
def orders(broker: Broker) -> Broker:
    broker.create_topic("Orders", read_queue_nums=4)
    return broker


# -- backfill and live --------------------------------------------------------------------------


def test_backfill_then_live_follow(orders: Broker, token: str) -> None:
    broker = orders
    begin = now_ms() - 1000
    old = send(broker, "Orders", b'{"n": 1}', keys=("order-42",))
    send(broker, "Orders", b"other", keys=("order-7",))
    broker.store.dispatch_until_caught_up()
    broker.create_group("billing")
    broker.commit_offset("billing", "Orders", old.queue_id, old.queue_offset + 1)

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        assert (await comm.connect())[0]
        await comm.send_json_to({"topic": "Orders", "key": "order-42", "begin": begin, "end": None})
        frames = await until_live(comm)
        assert frames[0] | {"type": "progress", "phase": "backfill", "topics_total": 1} == frames[0]
        stored = [f for f in frames if f["type"] == "message"]
        assert [f["message"]["offset_msg_id"] for f in stored] == [old.offset_msg_id]
        assert stored[0]["source"] == "stored"
        message = stored[0]["message"]
        assert message["keys"] == ["order-42"] and message["body"] == '{"n": 1}'
        trace = message["trace"]
        assert trace["stored"]["queue_offset"] == old.queue_offset
        assert trace["stored"]["store_timestamp"] == old.store_timestamp
        assert trace["born"]["timestamp"] > 0 and trace["born"]["host"]
        assert trace["groups"] == [
            {
                "group": "billing",
                "state": "CONSUMED",
                "committed_offset": old.queue_offset + 1,
                "reconsume_times": 0,
            }
        ]

        sent = await asyncio.to_thread(send, broker, "Orders", b"later", keys=("x", "order-42"))
        await asyncio.to_thread(send, broker, "Orders", b"not me", keys=("order-43",))
        frame = await next_frame(comm)
        assert frame["type"] == "message" and frame["source"] == "live"
        assert frame["message"]["msg_id"] == sent.msg_id
        assert frame["message"]["body"] == "later"
        assert frame["message"]["trace"]["groups"][0]["state"] == "PENDING"
        assert await comm.receive_nothing(0.3)
        await comm.disconnect()

    async_to_sync(scenario)()
    assert bridge.watched() == set()  # unsubscribed on disconnect


def test_msg_id_is_a_key_too(orders: Broker, token: str) -> None:
    sent = send(orders, "Orders", b"by id", keys=("k",))
    orders.store.dispatch_until_caught_up()

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"topic": None, "key": sent.msg_id, "begin": 0, "end": None})
        frames = await until_live(comm)
        assert [f["message"]["msg_id"] for f in frames if f["type"] == "message"] == [sent.msg_id]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_trace_without_topic_follows_every_topic(orders: Broker, token: str) -> None:
    broker = orders
    broker.create_topic("Payments", read_queue_nums=1)
    send(broker, "Payments", b"stored", keys=("order-1",))
    broker.store.dispatch_until_caught_up()

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"key": "order-1", "begin": 0, "end": None})
        frames = await until_live(comm)
        assert [f["message"]["topic"] for f in frames if f["type"] == "message"] == ["Payments"]
        assert frames[0]["topics_total"] == 2
        await asyncio.to_thread(send, broker, "Orders", b"live", keys=("order-1",))
        frame = await next_frame(comm)
        assert frame["message"]["topic"] == "Orders" and frame["source"] == "live"
        await comm.disconnect()

    async_to_sync(scenario)()


def test_backfill_respects_the_limit(orders: Broker, token: str) -> None:
    for n in range(5):
        send(orders, "Orders", f"m{n}".encode(), keys=("same",))
    orders.store.dispatch_until_caught_up()

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to(
            {"topic": "Orders", "key": "same", "begin": 0, "end": None, "limit": 3}
        )
        frames = await until_live(comm)
        assert sum(f["type"] == "message" for f in frames) == 3
        assert any(f.get("truncated") for f in frames if f["type"] == "progress")
        await comm.disconnect()

    async_to_sync(scenario)()


# -- time range ends ----------------------------------------------------------------------------


def test_closed_range_in_the_past_is_done_after_backfill(orders: Broker, token: str) -> None:
    first = send(orders, "Orders", b"in range", keys=("k",))
    orders.store.dispatch_until_caught_up()
    end = first.store_timestamp
    time.sleep(0.01)
    send(orders, "Orders", b"after end", keys=("k",))
    orders.store.dispatch_until_caught_up()

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": end})
        frames = await until_live(comm)
        assert [f["message"]["body"] for f in frames if f["type"] == "message"] == ["in range"]
        done = await next_frame(comm)
        assert done == {"type": "done", "reason": "range_end", "matched": 1, "truncated": False}
        closed = await comm.receive_output(2)
        assert closed == {"type": "websocket.close", "code": 1000}

    async_to_sync(scenario)()


def test_range_ending_in_the_future_follows_until_its_end(orders: Broker, token: str) -> None:
    broker = orders

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        begin = now_ms()
        end = begin + 1200
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": begin, "end": end})
        await until_live(comm)
        inside = await asyncio.to_thread(send, broker, "Orders", b"inside", keys=("k",))
        frame = await next_frame(comm)
        assert frame["message"]["msg_id"] == inside.msg_id
        await asyncio.sleep(max(0, (end - now_ms()) / 1000) + 0.01)
        await asyncio.to_thread(send, broker, "Orders", b"too late", keys=("k",))
        done = await next_frame(comm, 5)
        assert done["type"] == "done" and done["matched"] == 1

    async_to_sync(scenario)()


# -- refused subscriptions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "field", "rule"),
    [
        ("not json", "", "malformed"),
        ("[1, 2]", "", "type"),
        ('{"begin": 0}', "key", "required"),
        ('{"key": "k"}', "begin", "required"),
        ('{"key": "", "begin": 0}', "key", "blank"),
        ('{"key": "a b", "begin": 0}', "key", "characters"),
        ('{"key": "k", "begin": "yesterday"}', "begin", "type"),
        ('{"key": "k", "begin": true}', "begin", "type"),
        ('{"key": "k", "begin": -5}', "begin", "range"),
        ('{"key": "k", "begin": 10, "end": 5}', "end", "before_begin"),
        ('{"key": "k", "begin": 0, "topic": "bad topic!"}', "topic", "characters"),
        ('{"key": "k", "begin": 0, "topic": 7}', "topic", "type"),
        ('{"key": "k", "begin": 0, "limit": 0}', "limit", "range"),
        ('{"keys": "k", "begin": 0}', "keys", "unknown_field"),
    ],
)
def test_bad_subscribe_frames_get_an_error_frame(
    orders: Broker, token: str, frame: str, field: str, rule: str
) -> None:
    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_to(text_data=frame)
        error = await next_frame(comm)
        assert error["type"] == "error" and error["code"] == "bad_request"
        assert (error["field"], error["rule"]) == (field, rule)
        assert error["detail"]
        # The socket stays open: a good frame now subscribes.
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        assert (await until_live(comm))[-1]["phase"] == "live"
        await comm.disconnect()

    async_to_sync(scenario)()


def test_unknown_topic_and_binary_frames_are_refused(orders: Broker, token: str) -> None:
    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"topic": "Nope", "key": "k", "begin": 0, "end": None})
        error = await next_frame(comm)
        assert (error["type"], error["code"], error["field"]) == ("error", "not_found", "topic")
        await comm.send_to(bytes_data=b"\x00\x01")
        error = await next_frame(comm)
        assert error["code"] == "bad_request"
        await comm.disconnect()

    async_to_sync(scenario)()


# -- broker-side errors -------------------------------------------------------------------------


def test_socket_survives_a_failed_read(
    orders: Broker, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = orders
    real = broker.get_message
    calls = {"n": 0}

    def flaky(msg_id: str) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk on fire")
        return real(msg_id)

    monkeypatch.setattr(broker, "get_message", flaky)

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        await until_live(comm)
        await asyncio.to_thread(send, broker, "Orders", b"first", keys=("k",))
        error = await next_frame(comm)
        assert error["type"] == "error" and error["code"] == "broker_error"
        assert "disk on fire" in error["detail"]
        second = await asyncio.to_thread(send, broker, "Orders", b"second", keys=("k",))
        frame = await next_frame(comm)
        assert frame["type"] == "message" and frame["message"]["msg_id"] == second.msg_id
        await comm.disconnect()

    async_to_sync(scenario)()


def test_broker_not_running_is_an_error_frame(token: str) -> None:
    from cairn import runtime

    runtime.reset()

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        assert (await comm.connect())[0]
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        error = await next_frame(comm)
        assert (error["type"], error["code"]) == ("error", "unavailable")
        await comm.disconnect()

    async_to_sync(scenario)()


# -- authentication -----------------------------------------------------------------------------


def _session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def test_session_cookie_authenticates_a_browser(orders: Broker) -> None:
    cookie = _session_cookie(make_user("vera", "viewer"))

    async def scenario() -> None:
        comm = connect(
            "/ws/trace/",
            headers=[
                (b"origin", b"http://127.0.0.1:8080"),
                (b"host", b"127.0.0.1:8080"),
                (b"cookie", cookie),
            ],
        )
        assert (await comm.connect())[0]
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        assert (await until_live(comm))[-1]["phase"] == "live"
        await comm.disconnect()

    async_to_sync(scenario)()


def test_cross_site_origin_is_refused_even_with_a_session(orders: Broker) -> None:
    cookie = _session_cookie(make_user("vera", "viewer"))

    async def scenario() -> None:
        comm = connect(
            "/ws/trace/", headers=[(b"origin", b"https://evil.example"), (b"cookie", cookie)]
        )
        connected, _ = await comm.connect()
        assert not connected

    async_to_sync(scenario)()


@pytest.mark.parametrize(
    ("query", "code"),
    [("", 4401), ("?token=not-a-token", 4401), ("?token=", 4401)],
)
def test_unauthenticated_is_refused(orders: Broker, query: str, code: int) -> None:
    async def scenario() -> None:
        comm = connect(f"/ws/trace/{query}")
        assert await comm.connect() == (False, code)

    async_to_sync(scenario)()


def test_user_without_role_or_inactive_is_refused(orders: Broker) -> None:
    no_role = token_for("nobody", None)
    inactive_token = token_for("gone", "viewer")
    Token.objects.get(key=inactive_token).user.__class__.objects.filter(username="gone").update(
        is_active=False
    )

    async def scenario() -> None:
        assert await connect(f"/ws/trace/?token={no_role}").connect() == (False, 4403)
        assert await connect(f"/ws/trace/?token={inactive_token}").connect() == (False, 4401)

    async_to_sync(scenario)()


# -- latency ------------------------------------------------------------------------------------


def test_live_latency_on_loopback(orders: Broker, token: str) -> None:
    """A message sent after the subscription reaches the socket well within 100 ms."""
    broker = orders
    samples: list[float] = []

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"topic": "Orders", "key": "lat", "begin": now_ms(), "end": None})
        await until_live(comm)
        for n in range(30):
            started = time.perf_counter()
            await asyncio.to_thread(send, broker, "Orders", f"m{n}".encode(), keys=("lat",))
            frame = await next_frame(comm)
            samples.append((time.perf_counter() - started) * 1000)
            assert frame["message"]["body"] == f"m{n}"
        await comm.disconnect()

    async_to_sync(scenario)()
    p50, worst = statistics.median(samples), max(samples)
    print(
        f"\nlive trace latency (send → frame, in-process, n=30): median {p50:.1f} ms, max {worst:.1f} ms"
    )
    assert p50 < 100
