"""Decompression bombs: a small compressed batch must not expand without bound.

Codec level: :func:`compression.decompress` stops at ``limit`` bytes for every codec and
answers MESSAGE_TOO_LARGE; exactly ``limit`` bytes still decompress. Wire level: a Produce
carrying a bomb gets MESSAGE_TOO_LARGE for that partition, nothing of it is stored, and the
same connection (and real clients) keep working.
"""

from __future__ import annotations

import resource
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_listener import compression
from kafka_listener.compression import MAX_DECOMPRESSED_BYTES, Compression
from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import ListenerConfig
from kafka_listener.records import CRC_START, HEADER_SIZE, crc_of, encode_batch
from kafka_listener.schemas import ApiKey
from mqcore.errors import RemoteProtocolError

from .harness import RunningListener
from .test_server import Client

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

GIB = 1 << 30
MIB = 1 << 20
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def bomb(codec: int, claimed: int = GIB) -> bytes:
    """Valid compressed data expanding to ``claimed`` zero bytes (several frames/members
    of 1 MiB each, which every codec's reader accepts concatenated). Snappy cannot expand
    more than ~21x, so its "bomb" is xerial blocks up to the frame limit's worth."""
    if codec == Compression.SNAPPY:
        return compression.compress(codec, bytes(min(claimed, 16 * MIB)))
    one = compression.compress(codec, bytes(MIB))
    return one * (claimed // MIB)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def too_large(codec: int, data: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bool:
    with pytest.raises(RemoteProtocolError) as info:
        compression.decompress(codec, data, limit)
    return info.value.error_code == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: Compression(c).name)
def test_bomb_is_refused_without_expanding(codec: int) -> None:
    data = bomb(codec)
    assert len(data) < 8 * MIB  # small on the wire...
    before_peak, before_now = peak_rss_bytes(), current_rss_bytes()
    assert too_large(codec, data)  # ...and refused
    # A full expansion would raise the peak RSS by a GiB (snappy: 16 MiB, covered by the
    # exact-boundary tests); allowing for noise, it must stay far below that.
    assert peak_rss_bytes() < max(before_peak, before_now + 256 * MIB)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: Compression(c).name)
def test_exactly_the_limit_decompresses(codec: int) -> None:
    # Over the per-thread buffer (1 MiB): the retry path with a limit-sized buffer.
    data = bytes(range(256)) * (6 * MIB // 256)
    packed = compression.compress(codec, data)
    assert compression.decompress(codec, packed, len(data)) == data
    assert compression.decompress(codec, packed) == data  # default limit: 8 MiB
    assert too_large(codec, packed, len(data) - 1)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: Compression(c).name)
def test_default_limit_is_twice_the_batch_limit(codec: int) -> None:
    assert MAX_DECOMPRESSED_BYTES == 8 * MIB
    assert too_large(codec, compression.compress(codec, bytes(MAX_DECOMPRESSED_BYTES + 1)))


def test_raw_snappy_is_checked_before_decompressing() -> None:
    import cramjam

    raw = bytes(cramjam.snappy.compress_raw(bytes(2 * MIB)))
    assert too_large(Compression.SNAPPY, raw, 2 * MIB - 1)
    assert compression.decompress(Compression.SNAPPY, raw, 2 * MIB) == bytes(2 * MIB)
    # A length no snappy data of that size can produce is corrupt, not large.
    claims_a_gib = b"\x80\x80\x80\x80\x04" + raw[len(b"\x80\x80\x80\x01") :]
    with pytest.raises(RemoteProtocolError) as info:
        compression.decompress(Compression.SNAPPY, claims_a_gib)
    assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=60, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    chunk=st.binary(min_size=0, max_size=300),
    repeat=st.integers(1, 400),
    slack=st.integers(-40, 40),
)
def test_limit_is_exact(codec: int, chunk: bytes, repeat: int, slack: int) -> None:
    data = chunk * repeat
    limit = max(0, len(data) + slack)
    packed = compression.compress(codec, data)
    if len(data) <= limit:
        assert compression.decompress(codec, packed, limit) == data
    else:
        assert too_large(codec, packed, limit)


# --- on the wire ------------------------------------------------------------------------


