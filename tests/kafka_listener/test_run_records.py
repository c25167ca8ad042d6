"""run_records + store_runs: the Fetch store path's numpy runs give the bytes record views
give (``ViewBatch.add``), record for record, whatever mix of records the queue holds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_listener import mapping, run_records, store_runs, view_records
from kafka_listener.handlers import fetch
from kafka_listener.record_codec import Record
from kafka_listener.records import decode_batches
from kafka_listener.view_records import ViewBatch
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.broker.placement import ToQueue
from mqcore.broker.types import OutgoingMessage
from mqcore.errors import MQError
from mqcore.format.msgid import HostAddress
from mqcore.format.record import encode_record
from mqcore.message import Message
from mqcore.store.consume_queue import BLANK_UNIT, CQ_UNIT, CQ_UNIT_SIZE
from mqcore.store.read.record_views import RecordView

from .harness import TEST_STORE_CONFIG

LIMITS = (1 << 20, 20_000, 1_000, 150, 1)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))
    b.admin.create_topic("t", read_queue_nums=1, write_queue_nums=1)
    b.admin.create_topic("other", read_queue_nums=1, write_queue_nums=1)
    try:
        yield b
    finally:
        b.close()


@contextmanager
def _fresh_broker(factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker of its own with topic ``t`` (Hypothesis examples cannot share the fixture's)."""
    b = Broker.open(factory.mktemp("store"), TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))  # fmt: skip
    try:
        b.admin.create_topic("t", read_queue_nums=1, write_queue_nums=1)
        yield b
    finally:
        b.close()


class RunSpy:
    """read_run, counting the records of the runs it gave."""

    def __init__(self) -> None:
        self.records = 0

    def __call__(self, *args: Any) -> store_runs.RawRun | None:
        run = store_runs.read_run(*args)
        self.records += len(run) if run is not None else 0
        return run


class EncodeSpy:
    """run_records.encode_run, noting the offsets of the records it encoded."""

    def __init__(self) -> None:
        self.offsets: set[int] = set()

    def __call__(self, *args: Any) -> run_records.EncodedRun | None:
        encoded = run_records.encode_run(*args)
        if encoded is not None:
            first = args[3]  # first_offset
            self.offsets.update(range(first, first + encoded.count))
        return encoded


def _both(
    monkeypatch: pytest.MonkeyPatch, broker: Broker, offset: int, limit: int, max_records: int
) -> tuple[fetch._Local, fetch._Local, int]:
    """``_read_local`` with runs and with record views only, and the records runs gave."""
    spy = RunSpy()
    monkeypatch.setattr(fetch, "read_run", spy)
    with_runs = fetch._read_local(broker, "t", 0, offset, limit, max_records)
    monkeypatch.setattr(fetch, "read_run", lambda *args: None)
    views_only = fetch._read_local(broker, "t", 0, offset, limit, max_records)
    return with_runs, views_only, spy.records


def _outcome(broker: Broker, offset: int, limit: int, max_records: int) -> object:
    """``_read_local``'s result, or the type and text of the error it raised."""
    try:
        return fetch._read_local(broker, "t", 0, offset, limit, max_records)
    except MQError as exc:
        return type(exc), str(exc)


