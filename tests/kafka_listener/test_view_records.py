"""view_records: records from raw views equal mapping.message_to_record's, so the fetch's
store path builds the same batch bytes as the pull path."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from kafka_listener import mapping
from kafka_listener.handlers import KafkaContext, ListenerConfig, supported_versions
from kafka_listener.record_codec import Record, RecordLike
from kafka_listener.records import decode_batches, encode_batch
from kafka_listener.schemas import ApiKey
from kafka_listener.view_records import ViewBatch, _fast
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.broker.types import OutgoingMessage
from mqcore.clock import SystemClock
from mqcore.message import Message
from mqcore.store.read.record_views import RecordView

from .harness import TEST_STORE_CONFIG
from .test_handlers import call, fetch_request, fetched

KAFKA_RECORDS = [
    Record(0, 1_700_000_000_000, b"key", b"value"),
    Record(1, 1_700_000_000_001, None, b"no key"),
    Record(2, 1_700_000_000_002, b"k", None),  # tombstone
    Record(3, 1_700_000_000_003, b"k", b""),
    Record(4, 1_700_000_000_004, b"", b"empty key"),
    Record(5, 1_700_000_000_005, b"two words", b"v"),
    Record(6, 1_700_000_000_006, b"\xff\x00bin", b"v"),
    Record(7, 1_700_000_000_007, "ключ".encode(), b"v"),
    Record(8, 1_700_000_000_008, b"k", b"v", (("h1", b"a"), ("h2", b"b"))),
    Record(9, 1_700_000_000_009, b"k", b"v", (("dup", b"a"), ("dup", None))),
    Record(10, 1_699_999_999_000, b"k", b"x" * 300),  # an earlier timestamp
]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))
    b.admin.create_topic("t", read_queue_nums=1, write_queue_nums=1)
    try:
        yield b
    finally:
        b.close()


def _stored(broker: Broker) -> None:
    broker.send("t", [mapping.record_to_message(r, 0) for r in KAFKA_RECORDS])
    broker.send(
        "t",
        [
            OutgoingMessage(b"rest plain", queue_id=0),
            OutgoingMessage(b"rest keyed", keys="order-1", queue_id=0),
            OutgoingMessage(b"rest tagged", tag="TagA", keys="k1 k2", queue_id=0),
            OutgoingMessage(b"rest props", properties={"b": "2", "a": "1"}, queue_id=0),
        ],
    )


def views_to_records(views: Sequence[RecordView], base_offset: int) -> list[RecordLike]:
    """Each view's record by ``_fast``, or ``message_to_record`` where ``_fast`` declines:
    what ``ViewBatch`` encodes, and what must equal ``message_to_record`` throughout."""
    return [
        _fast(v.raw, base_offset) or mapping.message_to_record(v.message(), base_offset)
        for v in views
    ]


def test_records_equal_message_to_record(broker: Broker) -> None:
    _stored(broker)
    _, got = broker.pull_records("t", 0, 0, 32, 1 << 20)
    views = got.records
    assert len(views) == len(KAFKA_RECORDS) + 4
    for base in (0, 3):
        expected = [mapping.message_to_record(v.message(), base) for v in views]
        assert views_to_records(views, base) == expected
        assert encode_batch(views_to_records(views, base), base_offset=base) == encode_batch(
            expected, base_offset=base
        )


def test_usual_records_take_the_fast_path(broker: Broker) -> None:
    _stored(broker)
    _, got = broker.pull_records("t", 0, 0, 32, 1 << 20)
    fast = [_fast(v.raw, 0) is not None for v in got.records]
    # text keys, no key, plain REST messages: fast; value markers, b64 keys, headers,
    # tags and user properties: message_to_record.
    assert fast == [True, True, False, False, False, False, False, True, False, False, True,
                    True, True, False, False]  # fmt: skip


def test_a_damaged_record_is_left_to_the_full_decoder(broker: Broker) -> None:
    broker.send("t", [OutgoingMessage(b"body", keys="k", queue_id=0)])
    _, got = broker.pull_records("t", 0, 0, 32, 1 << 20)
    raw = bytearray(got.records[0].raw)
    raw[4] ^= 0xFF  # MAGICCODE
    assert _fast(bytes(raw), 0) is None
    assert _fast(got.records[0].raw[:50], 0) is None


@pytest.mark.parametrize(
    "properties",
    [
        {"KEYS": ""},  # an empty value is no property (decode_message drops it)
        {"KEYS": "a\x01b"},  # the value runs to the next pair
        {"UNIQ_KEY": "", "KEYS": "k"},
        {"": "v", "KEYS": "k"},  # an empty name is no property either
        {"KEYSX": "v"},
        {"UNIQ_KEYS": "v"},
        {"TAGS": "t"},
        {"KEYS": "ключ"},
    ],
)
def test_property_strings_parse_as_the_store_decodes_them(
    broker: Broker, properties: dict[str, str]
) -> None:
    """Records put straight into the store, with property strings a broker send would not
    write, still give message_to_record's records."""
    broker.store.put_messages([Message("t", b"body", properties=properties)], 0)
    broker.store.dispatch_until_caught_up()
    _, got = broker.pull_records("t", 0, 0, 32, 1 << 20)
    (view,) = got.records
    assert views_to_records([view], 0) == [mapping.message_to_record(view.message(), 0)]


