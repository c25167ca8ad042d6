"""CAIRN_REDIS_URL switches the channel layer to Redis; the live trace relies on it."""

from __future__ import annotations

import asyncio

import pytest
from channels_redis.core import RedisChannelLayer

pytestmark = pytest.mark.redis


def test_group_message_crosses_a_real_redis(redis_url: str) -> None:
    async def roundtrip() -> dict[str, object]:
        sender = RedisChannelLayer(hosts=[redis_url])
        receiver = RedisChannelLayer(hosts=[redis_url])
        channel = await receiver.new_channel()
        await receiver.group_add("trace.TopicA", channel)
        await sender.group_send("trace.TopicA", {"type": "store.appended", "offset": 7})
        message = await asyncio.wait_for(receiver.receive(channel), 10)
        await receiver.group_discard("trace.TopicA", channel)
        await sender.flush()
        await sender.close_pools()
        await receiver.close_pools()
        return message

    assert asyncio.run(roundtrip()) == {"type": "store.appended", "offset": 7}
