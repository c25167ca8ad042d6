"""plain_records: the produce fast path gives exactly the general path's messages, and
declines (None) whatever the general path would refuse or give properties to."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import (
    Call,
    KafkaContext,
    Later,
    ListenerConfig,
    dispatch,
    supported_versions,
)
from kafka_listener.mapping import record_to_message
from kafka_listener.plain_columns import UNDECIDED, plain_columns
from kafka_listener.plain_records import plain_messages, plain_messages_loop
from kafka_listener.record_codec import RecordLike, decode_records_section, encode_records
from kafka_listener.records import decode_batches, encode_batch
from kafka_listener.schemas import ApiKey
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.clock import SystemClock
from mqcore.errors import RemoteProtocolError
from mqcore.format.msgid import HostAddress
from mqcore.message import Message
from mqcore.store.put.plain_batch import PlainColumns

from .harness import TEST_STORE_CONFIG

HOST = HostAddress("10.0.0.7", 40000)
BASE_TS = 1_700_000_000_000


def _fields(m: Message) -> tuple[Any, ...]:
    return (
        m.topic, m.body, m.tags, m.keys, m.properties, m.flag, m.born_timestamp, m.born_host,
        m.reconsume_times, m.sys_flag, m.delay_level,
    )  # fmt: skip


def _general(section: bytes, count: int) -> list[tuple[Any, ...]] | None:
    """What the general path makes of the section: the Message fields ``Broker.send``
    stores for each record (None if it has properties), or raises as the handler would."""
    records = decode_records_section(section, count, BASE_TS)
    if [r.offset_delta for r in records] != list(range(count)):
        return None
    out = []
    for r in records:
        o = record_to_message(r, 0)
        if o.properties:
            return None
        m = Message("t", o.body, o.tag or None, o.keys, None, o.flag, o.born_timestamp, HOST)
        out.append(_fields(m))
    return out


def _as_messages(found: list[Message] | PlainColumns | None) -> list[Message] | None:
    """The decoders' answer as messages (columns are compared through ``to_messages``)."""
    return found.to_messages() if isinstance(found, PlainColumns) else found


def _plain(section: bytes, count: int) -> list[tuple[Any, ...]] | None:
    messages = _as_messages(plain_messages(section, count, BASE_TS, "t", HOST))
    return None if messages is None else [_fields(m) for m in messages]


def _records(n: int, key: bytes | None = b"k", value: bytes = b"v" * 100) -> list[RecordLike]:
    return [(i, BASE_TS + i * 3, key, value, ()) for i in range(n)]


@pytest.mark.parametrize("n", [1, 63, 64, 65, 8191, 8192, 8200])  # offset delta varint widths
@pytest.mark.parametrize("key", [None, b"order-1", "ключ".encode()])
def test_plain_records_give_the_general_path_messages(n: int, key: bytes | None) -> None:
    records = _records(n, key)
    section = encode_records(records, BASE_TS)
    got = _plain(section, n)
    assert got is not None and got == _general(section, n)
    assert got[-1][6] == BASE_TS + (n - 1) * 3
    assert got[0][3] == ("" if key is None else key.decode())


def test_long_timestamp_deltas_and_values() -> None:
    records = [(0, BASE_TS - 10**9, None, b"x" * 20000, ()), (1, BASE_TS + 10**12, b"k", b"y", ())]
    section = encode_records(records, BASE_TS)
    assert _plain(section, 2) == _general(section, 2)


@pytest.mark.parametrize(
    "odd",
    [
        (1, BASE_TS, b"k", b"v", (("h", b"x"),)),  # headers
        (1, BASE_TS, b"k", None, ()),  # tombstone
        (1, BASE_TS, b"k", b"", ()),  # empty value
        (1, BASE_TS, b"", b"v", ()),  # empty key
        (1, BASE_TS, b"a key", b"v", ()),  # a space: KEYS would split it
        (1, BASE_TS, b"\xff\xfe", b"v", ()),  # not UTF-8
        (1, BASE_TS, b"a\x01b", b"v", ()),  # a property separator
        (2, BASE_TS, b"k", b"v", ()),  # offset delta gap
    ],
)
def test_any_record_that_is_not_plain_declines_the_batch(odd: RecordLike) -> None:
    section = encode_records([(0, BASE_TS, b"k", b"v", ()), odd], BASE_TS)
    assert _plain(section, 2) is None
    decode_records_section(section, 2, BASE_TS)  # the general path takes it


