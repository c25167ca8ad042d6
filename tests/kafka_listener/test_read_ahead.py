"""Read-ahead of store-path fetches (read_ahead.py and its use in handlers/fetch.py)."""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kafka_listener import mapping
from kafka_listener.handlers import KafkaContext, ListenerConfig, fetch, supported_versions
from kafka_listener.read_ahead import ReadAhead
from kafka_listener.record_codec import Record
from kafka_listener.records import decode_batches
from kafka_listener.schemas import ApiKey
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.clock import SystemClock

from .harness import TEST_STORE_CONFIG, RunningListener
from .test_handlers import call, fetch_request, fetched

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

LIMIT = 20_000  # partition_max_bytes: a few hundred of the records below per Fetch
MAX_RECORDS = ListenerConfig().max_fetch_records


# --- ReadAhead itself -------------------------------------------------------------------


def test_take_hands_out_a_build_once() -> None:
    ahead: ReadAhead[str] = ReadAhead()
    try:
        assert ahead.start(("t", 0, 10), 100, lambda: "batch at 10") is not None
        assert ahead.start(("t", 0, 10), 100, lambda: "again") is None  # under way
        assert ahead.start(("t", 0, 20), 100, lambda: "batch at 20") is not None  # another
        future = ahead.take(("t", 0, 10))
        assert future is not None and future.result() == "batch at 10"
        assert ahead.take(("t", 0, 10)) is None  # once
        assert len(ahead) == 1
        future = ahead.take(("t", 0, 20))
        assert future is not None and future.result() == "batch at 20"
    finally:
        ahead.close()


def test_bounded_in_entries_and_limit() -> None:
    ahead: ReadAhead[int] = ReadAhead(max_entries=2, max_limit=1000)
    try:
        assert ahead.start(("t", 0, 0), 1001, lambda: 0) is None  # over max_limit
        for offset in range(3):
            assert ahead.start(("t", 0, offset), 1000, lambda o=offset: o) is not None  # type: ignore[misc]
        assert len(ahead) == 2
        assert ahead.take(("t", 0, 0)) is None  # the oldest went
        future = ahead.take(("t", 0, 2))
        assert future is not None and future.result() == 2
    finally:
        ahead.close()
    assert ahead.start(("t", 0, 9), 10, lambda: 9) is None  # closed


def test_a_build_runs_off_the_calling_thread() -> None:
    ahead: ReadAhead[str] = ReadAhead()
    try:
        ahead.start(("t", 0, 0), 1, lambda: threading.current_thread().name)
        future = ahead.take(("t", 0, 0))
        assert future is not None and future.result().startswith("kafka-read-ahead")
    finally:
        ahead.close()


# --- in the Fetch handler ---------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))
    b.admin.create_topic("t", read_queue_nums=1, write_queue_nums=1)
    records = [Record(i, 1_700_000_000_000 + i, None, b"value-%d" % i) for i in range(2000)]
    b.send("t", [mapping.record_to_message(r, 0) for r in records])
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def ctx(broker: Broker) -> Iterator[KafkaContext]:
    c = KafkaContext(
        broker,
        ListenerConfig(port=0, fetch_cache_bytes=0),
        SystemClock(),
        versions=supported_versions(),
    )
    try:
        yield c
    finally:
        c.close()


def fetch_at(ctx: KafkaContext, offset: int, limit: int = LIMIT) -> bytes:
    request = fetch_request("t", 0, offset)
    request["topics"][0]["partitions"][0]["partition_max_bytes"] = limit
    part = fetched(call(ctx, ApiKey.FETCH, request))
    assert part["error_code"] == 0 and part["high_watermark"] == 2000
    records: bytes = part["records"]
    return records


def end_of(records: bytes) -> int:
    (batch,) = decode_batches(records)
    return batch.header.base_offset + batch.header.last_offset_delta + 1


def put_back(
    ahead: ReadAhead[fetch._Local],
    key: tuple[str, int, int],
    build: Callable[[], fetch._Local],
) -> None:
    """Start ``build`` at ``key`` instead and wait until it ran (a build not started yet is
    cancelled and read in the foreground, which is not what these tests are about)."""
    ahead.take(key)  # what the handler read ahead there itself
    future = ahead.start(key, LIMIT, build)
    assert future is not None
    with contextlib.suppress(Exception):
        future.result()


def fresh(broker: Broker, offset: int) -> fetch._Local:
    return fetch._read_local(broker, "t", 0, offset, LIMIT, MAX_RECORDS)


