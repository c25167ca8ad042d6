"""aiokafka 0.14 (asyncio) against the listener: every codec, acks, idempotence, groups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ..harness import RunningListener

pytestmark = pytest.mark.e2e


def run[T](coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro_fn(), 60)

    return asyncio.run(main())


async def admin_create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def consume(consumer: AIOKafkaConsumer, count: int, timeout_s: float = 20) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=200)).values():
            got += records
    return got


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize(("acks", "idempotent"), [(0, False), (1, False), ("all", True)])
def test_produce_every_codec_and_fetch(
    running: RunningListener, names, compression, acks, idempotent
) -> None:
    topic = names("codec")

    async def scenario() -> list[Any]:
        await admin_create(running.bootstrap, topic, 1)
        producer = AIOKafkaProducer(
            bootstrap_servers=running.bootstrap,
            acks=acks,
            compression_type=compression,
            enable_idempotence=idempotent,
            linger_ms=5,
        )
        await producer.start()
        try:
            for i in range(40):
                await producer.send(
                    topic,
                    key=b"k%d" % i,
                    value=b"payload-%d " % i * 30,
                    headers=[("h", b"v%d" % i)],
                )
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=running.bootstrap)  # checks CRCs
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            return await consume(consumer, 40)
        finally:
            await consumer.stop()

    got = run(scenario)
    assert [(r.offset, r.key) for r in got] == [(i, b"k%d" % i) for i in range(40)]
    assert got[7].value == b"payload-7 " * 30 and list(got[7].headers) == [("h", b"v7")]


def test_fetch_from_the_middle_of_a_produced_batch(running: RunningListener, names) -> None:
    topic = names("mid")

    async def scenario() -> list[Any]:
        await admin_create(running.bootstrap, topic, 1)
        producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap, linger_ms=50)
        await producer.start()
        try:
            for i in range(100):
                await producer.send(topic, b"v%d" % i, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        assert running.listener is not None
        entries = running.listener.ctx.batch_cache.run(topic.replace(".", "|"), 0, 37, 1, 1)
        assert entries and entries[0][0].base < 37  # offset 37 is inside a cached batch
        consumer = AIOKafkaConsumer(bootstrap_servers=running.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 37)  # the client skips the batch's records before it
            return await consume(consumer, 63)
        finally:
            await consumer.stop()

    got = run(scenario)
    assert [(r.offset, r.value) for r in got] == [(i, b"v%d" % i) for i in range(37, 100)]


def test_group_rebalance_commit_and_describe(running: RunningListener, names) -> None:
    topic, group = names("grp"), names("g")

    async def scenario() -> tuple[Any, ...]:
        await admin_create(running.bootstrap, topic, 2)
        producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap)
        await producer.start()
        for i in range(10):
            await producer.send_and_wait(topic, b"m%d" % i, partition=i % 2)
        await producer.stop()
        started = time.monotonic()
        c1 = AIOKafkaConsumer(
            topic,
            bootstrap_servers=running.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c1.start()
        first = await consume(c1, 10)
        join_s = time.monotonic() - started
        await c1.commit()
        c2 = AIOKafkaConsumer(
            topic, bootstrap_servers=running.bootstrap, group_id=group, auto_offset_reset="earliest"
        )
        await c2.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (c2.assignment() and len(c1.assignment()) == 1):
            await asyncio.gather(c1.getmany(timeout_ms=100), c2.getmany(timeout_ms=100))
        split = (set(c1.assignment()), set(c2.assignment()))
        committed = await c1.committed(TopicPartition(topic, 0))
        admin = AIOKafkaAdminClient(bootstrap_servers=running.bootstrap)
        await admin.start()
        described = await admin.describe_consumer_groups([group])
        listed = await admin.list_consumer_groups()
        await admin.close()
        await c2.stop()
        await c1.stop()
        return first, join_s, split, committed, described, listed

    first, join_s, split, committed, described, listed = run(scenario)
    assert len(first) == 10 and join_s < 3
    assert len(split[0]) == len(split[1]) == 1 and split[0] != split[1]
    assert committed == 5
    _error, _group, state, _type, protocol, members = described[0].groups[0]
    assert state == "Stable" and protocol == "roundrobin" and len(members) == 2
    assert (group, "consumer") in listed


def test_offsets_for_times_and_ends(running: RunningListener, names) -> None:
    topic = names("ts")

    async def scenario() -> tuple[Any, ...]:
        await admin_create(running.bootstrap, topic, 1)
        producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap)
        await producer.start()
        for ts in (10_000, 20_000, 30_000):
            await producer.send_and_wait(topic, b"x", timestamp_ms=ts)
        await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=running.bootstrap)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        found = await consumer.offsets_for_times({tp: 15_000})
        ends = (await consumer.beginning_offsets([tp]), await consumer.end_offsets([tp]))
        await consumer.stop()
        return found[tp], ends

    found, (begin, end) = run(scenario)
    assert (found.offset, found.timestamp) == (1, 20_000)
    assert list(begin.values()) == [0] and list(end.values()) == [3]


def test_fetch_returns_on_arrival_not_after_max_wait(running: RunningListener, names) -> None:
    topic = names("lat")

    async def scenario() -> list[float]:
        await admin_create(running.bootstrap, topic, 1)
        producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap, linger_ms=0)
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=running.bootstrap,
            fetch_max_wait_ms=5_000,
            group_id=names("g"),
            auto_offset_reset="latest",
        )
        await asyncio.gather(producer.start(), consumer.start())
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=100)
        await consumer.seek_to_end()
        await consumer.position(TopicPartition(topic, 0))
        latencies = []
        for _ in range(5):
            sent = time.monotonic()
            await producer.send_and_wait(topic, b"ping")
            got = await consume(consumer, 1, timeout_s=10)
            assert got
            latencies.append(time.monotonic() - sent)
        await asyncio.gather(producer.stop(), consumer.stop())
        return latencies

    latencies = run(scenario)
    assert sorted(latencies)[2] < 0.5, latencies  # max_wait is 5 s: it did not wait for it
