"""run_records + store_runs: the Fetch store path's numpy runs give the bytes record views
give (``ViewBatch.add``), record for record, whatever mix of records the queue holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_listener import mapping, store_runs
from kafka_listener.handlers import fetch
from kafka_listener.record_codec import Record
from kafka_listener.records import decode_batches
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.broker.types import OutgoingMessage
from mqcore.errors import CorruptRecordError, MQError
from mqcore.message import Message

from .harness import TEST_STORE_CONFIG

LIMITS = (1 << 20, 20_000, 1_000, 150, 1)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG, config=BrokerConfig(dispatch_on_send=True))
    b.create_topic("t", read_queue_nums=1, write_queue_nums=1)
    b.create_topic("other", read_queue_nums=1, write_queue_nums=1)
    try:
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


def test_a_damaged_record_fails_as_through_views(
    monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    """A run stops before a record whose framing is wrong; the views path raises for it,
    and serves the records before it in an earlier batch."""
    _keyless(broker, 300)
    _, got = broker.pull_records("t", 0, 100, 1, 1 << 20)
    phys = got.records[0].phys_offset
    segment = broker.store.commit_log.segments.find(phys)
    assert segment is not None
    segment.write_at(phys - segment.base_offset + 4, b"\x00\x00\x00\x00")  # MAGICCODE
    monkeypatch.setattr(fetch, "read_run", RunSpy())
    with pytest.raises(CorruptRecordError):
        fetch._read_local(broker, "t", 0, 0, 1 << 20, 16_384)
    with_runs, views_only, runs = _both(monkeypatch, broker, 0, 5_000, 16_384)
    assert with_runs == views_only and runs > 0 and with_runs.next_offset <= 100


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
    broker = Broker.open(
        tmp_path_factory.mktemp("store"),
        TEST_STORE_CONFIG,
        config=BrokerConfig(dispatch_on_send=True),
    )
    try:
        broker.create_topic("t", read_queue_nums=1, write_queue_nums=1)
        messages = [
            Message(
                "t",
                b"b" * size,
                keys="k" if i in keyed else "",
                born_timestamp=borns[i % len(borns)],
            )
            for i, size in enumerate(bodies)
        ]
        broker.send_plain("t", 0, messages)
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
    finally:
        broker.close()
