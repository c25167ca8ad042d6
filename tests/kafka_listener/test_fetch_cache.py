"""Fetch served from produced batches (batch_cache.py) and dispatch wake-ups (arrivals.py),
against a real Broker on tmp_path."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_listener.arrivals import Arrivals
from kafka_listener.batch_cache import BatchCache, CachedBatch
from kafka_listener.compression import Compression
from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import KafkaContext, ListenerConfig, supported_versions
from kafka_listener.records import decode_batches, encode_batch
from kafka_listener.schemas import ApiKey
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.broker.types import OutgoingMessage
from mqcore.clock import SystemClock

from .harness import TEST_STORE_CONFIG
from .test_handlers import BATCH, call, fetch_request, fetched, produce_request, produced

RECORDS = [(r.offset_delta, r.timestamp, r.key, r.value, tuple(r.headers)) for r in
           decode_batches(BATCH)[0].records]  # fmt: skip


def _broker(root: Path, dispatch_on_send: bool) -> Broker:
    b = Broker.open(root, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=dispatch_on_send))
    b.admin.create_topic("t", read_queue_nums=2, write_queue_nums=2)
    return b


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = _broker(tmp_path, dispatch_on_send=True)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def ctx(broker: Broker) -> KafkaContext:
    return KafkaContext(
        broker, ListenerConfig(port=0), SystemClock(), versions=supported_versions()
    )


def _records(data: bytes) -> list[tuple[int, list[tuple]]]:
    """``(base_offset, records)`` per batch, CRC checked."""
    return [
        (b.header.base_offset, [(r.offset_delta, r.timestamp, r.key, r.value, tuple(r.headers))
                                for r in b.records])
        for b in decode_batches(data)
    ]  # fmt: skip


def test_fetch_serves_the_produced_batches_as_they_were(ctx: KafkaContext) -> None:
    assert produced(call(ctx, ApiKey.PRODUCE, produce_request("t", 0, BATCH)))["base_offset"] == 0
    assert produced(call(ctx, ApiKey.PRODUCE, produce_request("t", 0, BATCH)))["base_offset"] == 3
    part = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 1)))
    assert part["error_code"] == 0 and part["high_watermark"] == 6
    # The batch holding offset 1 and the next one, byte for byte but the base offset (Kafka
    # also returns whole batches: clients skip the records before their fetch offset).
    data = part["records"]
    assert data[8 : len(BATCH)] == BATCH[8:] and data[len(BATCH) + 8 :] == BATCH[8:]
    assert _records(data) == [(0, RECORDS), (3, RECORDS)]


def test_a_gap_written_by_another_front_end_is_read_from_the_store(
    ctx: KafkaContext, broker: Broker
) -> None:
    call(ctx, ApiKey.PRODUCE, produce_request("t", 0, BATCH))  # 0-2
    broker.send("t", [OutgoingMessage(b"rest", queue_id=0, born_timestamp=7)])  # 3
    call(ctx, ApiKey.PRODUCE, produce_request("t", 0, BATCH))  # 4-6
    assert _records(fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 0)))["records"]) == [
        (0, RECORDS)  # stops at the gap
    ]
    (rebuilt,) = _records(fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 3)))["records"])
    assert rebuilt[0] == 3 and rebuilt[1][0] == (0, 7, None, b"rest", ())
    assert [r[2:4] for r in rebuilt[1][1:]] == [r[2:4] for r in RECORDS]
    assert _records(fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 5)))["records"]) == [
        (4, RECORDS)
    ]


def test_a_cached_batch_the_store_does_not_hold_is_not_served(
    ctx: KafkaContext, broker: Broker
) -> None:
    broker.send("t", [OutgoingMessage(b"new", queue_id=0, born_timestamp=5) for _ in range(3)])
    # What a queue whose offsets started again would leave behind: an entry for offsets
    # that now hold other messages.
    ctx.batch_cache.put("t", 0, CachedBatch(0, 3, BATCH, "another message", 0))
    (batch,) = _records(fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 0)))["records"])
    assert batch == (0, [(i, 5, None, b"new", ()) for i in range(3)])
    assert ctx.batch_cache.run("t", 0, 0, 1 << 20, 100) == []  # the stale entry is gone


def test_a_deleted_topic_answers_as_the_store_does(ctx: KafkaContext, broker: Broker) -> None:
    call(ctx, ApiKey.PRODUCE, produce_request("t", 0, BATCH))
    broker.admin.delete_topic("t")  # over REST: the listener is not told
    broker.admin.create_topic("t", read_queue_nums=2, write_queue_nums=2)
    broker.send("t", [OutgoingMessage(b"new", queue_id=0) for _ in range(3)])  # offsets 3-5
    gone = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 0)))
    assert gone["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE and gone["log_start_offset"] == 3


def test_zstd_batches_go_only_to_fetch_v10_and_later(ctx: KafkaContext) -> None:
    zstd = encode_batch(RECORDS, compression=Compression.ZSTD)
    call(ctx, ApiKey.PRODUCE, produce_request("t", 1, zstd))
    new = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 1, 0), version=11))["records"]
    old = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 1, 0), version=9))["records"]
    assert decode_batches(new)[0].header.compression == Compression.ZSTD
    assert decode_batches(old)[0].header.compression == Compression.NONE  # rebuilt
    assert _records(new) == _records(old) == [(0, RECORDS)]


def test_undispatched_records_are_not_served(tmp_path: Path) -> None:
    broker = _broker(tmp_path, dispatch_on_send=False)
    try:
        ctx = KafkaContext(broker, ListenerConfig(port=0), versions=supported_versions())
        assert call(ctx, ApiKey.PRODUCE, produce_request("t", 0, BATCH, acks=0)) is None
        part = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 0)))
        assert part["records"] == b"" and part["high_watermark"] == 0
        broker.store.dispatch_until_caught_up()
        part = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 0)))
        assert part["records"][8:] == BATCH[8:]
    finally:
        broker.close()


# -- BatchCache ---------------------------------------------------------------------------


def _entry(base: int, count: int, size: int = 10) -> CachedBatch:
    return CachedBatch(base, base + count, bytes(size), f"id{base}", 0)


def test_cache_runs_are_contiguous_and_bounded() -> None:
    cache = BatchCache(1000)
    for base in (0, 10, 20, 40):
        cache.put("t", 0, _entry(base, 10))
    run = cache.run("t", 0, 15, 1000, 1000)
    assert [(e.base, check) for e, check in run] == [(10, True), (20, False)]  # gap at 30
    assert [e.base for e, _ in cache.run("t", 0, 5, 25, 1000)] == [0, 10]  # by bytes
    assert [e.base for e, _ in cache.run("t", 0, 5, 1000, 14)] == [0]  # by records: 5 + 10 > 14
    assert [e.base for e, _ in cache.run("t", 0, 5, 1, 1)] == [0]  # the first one always
    assert cache.run("t", 0, 30, 1000, 1000) == [] and cache.run("t", 1, 0, 1000, 1000) == []


def test_cache_evicts_oldest_first_and_drops_overlapped_queues() -> None:
    cache = BatchCache(25)
    cache.put("t", 0, _entry(0, 10))
    cache.put("u", 0, _entry(0, 10))
    cache.put("t", 0, _entry(10, 10))
    assert cache.size_bytes == 20
    assert cache.run("t", 0, 0, 100, 100) == [] and cache.size_bytes == 20  # evicted
    assert [e.base for e, _ in cache.run("t", 0, 10, 100, 100)] == [10]
    cache.put("u", 0, _entry(5, 3))  # overlaps u's [0, 10): its offsets started again
    assert [e.base for e, _ in cache.run("u", 0, 5, 100, 100)] == [5]
    assert cache.run("u", 0, 0, 100, 100) == [] and cache.size_bytes == 20
    cache.drop_topic("t")
    assert cache.run("t", 0, 10, 100, 100) == [] and cache.size_bytes == 10


def test_entries_put_before_the_first_of_a_run_are_checked_too(
    ctx: KafkaContext, broker: Broker
) -> None:
    sent = broker.send("t", [OutgoingMessage(b"rest", queue_id=0) for _ in range(6)])
    cache = ctx.batch_cache
    # Two producers' batches put out of order; the later offsets' entry is stale.
    cache.put("t", 0, CachedBatch(3, 6, BATCH, "not what the store holds", 0))
    cache.put("t", 0, CachedBatch(0, 3, BATCH, sent[0].msg_id, 0))
    assert [check for _, check in cache.run("t", 0, 0, 1 << 20, 100)] == [True, True]
    part = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 0)))
    assert part["records"][8:] == BATCH[8:]  # the checked first entry, not the stale one
    assert cache.run("t", 0, 0, 1 << 20, 100) == []  # the queue's entries were dropped


# -- Arrivals ----------------------------------------------------------------------------


def test_a_burst_of_arrivals_wakes_a_waiter_once(tmp_path: Path) -> None:
    broker = _broker(tmp_path, dispatch_on_send=False)
    arrivals = Arrivals(broker.store)
    broker.store.add_arrivals_listener(arrivals.on_arrivals)
    try:

        def burst() -> None:
            broker.send("t", [OutgoingMessage(b"x", queue_id=0) for _ in range(2000)])
            broker.store.dispatch_until_caught_up()

        async def wait() -> bool:
            waiting = asyncio.ensure_future(arrivals.wait([("t", 0, 0)], 10, 10))
            while not arrivals.waiting:
                await asyncio.sleep(0.001)
            threading.Thread(target=burst).start()
            return await waiting

        assert asyncio.run(wait())
        assert 1 <= arrivals.wakeups <= 3  # not one per record
        assert arrivals.waiting == 0
    finally:
        broker.close()


def test_waits_for_any_or_every_queue_and_times_out(broker: Broker) -> None:
    arrivals = Arrivals(broker.store)
    broker.send("t", [OutgoingMessage(b"x", queue_id=0)])
    refs = [("t", 0, 0), ("t", 1, 0)]

    async def run() -> tuple[bool, bool, bool]:
        return (
            await arrivals.wait(refs, 1, 1),
            await arrivals.wait(refs, 0.05, 0.01, every=True),
            await arrivals.wait([("t", 0, 1)], 0.05, 0.01),
        )

    assert asyncio.run(run()) == (True, False, False)