def test_malformed_sections_decline() -> None:
    section = encode_records(_records(3), BASE_TS)
    assert _plain(section, 0) is None
    assert _plain(b"", 0) is None
    assert _plain(section, 2) is None  # trailing bytes
    assert _plain(section, 4) is None  # too few records
    assert _plain(section[:-1], 3) is None  # truncated
    assert _plain(section + b"\x00", 3) is None
    too_long = b"\xff" * 11 + section  # a varint longer than 5 bytes
    assert _plain(too_long, 3) is None
    for data, count in ((section, 2), (section[:-1], 3), (too_long, 3)):
        with pytest.raises(RemoteProtocolError):
            decode_records_section(data, count, BASE_TS)


def test_record_lengths_must_agree_with_their_fields() -> None:
    section = bytearray(encode_records(_records(2, value=b"v"), BASE_TS))
    first_length = section[0] >> 1  # a 1-byte zigzag varint
    # The first record claims a byte more, the second a byte less: same total.
    section[0] += 2
    section[first_length + 1] -= 2
    assert _plain(bytes(section), 2) is None
    with pytest.raises(RemoteProtocolError):
        decode_records_section(bytes(section), 2, BASE_TS)


_key = st.none() | st.binary(max_size=6) | st.sampled_from([b"k", b"order-7", b"a b"])
_value = st.none() | st.binary(max_size=300)
_header = st.tuples(st.sampled_from(["h", ""]), st.none() | st.binary(max_size=3))
_record = st.tuples(
    st.integers(-(2**40), 2**40), _key, _value, st.lists(_header, max_size=1).map(tuple)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_record, min_size=1, max_size=80), st.data())
def test_fast_path_agrees_with_general_path(rows: list[Any], data: st.DataObject) -> None:
    """Plain batches are taken and give the same messages; any other batch, and any
    corruption of one, is declined or (where the general path accepts it) the same."""
    records = [(i, BASE_TS + d, k, v, h) for i, (d, k, v, h) in enumerate(rows)]
    section = encode_records(records, BASE_TS)
    count = len(records)
    expected = _general(section, count)
    assert _plain(section, count) == expected
    # Corrupt it: flip a byte, cut it, or claim another count.
    pos = data.draw(st.integers(0, len(section) - 1))
    mutated = [
        (section[:pos] + bytes([section[pos] ^ data.draw(st.integers(1, 255))]) + section[pos + 1 :], count),
        (section[:pos], count),
        (section, data.draw(st.integers(0, count + 2))),
    ]  # fmt: skip
    for bad, n in mutated:
        got = _plain(bad, n)
        if got is not None:  # the fast path only takes what the general one reads alike
            assert got == _general(bad, n)


# -- the columnar decoder against the record-at-a-time loop -----------------------------------


def _loop(section: bytes, count: int, base: int = BASE_TS) -> list[tuple[Any, ...]] | None:
    messages = plain_messages_loop(section, count, base, "t", HOST)
    return None if messages is None else [_fields(m) for m in messages]


def _columns(section: bytes, count: int, base: int = BASE_TS) -> object:
    found = plain_columns(section, count, base, "t", HOST)
    if found is UNDECIDED or found is None:
        return found
    assert isinstance(found, PlainColumns)
    assert len(found) == count
    known = found.known_key_pairs  # the decoder's, as the columns would work it out
    worked_out = PlainColumns(found.topic, found.bodies, found.keys, found.born_timestamps)
    if known is None:
        assert worked_out.key_pairs() is None
    else:
        pairs, lengths = known
        assert worked_out.key_pairs() is not None
        assert pairs == worked_out.key_pairs()[0]  # type: ignore[index]
        assert lengths.tolist() == worked_out.key_pairs()[1].tolist()  # type: ignore[index]
    return [_fields(m) for m in found.to_messages()]


@pytest.mark.parametrize("n", [1, 64, 65, 8192, 8200])
@pytest.mark.parametrize("key", [None, b"order-1", "ключ".encode()])
def test_columns_decide_plain_batches_as_the_loop(n: int, key: bytes | None) -> None:
    section = encode_records(_records(n, key, b"v" * 150), BASE_TS)
    assert _columns(section, n) == _loop(section, n) is not None


def test_what_arrays_cannot_hold_is_left_to_the_loop() -> None:
    huge = [(0, BASE_TS, None, b"v", ()), (1, BASE_TS + 2**62, None, b"w", ())]
    ten_bytes = encode_records(huge, BASE_TS)  # a 10-byte timestamp delta varint
    for section, count, base in ((ten_bytes, 2, BASE_TS), (ten_bytes, 2, 2**62 + 5)):
        assert _columns(section, count, base) is UNDECIDED
        expected = _loop(section, count, base)
        messages = _as_messages(plain_messages(section, count, base, "t", HOST))
        assert [_fields(m) for m in messages or []] == (expected or [])
    nine_bytes = encode_records(
        [(0, BASE_TS, None, b"v", ()), (1, BASE_TS - 2**61, b"k", b"w", ())], BASE_TS
    )
    assert _columns(nine_bytes, 2) == _loop(nine_bytes, 2) is not None