def bomb_batch(codec: int) -> bytes:
    """A v2 batch with a valid header and CRC whose records section is a bomb."""
    batch = bytearray(encode_batch([(0, 1, None, b"x", ())])[:HEADER_SIZE])
    batch += bomb(codec, 256 * MIB)
    struct.pack_into(">i", batch, 8, len(batch) - 12)  # batch length
    struct.pack_into(">h", batch, CRC_START, codec)  # attributes: the codec
    struct.pack_into(">i", batch, 57, 1_000)  # records_count: whatever the bomb claims
    struct.pack_into(">I", batch, 17, crc_of(bytes(batch)))
    return bytes(batch)


def produce(topic: str, partition: int, records: bytes) -> dict[str, object]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5_000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningListener]:
    # The fetch cache is off, so every fetch below reads the store.
    config = ListenerConfig(port=0, initial_rebalance_delay_ms=100, fetch_cache_bytes=0)
    with RunningListener(Path(tmp_path_factory.mktemp("bombs")), config) as r:
        assert r.broker is not None
        r.broker.admin.create_topic("bombs", read_queue_nums=1, write_queue_nums=1)
        yield r


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: Compression(c).name)
def test_produced_bomb_is_refused_and_the_connection_keeps_serving(
    running: RunningListener, codec: int
) -> None:
    assert running.broker is not None
    before = running.broker.store.max_offset("bombs", 0)
    client = Client(running.port)
    try:
        reply = client.request(ApiKey.PRODUCE, 7, produce("bombs", 0, bomb_batch(codec)))
        part = reply["responses"][0]["partition_responses"][0]
        assert part["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        assert running.broker.store.max_offset("bombs", 0) == before  # nothing stored
        # Same connection, next request: a normal compressed batch is stored.
        good = encode_batch([(0, 1, None, b"after-bomb", ())], compression=codec)
        reply = client.request(ApiKey.PRODUCE, 7, produce("bombs", 0, good))
        part = reply["responses"][0]["partition_responses"][0]
        assert part["error_code"] == ErrorCode.NONE and part["base_offset"] == before
    finally:
        client.close()


@pytest.mark.e2e
def test_real_clients_work_after_bombs(running: RunningListener) -> None:
    assert running.broker is not None
    client = Client(running.port)
    try:
        reply = client.request(ApiKey.PRODUCE, 7, produce("bombs", 0, bomb_batch(4)))
        assert reply["responses"][0]["partition_responses"][0]["error_code"] == 10
    finally:
        client.close()
    producer = KafkaProducer(bootstrap_servers=running.bootstrap, compression_type="gzip")
    try:
        producer.send("bombs", b"from-kafka-python", partition=0).get(timeout=20)
    finally:
        producer.close()
    tp = TopicPartition("bombs", 0)
    consumer = KafkaConsumer(bootstrap_servers=running.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        for _ in range(50):
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
            if b"from-kafka-python" in values:
                break
        # Only what was accepted: the "after-bomb" batches and this one, no bomb content.
        assert values and values[-1] == b"from-kafka-python"
        assert set(values) <= {b"after-bomb", b"from-kafka-python"}
    finally:
        consumer.close()


@pytest.mark.parametrize("max_batch_mib", [1, 12])
def test_the_cap_follows_the_brokers_batch_limit(tmp_path: Path, max_batch_mib: int) -> None:
    """A batch of ~10 MB of records (9.9 MB of values), gzip-compressed: past the default
    cap (8 MiB), within a broker's that takes 12 MiB batches (24 MiB), which stores it; a
    broker taking 1 MiB batches refuses it without decompressing past 2 MiB."""
    from kafka_listener.batch_cache import BatchCache
    from kafka_listener.handlers.context import Call
    from kafka_listener.handlers.produce import _store_partition
    from kafka_listener.idempotence import ProducerStates
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig

    count = 110_000
    records = [(i, 1, None, b"%089d" % i, ()) for i in range(count)]
    batch = encode_batch(records, compression=Compression.GZIP)
    assert len(batch) < MIB and count * 99 > MAX_DECOMPRESSED_BYTES
    config = BrokerConfig(max_batch_bytes=max_batch_mib * MIB)
    with Broker.open(tmp_path, config=config) as broker:
        broker.admin.create_topic("big", read_queue_nums=1, write_queue_nums=1)
        reply = _store_partition(
            broker, ProducerStates(broker.clock), BatchCache(0), "big", 0, batch,
            Call(ApiKey.PRODUCE, 7, 1, None, {}),
        )  # fmt: skip
        broker.store.dispatch_until_caught_up()
        if max_batch_mib == 1:
            assert reply["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
            assert broker.store.max_offset("big", 0) == 0
        else:
            assert reply["error_code"] == ErrorCode.NONE
            assert broker.store.max_offset("big", 0) == count
