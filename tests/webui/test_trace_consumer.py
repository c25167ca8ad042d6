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
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import ApiToken
from accounts.tokens import digest
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
from tests.support.tokens import make_token
from tests.webui.conftest import make_user, send
from webui.bridge import bridge
from webui.routing import websocket_application
from webui.trace import TraceRequestError

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
    return make_token(make_user(username, role))


def connect(path: str, headers: list[tuple[bytes, bytes]] | None = None) -> WebsocketCommunicator:
    return WebsocketCommunicator(websocket_application(), path, headers=headers)


@pytest.fixture
def token(db: None) -> str:
    return token_for("prog")


@pytest.fixture
def orders(broker: Broker) -> Broker:
    broker.admin.create_topic("Orders", read_queue_nums=4)
    return broker


# -- backfill and live --------------------------------------------------------------------------


def test_backfill_then_live_follow(orders: Broker, token: str) -> None:
    broker = orders
    begin = now_ms() - 1000
    old = send(broker, "Orders", b'{"n": 1}', keys=("order-42",))
    send(broker, "Orders", b"other", keys=("order-7",))
    broker.store.dispatch_until_caught_up()
    broker.admin.create_group("billing")
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
    broker.admin.create_topic("Payments", read_queue_nums=1)
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
    get_user_model().objects.filter(username="gone").update(is_active=False)

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


# -- frames a parser must not choke on ----------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "rule"),
    [
        ("[" * 100_000, "max_size"),  # the frame: was RecursionError, close 1011
        ('{"key": "' + "k" * 20_000 + '", "begin": 0}', "max_size"),
        ("[" * 5_000, "depth"),
        ('{"key": "k", "begin": 0, "topic": ' + "[" * 9 + "]" * 9 + "}", "depth"),
        ("{" + '"a":{' * 12 + "}" * 13, "depth"),
    ],
)
def test_oversized_and_deeply_nested_frames_get_bad_request(
    orders: Broker, token: str, frame: str, rule: str
) -> None:
    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_to(text_data=frame)
        error = await next_frame(comm)
        assert (error["type"], error["code"], error["field"], error["rule"]) == (
            "error",
            "bad_request",
            "",
            rule,
        )
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        assert (await until_live(comm))[-1]["phase"] == "live"
        await comm.disconnect()

    async_to_sync(scenario)()


def test_brackets_inside_strings_and_shallow_nesting_are_not_depth() -> None:
    from webui.trace import MAX_FRAME_DEPTH, parse_request

    request = parse_request('{"key": "' + "[{" * 100 + '", "begin": 0}')
    assert request.key == "[{" * 100
    escaped = '{"key": "a\\\\\\"[[[[[[[[[[", "begin": 0}'  # an escaped quote, then brackets
    assert parse_request(escaped).key == 'a\\"[[[[[[[[[['
    shallow = (
        '{"key": "k", "begin": 0, "topic": '
        + "[" * (MAX_FRAME_DEPTH - 1)
        + "]" * (MAX_FRAME_DEPTH - 1)
        + "}"
    )
    with pytest.raises(TraceRequestError) as refused:
        parse_request(shallow)
    assert (refused.value.field, refused.value.rule) == ("topic", "type")


# -- topics the user may read (webui.access.authorizer) -----------------------------------------


def _deny_read(*topics: str, version: int = 1, prefixed: str | None = None) -> Authorizer:
    entries = [
        AclEntry(
            Principal.user("prog"),
            ResourceType.TOPIC,
            topic,
            PatternType.LITERAL,
            Operation.READ,
            Permission.DENY,
        )
        for topic in topics
    ]
    if prefixed:
        entries.append(
            AclEntry(
                Principal("Role", "viewer"),
                ResourceType.TOPIC,
                prefixed,
                PatternType.PREFIXED,
                Operation.ALL,
                Permission.DENY,
            )
        )
    return Authorizer(entries, version)