# UTF-8 split between two keys (b"\xd0" b"\xba" is "к"): the columns decode the keys
# joined, and must still refuse each piece that is not UTF-8 by itself.
_key_fragments = [b"\xd0", b"\xba", b"\xe2\x82", b"\xac", "€".encode(), b"\xed\xa0\x80"]
_plain_record = st.tuples(
    st.sampled_from([0, 1, -1, 63, 64, -65, 8191, 2**20, -(2**35), 2**55, -(2**61)]),
    st.none()
    | st.sampled_from([b"k", b"order-7", "ключ".encode(), *_key_fragments])
    | st.binary(min_size=1, max_size=12),
    st.binary(min_size=1, max_size=200),
    st.just(()),
)


@pytest.mark.parametrize(
    "keys",
    [
        [b"\xd0", b"\xba"],  # "к" cut in two
        [b"order-1", b"\xe2\x82", b"\xac"],  # "€" cut in two
        [b"\xe2\x82\xac", b"\xd0\xba"],
        [b"a", None, b"bb", None],
        [None, b"a b"],  # a space in a key
        [b"a", b" "],
        [b"a", b"\x02"],
        [b"\x01", b"a"],
        [b"k" * 300, b"k"],
    ],
)
def test_keys_decode_as_the_loop_decodes_them(keys: list[bytes | None]) -> None:
    records = [(i, BASE_TS, k, b"v", ()) for i, k in enumerate(keys)]
    section = encode_records(records, BASE_TS)
    assert _columns(section, len(keys)) == _loop(section, len(keys))


_odd_record = st.sampled_from(
    [
        (0, b"k", b"v", (("h", b"x"),)),  # headers
        (0, b"k", None, ()),  # tombstone
        (0, b"k", b"", ()),  # empty value
        (0, b"", b"v", ()),  # empty key
        (0, b"a b", b"v", ()),  # a space
        (0, b"\xff\xfe", b"v", ()),  # not UTF-8
        (0, b"a\x01b", b"v", ()),  # property separators
        (0, b"a\x02b", b"v", ()),
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_plain_record, min_size=1, max_size=80), st.data())
def test_columns_agree_with_the_loop(rows: list[Any], data: st.DataObject) -> None:
    """Whatever the columnar decoder decides (every section here but ones with huge
    timestamp deltas), the loop decides the same, for plain sections, sections with one
    record that is not plain, damaged sections and random bytes."""
    if data.draw(st.booleans()):
        rows[data.draw(st.integers(0, len(rows) - 1))] = data.draw(_odd_record)
    records = [(i, BASE_TS + d, k, v, h) for i, (d, k, v, h) in enumerate(rows)]
    section = encode_records(records, BASE_TS)
    count = len(records)
    pos = data.draw(st.integers(0, len(section) - 1))
    cases = [
        (section, count),
        (section[:pos] + bytes([section[pos] ^ data.draw(st.integers(1, 255))]) + section[pos + 1 :], count),
        (section[:pos] + bytes([data.draw(st.sampled_from([0x80, 0xFF, 0x01, 0x00]))]) + section[pos + 1 :], count),
        (section[:pos], count),
        (section + bytes([data.draw(st.integers(0, 255))]), count),
        (section, data.draw(st.integers(0, count + 2))),
        (data.draw(st.binary(min_size=6, max_size=60)), data.draw(st.integers(1, 8))),
    ]  # fmt: skip
    for case, n in cases:
        got = _columns(case, n)
        expected = _loop(case, n)
        if got is not UNDECIDED:
            assert got == expected
        messages = _as_messages(plain_messages(case, n, BASE_TS, "t", HOST))
        assert (None if messages is None else [_fields(m) for m in messages]) == expected


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 300), st.sampled_from([1, 2, 70, 400])), min_size=1, max_size=6
    ),
    st.sampled_from([None, b"k"]),
    st.data(),
)
def test_runs_of_alike_records_agree_with_the_loop(
    runs: list[tuple[int, int]], key: bytes | None, data: st.DataObject
) -> None:
    """Runs of records of one size (the record starts are guessed at a stride and
    checked), whole and damaged anywhere."""
    values = [b"v" * size for count, size in runs for _ in range(count)]
    records = [(i, BASE_TS + i // 7, key, v, ()) for i, v in enumerate(values)]
    section = encode_records(records, BASE_TS)
    count = len(records)
    assert _columns(section, count) == _loop(section, count) is not None
    for _ in range(3):
        pos = data.draw(st.integers(0, len(section) - 1))
        byte = data.draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, section[pos] ^ 2]))
        bad = section[:pos] + bytes([byte]) + section[pos + 1 :]
        got = _columns(bad, count)
        assert got is UNDECIDED or got == _loop(bad, count)