def test_the_next_fetch_takes_the_batch_read_ahead(ctx: KafkaContext, broker: Broker) -> None:
    first = fetch_at(ctx, 0)
    end = end_of(first)
    assert 0 < end < 2000 and first == fresh(broker, 0).records
    ahead = ctx.read_ahead
    future = ahead.take(("t", 0, end))
    assert future is not None
    built = future.result()
    assert built.records == fresh(broker, end).records  # what a read would give
    # Put back a valid build for fewer records (as a smaller limit gives): the Fetch answers
    # exactly it, so it was served from the read-ahead.
    smaller = fetch._read_local(broker, "t", 0, end, 500, MAX_RECORDS)
    assert smaller.first_phys == built.first_phys and smaller.records != built.records
    put_back(ahead, ("t", 0, end), lambda: smaller)
    assert fetch_at(ctx, end) == smaller.records
    # ...and it read ahead again, from where that answer ended.
    assert ahead.take(("t", 0, end_of(smaller.records))) is not None
    # A build bigger than the next request allows is not served.
    put_back(ahead, ("t", 0, end), lambda: built)
    assert fetch_at(ctx, end, limit=500) == smaller.records


def test_a_build_the_store_no_longer_matches_is_not_served(
    ctx: KafkaContext, broker: Broker
) -> None:
    end = end_of(fetch_at(ctx, 0))
    ahead = ctx.read_ahead
    assert ahead.take(("t", 0, end)) is not None
    # What a queue whose offsets started again would leave behind: the first record's
    # CommitLog position differs.
    stale = replace(fresh(broker, 0), first_phys=fresh(broker, 0).first_phys + 1)
    put_back(ahead, ("t", 0, 0), lambda: stale)
    assert fetch_at(ctx, 0) == fresh(broker, 0).records

    def fails() -> fetch._Local:
        raise RuntimeError("build failed")

    put_back(ahead, ("t", 0, end), fails)  # a failed build: read instead
    assert fetch_at(ctx, end) == fresh(broker, end).records


def test_no_read_ahead_at_the_end_of_the_queue(ctx: KafkaContext) -> None:
    request = fetch_request("t", 0, 0)  # 1 MiB: everything in one answer
    assert end_of(fetched(call(ctx, ApiKey.FETCH, request))["records"]) == 2000
    assert len(ctx.read_ahead) == 0


@pytest.mark.e2e
def test_a_real_consumer_reads_everything_in_order_through_read_ahead(tmp_path: Path) -> None:
    config = ListenerConfig(port=0, initial_rebalance_delay_ms=100, fetch_cache_bytes=0)
    values = [b"message-%05d" % i for i in range(5000)]
    with RunningListener(tmp_path, config) as running:
        assert running.broker is not None
        running.broker.admin.create_topic("ahead", read_queue_nums=1, write_queue_nums=1)
        producer = KafkaProducer(bootstrap_servers=running.bootstrap, linger_ms=5)
        try:
            for value in values:
                producer.send("ahead", value, partition=0)
            producer.flush(timeout=30)
        finally:
            producer.close()
        tp = TopicPartition("ahead", 0)
        consumer = KafkaConsumer(
            bootstrap_servers=running.bootstrap,
            enable_auto_commit=False,
            max_partition_fetch_bytes=16_384,  # many Fetches, each read ahead
        )
        try:
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got: list[tuple[int, bytes]] = []
            for _ in range(200):
                for records in consumer.poll(timeout_ms=200).values():
                    got += [(r.offset, r.value) for r in records]
                if len(got) >= len(values):
                    break
        finally:
            consumer.close()
    assert got == list(enumerate(values))


def test_a_build_not_started_yet_is_read_in_the_foreground(
    ctx: KafkaContext, broker: Broker
) -> None:
    end = end_of(fetch_at(ctx, 0))
    ahead = ctx.read_ahead
    ahead.take(("t", 0, end))
    release = threading.Event()

    def blocks() -> fetch._Local:  # keeps the one read-ahead thread busy
        release.wait(30)
        return fresh(broker, 0)

    busy = ahead.start(("other", 0, 0), LIMIT, blocks)
    queued = ahead.start(("t", 0, end), LIMIT, lambda: fresh(broker, 0))  # would be wrong
    assert busy is not None and queued is not None
    try:
        assert fetch_at(ctx, end) == fresh(broker, end).records  # no wait for the queue
        assert queued.cancelled()
    finally:
        release.set()
