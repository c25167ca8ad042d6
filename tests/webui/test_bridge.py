"""The bridge's contract: group names, the ``store.appended`` event, and publishing from a
process without the server's loop (what a Celery reput worker does) through Redis."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import override_settings

from mqcore.broker import Broker
from mqcore.format.msgid import HostAddress
from mqcore.format.record import DispatchRequest
from tests.support.tokens import make_token
from tests.webui.conftest import make_user, send
from webui.bridge import bridge, event_from_dispatch, group_for_topic, publish
from webui.routing import websocket_application

VALID_GROUP = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def test_group_names_are_valid_and_distinct() -> None:
    assert group_for_topic("Orders") == "trace.topic.Orders"
    assert group_for_topic("%DLQ%billing") == "trace.topic..25DLQ.25billing"
    assert group_for_topic("a|b") == "trace.topic.a.7Cb"
    long = "%RETRY%" + "g" * 120
    name = group_for_topic(long)
    assert name.startswith("trace.topic-sha1.") and len(name) == len("trace.topic-sha1.") + 40
    for topic in ("Orders", "%DLQ%billing", "a|b", long, "x" * 92):
        name = group_for_topic(topic)
        assert set(name) <= VALID_GROUP and len(name) < 100
    assert (
        len({group_for_topic(t) for t in ("a%b", "a|b", "a.25b", "a_b")}) == 3
    )  # '.' is never in a topic


def test_event_from_dispatch() -> None:
    request = DispatchRequest(
        topic="Orders",
        queue_id=2,
        queue_offset=7,
        phys_offset=4096,
        size=200,
        tags_code=1,
        store_timestamp=1_700_000_000_123,
        keys="order-42 customer-7",
        uniq_key="AC11000100002A9F0000000000000001",
        sys_flag=0,
        prepared_transaction_offset=0,
        properties={"TAGS": "created", "KEYS": "order-42 customer-7"},
    )
    event = event_from_dispatch(request, HostAddress("127.0.0.1", 10911))
    assert event == {
        "type": "store.appended",
        "v": 1,
        "topic": "Orders",
        "queue_id": 2,
        "queue_offset": 7,
        "commitlog_offset": 4096,
        "size": 200,
        "store_timestamp": 1_700_000_000_123,
        "keys": "order-42 customer-7",
        "uniq_key": "AC11000100002A9F0000000000000001",
        "tags": "created",
        "offset_msg_id": "7F00000100002A9F0000000000001000",
    }
    json.dumps(event)  # JSON scalars only (msgpack over Redis takes them too)


def test_unwatched_topics_cost_nothing(broker: Broker) -> None:
    broker.admin.create_topic("Orders")
    sent_before = bridge.sent
    send(broker, "Orders", b"x", keys=("k",))
    broker.store.dispatch_until_caught_up()
    assert bridge.sent == sent_before


def test_the_bridge_is_a_store_listener_only_while_a_topic_is_watched(broker: Broker) -> None:
    """A per-record listener takes reput off its fast path: none without a live trace."""
    store = broker.store

    def listening() -> bool:
        return bridge.on_dispatch in store.listeners

    async def scenario() -> None:
        bridge.attach(store)
        assert not listening() and not bridge.listening
        bridge.watch(["Orders", "Payments"])
        assert listening() and bridge.listening
        bridge.watch(["Orders"])  # a second trace of the same topic
        bridge.unwatch(["Orders", "Payments"])
        assert listening()  # one trace still follows Orders
        bridge.unwatch(["Orders"])
        assert not listening() and not bridge.listening
        bridge.watch(["Orders"])
        bridge.attach(store)  # a second client attaching changes nothing
        assert store.listeners.count(bridge.on_dispatch) == 1

    asyncio.run(scenario())
    bridge.detach()
    assert not listening()


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_events_published_by_another_process_reach_the_trace(
    broker: Broker, redis_url: str
) -> None:
    """With CAIRN_REDIS_URL the channel layer is Redis: a Celery reput worker publishes the
    same events with ``publish()`` and subscribed consumers deliver them."""
    broker.admin.create_topic("Orders")
    token = make_token(make_user("prog", "viewer"))
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_url]},
        }
    }

    with override_settings(CHANNEL_LAYERS=layers):
        channel_layers.backends.clear()
        assert type(get_channel_layer()).__name__ == "RedisChannelLayer"

        async def scenario() -> None:
            comm = WebsocketCommunicator(websocket_application(), f"/ws/trace/?token={token}")
            await comm.connect()
            await comm.send_json_to({"topic": "Orders", "key": "k", "begin": 0, "end": None})
            while json.loads(await comm.receive_from(5)).get("phase") != "live":
                pass
            # Stand in for a worker: this process's store stops forwarding, the message is
            # stored, and its event is published from a thread with no event loop.
            bridge.detach()
            sent = await asyncio.to_thread(send, broker, "Orders", b"via redis", keys=("k",))
            await asyncio.to_thread(broker.store.dispatch_until_caught_up)
            assert await comm.receive_nothing(0.2)
            event = {
                "type": "store.appended",
                "v": 1,
                "topic": "Orders",
                "queue_id": sent.queue_id,
                "queue_offset": sent.queue_offset,
                "commitlog_offset": 0,
                "size": 0,
                "store_timestamp": sent.store_timestamp,
                "keys": "k",
                "uniq_key": sent.msg_id,
                "tags": None,
                "offset_msg_id": sent.offset_msg_id,
            }
            errors: list[BaseException] = []

            def worker() -> None:
                try:
                    publish([event])
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)

            thread = threading.Thread(target=worker)
            started = time.monotonic()
            thread.start()
            frame = json.loads(await comm.receive_from(5))
            await asyncio.to_thread(thread.join)
            assert not errors
            assert frame["type"] == "message" and frame["message"]["msg_id"] == sent.msg_id
            assert time.monotonic() - started < 5
            await comm.disconnect()

        try:
            async_to_sync(scenario)()
        finally:
            async_to_sync(get_channel_layer().close_pools)()
            channel_layers.backends.clear()
    channel_layers.backends.clear()