# -- through the produce handler ---------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))
    try:
        b.admin.create_topic("t", read_queue_nums=2, write_queue_nums=2)
        yield b
    finally:
        b.close()


def _call(ctx: KafkaContext, key: int, request: dict[str, Any]) -> Any:
    async def run() -> Any:
        version = supported_versions()[key][1]
        response = await dispatch(ctx, Call(key, version, 1, "c", request, HOST))
        return await response.response if isinstance(response, Later) else response

    return asyncio.run(run())


def _produce(ctx: KafkaContext, partition: int, records: bytes) -> dict[str, Any]:
    request = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": partition, "records": records}]}],
    }
    reply = _call(ctx, ApiKey.PRODUCE, request)["responses"][0]["partition_responses"][0]
    assert isinstance(reply, dict)
    return reply


def _fetch_all(ctx: KafkaContext, partition: int) -> list[tuple[Any, ...]]:
    request = {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 22,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
        "forgotten_topics_data": [],
        "topics": [{"topic": "t", "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": 0,
            "log_start_offset": -1, "partition_max_bytes": 1 << 22,
        }]}],
    }  # fmt: skip
    part = _call(ctx, ApiKey.FETCH, request)["responses"][0]["partitions"][0]
    return [
        (b.header.base_offset + r.offset_delta, r.timestamp, r.key, r.value, tuple(r.headers))
        for b in decode_batches(part["records"])
        for r in b.records
    ]


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("producer_id", [-1, 42])
def test_produce_stores_plain_and_other_batches_alike(
    broker: Broker, compression: int, producer_id: int
) -> None:
    """A plain batch (fast path) and one with a header record (general path) store the
    same messages for their plain records, and read back as produced (store path)."""
    ctx = KafkaContext(broker, ListenerConfig(port=0, fetch_cache_bytes=0), SystemClock())
    plain: Sequence[RecordLike] = [
        (0, BASE_TS, None, b"v0", ()),
        (1, BASE_TS + 5, b"key-1", b"v1" * 300, ()),
        (2, BASE_TS - 5, "ключ".encode(), b"v2", ()),
    ]
    mixed = [*plain, (3, BASE_TS, b"k", b"v", (("h", b"x"),))]
    for partition, records in ((0, plain), (1, mixed)):
        batch = encode_batch(records, compression=compression, producer_id=producer_id,
                             producer_epoch=0, base_sequence=0)  # fmt: skip
        reply = _produce(ctx, partition, batch)
        assert (reply["error_code"], reply["base_offset"]) == (0, 0)
        if producer_id >= 0:  # a retry of the same batch: its offset again, nothing stored
            assert _produce(ctx, partition, batch)["base_offset"] == 0
    assert _fetch_all(ctx, 0) == [(o, t, k, v, h) for o, t, k, v, h in plain]
    assert _fetch_all(ctx, 1)[:3] == _fetch_all(ctx, 0)
    fast = broker.pull("g", "t", 0, 0).messages
    general = broker.pull("g", "t", 1, 0).messages[:3]
    assert [(m.body, m.keys, m.born_timestamp, m.born_host, m.tags) for m in fast] == [
        (m.body, m.keys, m.born_timestamp, m.born_host, m.tags) for m in general
    ]
    assert all(m.born_host == HOST for m in fast)
    assert [len(m.properties) for m in fast] == [len(m.properties) for m in general]


def test_produce_fast_path_errors(broker: Broker) -> None:
    ctx = KafkaContext(broker, ListenerConfig(port=0), SystemClock())
    ok = encode_batch(_records(2))
    assert _produce(ctx, 5, ok)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    wrong_last = encode_batch(_records(2), last_offset_delta=5)
    assert _produce(ctx, 0, wrong_last)["error_code"] == ErrorCode.INVALID_RECORD
    transactional = encode_batch(_records(2), transactional=True)
    code = _produce(ctx, 0, transactional)["error_code"]
    assert code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert broker.store.max_offset("t", 0) == 0