@pytest.fixture
def acl(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``acl(authorizer)`` makes it the one webui.access hands out (as the database's will)."""

    def install(authorizer: Authorizer) -> None:
        monkeypatch.setattr("webui.access.authorizer", lambda: authorizer)

    return install


def test_a_topic_the_user_may_not_read_is_forbidden(orders: Broker, token: str, acl: Any) -> None:
    orders.admin.create_topic("Payroll", read_queue_nums=1)
    acl(_deny_read("Payroll", prefixed="Secret"))

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        for topic in ("Payroll", "SecretUnknown"):  # existing or not: no existence leak
            await comm.send_json_to({"topic": topic, "key": "k", "begin": 0, "end": None})
            error = await next_frame(comm)
            assert (error["type"], error["code"], error["field"], error["rule"]) == (
                "error",
                "forbidden",
                "topic",
                "forbidden",
            )
            assert f"read on topic '{topic}' is denied" in error["detail"]
        assert bridge.watched() == set()
        # The socket stays open; a readable topic subscribes.
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        assert (await until_live(comm))[-1]["phase"] == "live"
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_topicless_trace_never_sends_unreadable_topics(
    orders: Broker, token: str, acl: Any
) -> None:
    broker = orders
    broker.admin.create_topic("Payroll", read_queue_nums=1)
    broker.admin.create_topic("SecretPlans", read_queue_nums=1)
    for topic in ("Orders", "Payroll", "SecretPlans"):
        send(broker, topic, b"stored", keys=("cust-9",))
    broker.store.dispatch_until_caught_up()
    acl(_deny_read("Payroll", prefixed="Secret"))

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"key": "cust-9", "begin": 0, "end": None})
        frames = await until_live(comm)
        assert frames[0]["topics_total"] == 1
        assert [f["message"]["topic"] for f in frames if f["type"] == "message"] == ["Orders"]
        assert bridge.watched() == {"Orders"}
        for topic in ("Payroll", "SecretPlans", "Orders"):
            await asyncio.to_thread(send, broker, topic, b"live", keys=("cust-9",))
        frame = await next_frame(comm)
        assert (frame["source"], frame["message"]["topic"]) == ("live", "Orders")
        assert await comm.receive_nothing(0.5)
        await comm.disconnect()

    async_to_sync(scenario)()


def test_taking_the_right_away_stops_a_running_subscription(
    orders: Broker, token: str, acl: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ACL change (a new authorizer version) applies to an open socket: the next message
    is not sent, and the subscription ends with ``forbidden`` at the next refresh."""
    import webui.consumers

    monkeypatch.setattr(webui.consumers, "REFRESH_S", 0.2)
    broker = orders
    acl(Authorizer([], 1))

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        await until_live(comm)
        first = await asyncio.to_thread(send, broker, "Orders", b"seen", keys=("k",))
        assert (await next_frame(comm))["message"]["msg_id"] == first.msg_id
        acl(_deny_read("Orders", version=2))
        await asyncio.to_thread(send, broker, "Orders", b"not seen", keys=("k",))
        error = await next_frame(comm)
        assert (error["type"], error["code"], error["field"]) == ("error", "forbidden", "topic")
        assert await comm.receive_nothing(0.5)
        assert bridge.watched() == set()
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_role_taken_away_is_noticed_at_the_next_subscribe(orders: Broker, token: str) -> None:
    user = ApiToken.objects.select_related("user").get(digest=digest(token)).user

    async def scenario() -> None:
        comm = connect(f"/ws/trace/?token={token}")
        await comm.connect()
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        await until_live(comm)
        await database_sync_to_async(user.groups.clear)()
        await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
        error = await next_frame(comm)
        assert (error["type"], error["code"]) == ("error", "forbidden")
        assert (await comm.receive_output(2))["code"] == 4403
        assert bridge.watched() == set()

    async_to_sync(scenario)()