def test_fetch_from_the_store_gives_the_pull_paths_bytes(broker: Broker) -> None:
    """The Fetch handler's store path (pull_records + view_records) answers the bytes the
    pull path (Broker.pull + message_to_record) builds, from an offset inside the queue."""
    _stored(broker)
    ctx = KafkaContext(
        broker,
        ListenerConfig(port=0, fetch_cache_bytes=0),
        SystemClock(),
        versions=supported_versions(),
    )
    try:
        part = fetched(call(ctx, ApiKey.FETCH, fetch_request("t", 0, 2)))
    finally:
        ctx.close()
    messages = broker.pull(None, "t", 0, 2, 32).messages
    expected = encode_batch([mapping.message_to_record(m, 2) for m in messages], base_offset=2)
    assert part["error_code"] == 0 and part["high_watermark"] == len(KAFKA_RECORDS) + 4
    assert part["records"] == expected


def _kafka_produced(broker: Broker, count: int, max_value: int = 500) -> None:
    """Records as a Kafka producer stores them: keyless and keyed, UNIQ_KEY property."""
    records = [
        Record(
            i,
            1_700_000_000_000 + (i * 7) % 20_000,  # deltas past the varint table, and back
            None if i % 3 else b"k%d" % i,
            b"v" * (i % max_value + 1),
        )
        for i in range(count)
    ]
    broker.send("t", [mapping.record_to_message(r, 0) for r in records])


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_view_batch_equals_encode_batch(broker: Broker, chunk: int) -> None:
    _stored(broker)
    _kafka_produced(broker, 40)
    _, got = broker.pull_records("t", 0, 0, 100, 1 << 20)
    views = got.records
    for start in (0, 3, len(KAFKA_RECORDS) + 4):
        batch = ViewBatch(1 << 20)
        for i in range(start, len(views), chunk):
            assert batch.add(views[i : i + chunk]) == len(views[i : i + chunk])
        base = views[start].queue_offset
        expected = encode_batch(views_to_records(views[start:], base), base_offset=base)
        assert batch.count == len(views) - start and batch.size == len(expected)
        assert batch.finish() == expected


def test_view_batch_stops_at_max_bytes(broker: Broker) -> None:
    _stored(broker)
    _kafka_produced(broker, 40)
    _, got = broker.pull_records("t", 0, 0, 100, 1 << 20)
    views = got.records
    sizes = [len(encode_batch(views_to_records(views[:n], 0))) for n in range(1, len(views) + 1)]
    for n, size in enumerate(sizes, 1):
        for max_bytes in (size, size + 1):
            batch = ViewBatch(max_bytes)
            taken = batch.add(views[: n // 2]) + batch.add(views[n // 2 :])
            assert taken == n  # the next record is more than one byte
            assert batch.finish() == encode_batch(views_to_records(views[:n], 0))
    one = ViewBatch(1)  # KIP-74: the first record goes in whatever the limit
    assert one.add(views) == 1 and one.finish() == encode_batch(views_to_records(views[:1], 0))


def test_fetch_fills_partition_max_bytes_in_kafka_bytes(broker: Broker) -> None:
    """A store path Fetch answers up to partition_max_bytes of batch, pulling as many
    store chunks as that takes (these store records are about 6 times their Kafka size)."""
    _kafka_produced(broker, 6000, max_value=20)
    ctx = KafkaContext(
        broker,
        ListenerConfig(port=0, fetch_cache_bytes=0, max_fetch_records=100_000),
        SystemClock(),
        versions=supported_versions(),
    )
    limit = 100_000
    try:
        request = fetch_request("t", 0, 0)
        request["topics"][0]["partitions"][0]["partition_max_bytes"] = limit
        part = fetched(call(ctx, ApiKey.FETCH, request))
    finally:
        ctx.close()
    records = part["records"]
    (batch,) = decode_batches(records)
    n = len(batch.records)
    assert limit - 100 < len(records) <= limit  # the next record (< 100 bytes) did not fit
    assert n > broker.config.max_pull_count  # more than one pull
    messages = [m for i in range(0, n, 1000) for m in broker.pull(None, "t", 0, i, 1000).messages]
    messages = messages[:n]
    assert records == encode_batch([mapping.message_to_record(m, 0) for m in messages])