def _compare_all(monkeypatch: pytest.MonkeyPatch, broker: Broker, max_records: int) -> int:
    """Every limit, from every batch start (small limits: from 40 offsets across the queue):
    both paths equal. Returns the records runs gave."""
    used = 0
    end = broker.store.max_offset("t", 0)
    for limit in LIMITS:
        offset = 0
        while offset < end:
            with_runs, views_only, runs = _both(monkeypatch, broker, offset, limit, max_records)
            assert with_runs == views_only, (limit, offset)
            used += runs
            assert with_runs.count >= 1
            offset = max(with_runs.next_offset, offset + end // 40)
    return used


def _keyless(broker: Broker, count: int, body: int = 100, born: int = 1_700_000_000_000) -> None:
    records = [Record(i, born + i, None, b"x" * body) for i in range(count)]
    broker.send("t", [mapping.record_to_message(r, 0) for r in records])


def test_keyless_records_take_runs_and_give_the_views_bytes(
    monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    _keyless(broker, 3000)
    assert _compare_all(monkeypatch, broker, 16_384) > 0
    with_runs, _, runs = _both(monkeypatch, broker, 0, 1 << 20, 16_384)
    assert runs >= with_runs.count == 3000  # the whole queue in one batch, from runs


def test_a_mixed_queue_gives_the_views_bytes(
    monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    """Keyed, headers, tombstones, REST messages with tags and properties between runs of
    keyless records of varied sizes and timestamps (deltas past every varint width)."""
    born = [1_700_000_000_000, 0, -5, 1 << 40, 1_700_000_000_000 - (1 << 35)]
    for i in range(12):
        records = [
            Record(j, born[i % len(born)] + j * 977, None, b"v" * ((i * 37 + j) % 300 + 1))
            for j in range(150 + i * 10)
        ]
        broker.send("t", [mapping.record_to_message(r, 0) for r in records])
        special = [
            Record(0, 5, b"key", b"value"),
            Record(1, 6, b"k", None),
            Record(2, 7, b"k", b"v", (("h", b"a"),)),
        ][i % 3]
        broker.send("t", [mapping.record_to_message(special, 0)])
        broker.send("t", [OutgoingMessage(b"rest", tag="TagA", keys="k1 k2", queue_id=0)])
        broker.send("t", [OutgoingMessage(b"plain rest %d" % i, queue_id=0)])
    for max_records in (16_384, 500, 70):
        assert _compare_all(monkeypatch, broker, max_records) > 0


def _keyed(broker: Broker, count: int) -> None:
    """``count`` records as Kafka producers store them, keyed and keyless (keys of one byte
    to 200: a 2-byte length varint past 63, multi-byte UTF-8), and a REST message's
    several keys last (a Kafka key with a space is stored as ``__kafka.key``: no run)."""
    keys = [None, "order-{}", "k", "ключ-{}", "x" * 200]
    records = [
        Record(i, 1_700_000_000_000 + i * 31, key and key.format(i).encode(), b"v" * (i % 150 + 1))
        for i, key in ((i, keys[i % len(keys)]) for i in range(count - 1))
    ]
    broker.send("t", [mapping.record_to_message(r, 0) for r in records])
    broker.send("t", [OutgoingMessage(b"rest", keys=["k1", "k2"], queue_id=0)])


def _encoded_by_runs(monkeypatch: pytest.MonkeyPatch, broker: Broker) -> tuple[int, set[int]]:
    """A 1 MB fetch from offset 0: its record count, and the offsets that runs encoded."""
    spy = EncodeSpy()
    monkeypatch.setattr(fetch, "read_run", store_runs.read_run)
    monkeypatch.setattr(view_records, "encode_run", spy)
    return fetch._read_local(broker, "t", 0, 0, 1 << 20, 16_384).count, spy.offsets


def test_keyed_records_take_runs_and_give_the_views_bytes(
    monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    _keyed(broker, 3000)
    assert _compare_all(monkeypatch, broker, 16_384) > 0
    assert _encoded_by_runs(monkeypatch, broker) == (3000, set(range(3000)))
    (batch,) = decode_batches(fetch._read_local(broker, "t", 0, 0, 1 << 20, 16_384).records)
    assert batch.records[1].key == b"order-1" and batch.records[4].key == b"x" * 200
    assert batch.records[3].key == "ключ-3".encode() and batch.records[-1].key == b"k1 k2"


@pytest.mark.parametrize(
    "properties",
    [
        {"KEYS": "a\x01b"},
        {"UNIQ_KEY": "ID", "KEYS": "k"},
        {"KEYS": ""},
        {"TAGS": "TagA", "KEYS": "k"},
        {"KEYS": "k", "h": "v"},
    ],
)
def test_other_properties_stop_a_keyed_run(
    monkeypatch: pytest.MonkeyPatch, broker: Broker, properties: dict[str, str]
) -> None:
    """Properties other than KEYS then UNIQ_KEY: the record goes through the views."""
    _keyed(broker, 100)
    broker.store.put_messages([Message("t", b"odd", properties=properties)], 0)
    _keyed(broker, 100)
    broker.store.dispatch_until_caught_up()
    assert _compare_all(monkeypatch, broker, 16_384) > 0
    count, offsets = _encoded_by_runs(monkeypatch, broker)
    # (after it, a chunk of views of up to max_pull_count records: all the rest here)
    assert count == 201 and 100 not in offsets and offsets == set(range(100))


def test_records_of_other_topics_between_a_queues_records(
    monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    """A run copies the CommitLog from its first record to its last: other topics'
    records in between are skipped by position."""
    for i in range(400):
        broker.send("t", [OutgoingMessage(b"t" * (i % 50 + 1), queue_id=0)])
        if i % 3:
            broker.send("other", [OutgoingMessage(b"o" * (i % 90 + 1), queue_id=0)] * (i % 3))
    assert _compare_all(monkeypatch, broker, 16_384) > 0


def test_short_reads_use_record_views(monkeypatch: pytest.MonkeyPatch, broker: Broker) -> None:
    _keyless(broker, store_runs.MIN_RUN_RECORDS + 10)
    for offset in (0, 11):
        with_runs, views_only, runs = _both(monkeypatch, broker, offset, 1 << 20, 16_384)
        assert with_runs == views_only
        assert runs == (with_runs.count if offset == 0 else 0)


def test_the_first_record_goes_in_past_a_small_limit(
    monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    """KIP-74 through both paths, also when the first record is not a usual one (a
    partition_max_bytes below one record used to end in a bad pull)."""
    broker.send("t", [OutgoingMessage(b"keyed", keys="k", queue_id=0)])
    _keyless(broker, 200)
    for offset in (0, 1):
        for limit in (1, 60, 100):
            with_runs, views_only, _ = _both(monkeypatch, broker, offset, limit, 16_384)
            assert with_runs == views_only and with_runs.count == 1


def _fetched_offsets(local: fetch._Local) -> list[int]:
    batches = decode_batches(local.records)
    return [b.header.base_offset + r.offset_delta for b in batches for r in b.records]


def test_a_damaged_record_is_skipped_and_quarantined(
    monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    """A run stops before a record whose framing is wrong; the views path skips it and
    quarantines it (found by a read), and every other record is served, at its offset,
    with runs or with views alone."""
    _keyless(broker, 300)
    _, got = broker.pull_records("t", 0, 100, 1, 1 << 20)
    phys = got.records[0].phys_offset
    segment = broker.store.commit_log.segments.find(phys)
    assert segment is not None
    segment.write_at(phys - segment.base_offset + 4, b"\x00\x00\x00\x00")  # MAGICCODE
    with_runs, views_only, runs = _both(monkeypatch, broker, 0, 1 << 20, 16_384)
    assert with_runs == views_only and runs > 0
    assert _fetched_offsets(with_runs) == [*range(100), *range(101, 300)]
    entry = broker.store.quarantine.covering(phys)
    assert entry is not None and (entry.offset, entry.found_by) == (phys, "read")
    assert [p.id for p in broker.store.health.problems()] == [f"quarantine:{phys:020d}"]


def test_runs_stop_before_quarantined_records_and_blank_units(
    monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    """A record in a quarantined range (its header intact: a run would encode it) and a
    blank unit (a gap in the queue) are never served; the records around them are."""
    _keyless(broker, 300)
    store = broker.store
    queue = store.queues.get("t", 0)
    assert queue is not None
    damaged = queue.unit_at(150)
    assert damaged is not None
    segment = store.commit_log.segments.find(damaged.phys_offset)
    assert segment is not None
    segment.write_at(damaged.phys_offset - segment.base_offset + 88 + 5, b"?")  # body byte
    assert store.commit_log.quarantine_unreadable(damaged.phys_offset, damaged.size, "test")
    last = queue.segments.last()
    assert last is not None
    last.write_at(200 * CQ_UNIT_SIZE - last.base_offset, BLANK_UNIT)  # unit 200: a gap
    run = store_runs.read_run(broker, "t", 0, 100, 16_384, 1 << 20)
    assert run is not None and len(run) == 50
    assert store_runs.read_run(broker, "t", 0, 150, 16_384, 1 << 20) is None
    assert store_runs.read_run(broker, "t", 0, 200, 16_384, 1 << 20) is None
    with_runs, views_only, runs = _both(monkeypatch, broker, 0, 1 << 20, 16_384)
    assert with_runs == views_only and runs > 0
    assert _fetched_offsets(with_runs) == [*range(150), *range(151, 200), *range(201, 300)]


def test_runs_stop_before_a_record_of_another_queue(broker: Broker) -> None:
    """A unit pointing at a valid record of another queue (a damaged ConsumeQueue): the run
    stops before it; the record is not quarantined (the log is fine)."""
    _keyless(broker, 100)
    store = broker.store
    queue = store.queues.get("t", 0)
    assert queue is not None
    broker.send("other", [OutgoingMessage(b"elsewhere", queue_id=0)])
    other = store.queues.get("other", 0)
    assert other is not None
    foreign = other.unit_at(0)
    assert foreign is not None
    last = queue.segments.last()
    assert last is not None
    unit = CQ_UNIT.pack(foreign.phys_offset, foreign.size, 0)
    last.write_at(70 * CQ_UNIT_SIZE - last.base_offset, unit)
    run = store_runs.read_run(broker, "t", 0, 0, 16_384, 1 << 20)
    assert run is not None and len(run) == 70
    got = fetch._read_local(broker, "t", 0, 0, 1 << 20, 16_384)
    assert _fetched_offsets(got) == [*range(70), *range(71, 100)]
    assert not store.quarantine.ranges


def test_runs_count_the_gets(broker: Broker) -> None:
    _keyless(broker, 100)
    before = broker.status().get_total
    run = store_runs.read_run(broker, "t", 0, 0, 16_384, 1 << 20)
    assert run is not None and len(run) == 100
    assert broker.status().get_total == before + 100


def test_a_fetch_decodes_to_the_stored_records(broker: Broker) -> None:
    _keyless(broker, 500, body=33)
    local = fetch._read_local(broker, "t", 0, 0, 1 << 20, 16_384)
    (batch,) = decode_batches(local.records)
    assert [r.value for r in batch.records] == [b"x" * 33] * 500
    assert [r.timestamp for r in batch.records] == [1_700_000_000_000 + i for i in range(500)]


# A record's keys: none, text (multi-byte UTF-8, spaces: several keys, served as one Kafka
# key), keys of 64 to 300 bytes (a 2-byte key length varint), or properties no producer
# writes (stored with put_messages: the run must stop there and leave them to the views).
_TEXT = st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",))
_LONG = st.tuples(st.integers(64, 300), st.sampled_from(["k", "é", "€ ", "ключ", "😀"]))
KEYS = st.one_of(
    st.none(),
    st.text(_TEXT, min_size=1, max_size=12).filter(str.strip),
    _LONG.map(lambda t: (t[1] * t[0]).encode()[: t[0]].decode("utf-8", "ignore")),
    st.sampled_from(
        [
            {"KEYS": "a\x01b"},  # a \x01 in the key: the views' parse keeps "a\x01b"
            {"UNIQ_KEY": "ID", "KEYS": "k"},  # KEYS after UNIQ_KEY
            {"KEYS": ""},  # an empty KEYS value: no key
            {"TAGS": "TagA", "KEYS": "k"},
        ]
    ),
)


def _store(broker: Broker, records: list[tuple[int, str | dict[str, str] | None]]) -> None:
    """Plain records (no key, a text key) as a producer's batches store them; the others
    one by one through the store's general put."""
    plain: list[Message] = []
    for i, (size, keys) in enumerate(records):
        born = 1_700_000_000_000 + i
        if isinstance(keys, dict):
            if plain:
                broker.send("t", plain, ToQueue(0))
                plain = []
            message = Message("t", b"b" * size, properties=keys, born_timestamp=born)
            broker.store.put_messages([message], 0)
        else:
            plain.append(Message("t", b"b" * size, keys=keys or "", born_timestamp=born))
    if plain:
        broker.send("t", plain, ToQueue(0))
    broker.store.dispatch_until_caught_up()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(st.tuples(st.integers(1, 400), KEYS), min_size=1, max_size=300),
    limit=st.sampled_from(LIMITS),
    max_records=st.integers(1, 400),
)
def test_any_keyed_queue_gives_the_views_bytes(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[tuple[int, str | dict[str, str] | None]],
    limit: int,
    max_records: int,
) -> None:
    with _fresh_broker(tmp_path_factory) as broker:
        _store(broker, records)
        offset = 0
        while offset < len(records):
            with pytest.MonkeyPatch.context() as monkeypatch:
                with_runs, views_only, _ = _both(monkeypatch, broker, offset, limit, max_records)
            assert with_runs == views_only
            offset = with_runs.next_offset


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bodies=st.lists(st.integers(1, 400), min_size=1, max_size=300),
    borns=st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=1, max_size=4),
    keyed=st.sets(st.integers(0, 299), max_size=5),
    limit=st.sampled_from(LIMITS),
    max_records=st.integers(1, 400),
)
def test_any_queue_gives_the_views_bytes(
    tmp_path_factory: pytest.TempPathFactory,
    bodies: list[int],
    borns: list[int],
    keyed: set[int],
    limit: int,
    max_records: int,
) -> None:
    with _fresh_broker(tmp_path_factory) as broker:
        messages = [
            Message(
                "t",
                b"b" * size,
                keys="k" if i in keyed else "",
                born_timestamp=borns[i % len(borns)],
            )
            for i, size in enumerate(bodies)
        ]
        broker.send("t", messages, ToQueue(0))
        offset = 0
        while offset < len(bodies):
            with pytest.MonkeyPatch.context() as monkeypatch:
                monkeypatch.setattr(fetch, "read_run", RunSpy())
                with_runs = _outcome(broker, offset, limit, max_records)
                monkeypatch.setattr(fetch, "read_run", lambda *args: None)
                views_only = _outcome(broker, offset, limit, max_records)
            assert with_runs == views_only
            # past a timestamp delta no batch can hold (both raised): the next record
            offset = with_runs.next_offset if isinstance(with_runs, fetch._Local) else offset + 1


# Property bytes no put would write, straight into records: keys with \x01, \x02, bytes
# that are not UTF-8 (a lone byte, a cut sequence, an encoded surrogate), 3-byte key
# length varints, KEYS after UNIQ_KEY, anything.
RAW_KEYS = st.one_of(
    st.text(_TEXT, max_size=20).map(str.encode),
    st.binary(max_size=40),
    st.sampled_from([b"\xff", b"a\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"a\x02b", b"x" * 9000]),
)
# Two pairs shaped like KEYS then UNIQ_KEY, the names of the same lengths or a third pair.
SHAPED = st.tuples(
    st.sampled_from([b"KEYS", b"KEYZ", b"TAGS", b"UNIQ_KEY"]),
    RAW_KEYS,
    st.sampled_from([b"UNIQ_KEY", b"UNIQ_KEZ", b"KEYS", b"KEYS\x01x\x02UNIQ_KEY"]),
)
PROPERTIES = st.one_of(
    st.just(b""),
    st.just(b"UNIQ_KEY\x01ID\x02"),
    RAW_KEYS.map(lambda k: b"KEYS\x01" + k + b"\x02UNIQ_KEY\x01ID\x02"),
    SHAPED.map(lambda t: t[0] + b"\x01" + t[1] + b"\x02" + t[2] + b"\x01ID\x02"),
    st.binary(max_size=30),
)
HOSTS = (HostAddress("10.0.0.7", 40000), HostAddress("::1", 1))
HOST = st.integers(0, 7).map(lambda i: HOSTS[i == 0])  # IPv6 (no run) one time in 8


def _batch(add: Any, batch: ViewBatch) -> object:
    """``add(batch)``, then the batch, or the type and text of the error raised."""
    try:
        add(batch)
    except MQError as exc:
        return type(exc), str(exc)
    return batch.count, batch.finish() if batch.count else b""


def _compare_raw(records: list[tuple[int, bytes, HostAddress, bytes]], limit: int) -> None:
    """encode_run on raw records (other bytes between them, as other topics' records)
    alternating with ViewBatch.add where a run stops, as the Fetch store path does, gives
    the batch (or the error) ViewBatch.add alone gives."""
    data = bytearray()
    views: list[RecordView] = []
    for i, (body, properties, host, gap) in enumerate(records):
        data += gap
        raw = encode_record(
            topic="t", queue_id=0, flag=0, queue_offset=i, phys_offset=len(data), sys_flag=0,
            born_timestamp=1_700_000_000_000 + i * 999, born_host=host, store_timestamp=0,
            store_host=HOSTS[0], reconsume_times=0, prepared_transaction_offset=0,
            body=b"b" * body, properties=properties,
        )  # fmt: skip
        views.append(RecordView(raw, len(data), i))
        data += raw
    positions = np.array([v.phys_offset for v in views], np.int64)
    sizes = np.array([len(v.raw) for v in views], np.int64)

    def runs_and_views(batch: ViewBatch) -> None:
        i = 0
        while i < len(views):
            taken, full = batch.add_run(bytes(data), positions[i:], sizes[i:], i)
            i += taken
            if full or i == len(views) or not batch.add(views[i : i + 1]):
                return
            i += 1

    expected = _batch(lambda batch: batch.add(views), ViewBatch(limit))
    assert _batch(runs_and_views, ViewBatch(limit)) == expected


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.integers(0, 300), PROPERTIES, HOST, st.binary(max_size=12)),
        min_size=8,
        max_size=120,
    ),
    limit=st.sampled_from(LIMITS),
)
def test_any_properties_encode_as_the_views_do(
    records: list[tuple[int, bytes, HostAddress, bytes]], limit: int
) -> None:
    _compare_raw(records, limit)


def _keys(*keys: bytes) -> list[bytes]:
    return [b"KEYS\x01" + key + b"\x02UNIQ_KEY\x01ID\x02" for key in keys]


@pytest.mark.parametrize(
    "odd",
    [
        [b"KEYZ\x01k\x02UNIQ_KEY\x01ID\x02"],  # another name of KEYS' length
        [b"KEYS\x01k\x02UNIQ_KEZ\x01ID\x02"],  # and of UNIQ_KEY's
        [b"KEYS\x01k\x02\x02UNIQ_KEY\x01ID\x02"],
        [b"KEYS\x01k\x02UNIQ_KEY\x01ID\x02KEYS\x01j\x02"],
        _keys(b"k\x02j"),
        _keys(b"\xc3"),
        _keys(b"a\xc3", b"\xa9b"),  # together "a\xc3\xa9b" would be UTF-8 ("a\u00e9b")
        _keys(b"\xed\xa0\x80"),  # an encoded surrogate
        _keys(b" ", b"a b"),  # spaces: several keys (or none) to KEYS, text to Kafka
        _keys("é".encode() * 100, "ключ".encode(), b"x" * 9000),  # 1- to 3-byte lengths
    ],
)
def test_near_misses_encode_as_the_views_do(odd: list[bytes]) -> None:
    usual = [(100, b"KEYS\x01key\x02UNIQ_KEY\x01ID\x02", HOSTS[0], b"")] * 3
    _compare_raw(usual + [(100, properties, HOSTS[0], b"") for properties in odd] + usual, 1 << 20)
