"""The quarantine table and what skips it: reput, pulls, lookups; found by reads.

Real stores in tmp_path, damaged on disk after they were written (a flipped body byte, a
zeroed magic code, a ConsumeQueue unit pointing at another queue's record, a blank unit in
the middle of a queue), read back through the store's own read paths.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.format.record import DispatchRequest
from mqcore.message import Message
from mqcore.store import GetStatus, MessageStore, StoreConfig
from mqcore.store.consume_queue import BLANK_UNIT, CQ_UNIT, CQ_UNIT_SIZE
from mqcore.store.health import StoreHealth
from mqcore.store.recovery.quarantine import Quarantine
from mqcore.store.recovery.record_search import SegmentFile
from mqcore.store.reput.dispatch_scan import dispatch_columns
from tests.support.store_oracle import ALL_TIME, Expected, Oracle, assert_all_found, read_queue

T0 = 1_700_000_000_000
CONFIG = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=100,
    index_hash_slots=7,
    index_max_entries=400,
)
HEADER_BYTES = 88


def fill(store: MessageStore, oracle: Oracle, count: int, clock: FakeClock) -> None:
    for i in range(count):
        msg = Message(("orders", "payments")[i % 2], b"body %05d " % i * 5, keys=[f"k{i}"])
        oracle.put(store, msg, i % 3 % 2)
        clock.advance(1)
    store.dispatch_until_caught_up()


def patch_log(store: MessageStore, phys: int, data: bytes) -> None:
    segment = store.commit_log.segments.find(phys)
    assert segment is not None
    segment.write_at(phys - segment.base_offset, data)


def without(oracle: Oracle, *gone: Expected) -> Oracle:
    kept = Oracle()
    kept.messages = [e for e in oracle.messages if e not in gone]
    return kept


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


# --- the table -------------------------------------------------------------------------------


def make_segment(tmp_path: Path, data: bytes, size: int = 4096) -> SegmentFile:
    path = tmp_path / f"{0:020d}"
    path.write_bytes(data + bytes(size - len(data)))
    return SegmentFile(path, size)


def test_ranges_are_copied_reported_loaded_and_looked_up(tmp_path: Path, clock: FakeClock):
    health = StoreHealth(tmp_path, clock)
    q = Quarantine(tmp_path, clock, health=health).load()
    with make_segment(tmp_path, b"A" * 100 + b"garbage!" + bytes(92) + b"B" * 50) as f:
        first = q.quarantine(f, 8192, 100, 200, reason="bad magic", found_by="recovery")
        again = q.quarantine(f, 8192, 100, 200, reason="bad magic", found_by="read")
        second = q.quarantine(f, 8192, 200, 250, reason="CRC", found_by="read")
    assert again is first  # one range, one report, one problem
    assert (first.offset, first.end, first.copied_bytes) == (8292, 8392, 8)
    assert (tmp_path / "quarantine" / f"{8292:020d}.bin").read_bytes() == b"garbage!"
    report = json.loads((tmp_path / "quarantine" / f"{8292:020d}.json").read_text())
    assert report["segment"] == f"commitlog/{0:020d}" and report["position"] == 100
    assert report["found_by"] == "recovery" and report["found_ms"] == T0
    assert [p.id for p in health.problems()] == [
        f"quarantine:{8292:020d}",
        f"quarantine:{8392:020d}",
    ]
    assert q.covering(8291) is None and q.covering(8291, 2) is first
    assert q.covering(8391) is first and q.covering(8392) is second
    assert q.covering(8442) is None and q.next_start(8300) == 8392 and q.next_start(8443) is None
    # Another process (a fresh object) loads the same table; refresh picks up additions.
    other = Quarantine(tmp_path, clock).load()
    assert [(e.offset, e.end) for e in other.ranges] == [(8292, 8392), (8392, 8442)]
    with make_segment(tmp_path, bytes(300) + b"C" * 10) as f:
        q.quarantine(f, 8192, 300, 310, reason="x", found_by="read")
    other.refresh()
    assert other.covering(8495) is not None


def test_torn_tail_copies_are_listed_but_not_skipped(tmp_path: Path, clock: FakeClock):
    q = Quarantine(tmp_path, clock).load()
    with make_segment(tmp_path, bytes(10) + b"torn") as f:
        first = q.quarantine(f, 0, 10, 4096, reason="r", found_by="recovery", kind="torn_tail")
        clock.advance(5)
        second = q.quarantine(f, 0, 10, 4096, reason="r", found_by="recovery", kind="torn_tail")
    assert first.name != second.name and first.copied_bytes == 4
    assert not q.ranges and q.covering(10) is None
    assert [e.name for e in Quarantine(tmp_path).load().entries()] == [first.name, second.name]


def test_readonly_quarantine_writes_nothing(tmp_path: Path, clock: FakeClock):
    q = Quarantine(tmp_path, clock, readonly=True).load()
    with make_segment(tmp_path, b"x" * 20) as f:
        q.quarantine(f, 0, 0, 20, reason="r", found_by="read")
    assert q.covering(5) is not None
    assert not (tmp_path / "quarantine").exists()


def test_queue_offsets_of_quarantined_headers_are_reserved(tmp_path: Path, clock: FakeClock):
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 30, clock)
        last = [e for e in oracle.messages if (e.topic, e.queue_id) == ("orders", 0)][-1]
        patch_log(store, last.phys_offset + HEADER_BYTES, b"\xff")  # body: the header reads
        assert store.commit_log.quarantine_unreadable(last.phys_offset, last.size, "test")
        [entry] = store.quarantine.ranges
        assert [(r.topic, r.queue_id, r.queue_offset) for r in entry.records] == [
            ("orders", 0, last.queue_offset)
        ]
        table = {("orders", 0): last.queue_offset}  # as if its unit had never been written
        assert store.quarantine.next_queue_offsets(table) == 1
        assert table == {("orders", 0): last.queue_offset + 1}
        # A header that says something far off (a flipped QUEUEOFFSET) reserves nothing.
        assert store.quarantine.next_queue_offsets({("orders", 0): 0}) == 0


# --- reput ------------------------------------------------------------------------------------


def test_reput_walks_jump_over_quarantined_ranges(tmp_path: Path, clock: FakeClock):
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 300, clock)
        log = store.commit_log
        victims = [oracle.messages[40], oracle.messages[42], oracle.messages[200]]
        patch_log(store, victims[0].phys_offset + 4, bytes(4))  # magic: reput would stop
        patch_log(store, victims[1].phys_offset + HEADER_BYTES, b"?")
        patch_log(store, victims[2].phys_offset + 4, bytes(4))
        expected = [e.phys_offset for e in oracle.messages if e not in victims]
        # Unknown to the table, a zeroed magic stops the walk: recovery's business.
        walked = list(log.iter_dispatch(0, log.max_offset, 1 << 30, log.delay_levels_ms))
        assert walked[-1] == victims[0].phys_offset
        for v in victims:
            assert log.quarantine_unreadable(v.phys_offset, v.size, "test")
        walked = list(log.iter_dispatch(0, log.max_offset, 1 << 30, log.delay_levels_ms))
        assert [r.phys_offset for r in walked if isinstance(r, DispatchRequest)] == expected
        assert walked[-1] == log.max_offset
        columns, reached = dispatch_columns(log, 0, log.max_offset, 1 << 30, log.delay_levels_ms)
        assert [row[3] for row in columns.rows()] == expected and reached == log.max_offset


# --- readers ----------------------------------------------------------------------------------


def test_a_body_flipped_after_start_is_quarantined_by_a_pull(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
):
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 200, clock)
        victim = oracle.messages[77]
        patch_log(store, victim.phys_offset + HEADER_BYTES + 3, b"\x00\x01")
        with caplog.at_level(logging.ERROR):
            got = read_queue(store, victim.topic, victim.queue_id)
        assert victim.queue_offset not in [m.queue_offset for m in got]
        entry = store.quarantine.covering(victim.phys_offset)
        assert entry is not None and entry.found_by == "read"
        assert (entry.offset, entry.end) == (victim.phys_offset, victim.phys_offset + victim.size)
        assert "body CRC mismatch" in entry.reason
        assert f"quarantine:{victim.phys_offset:020d}" in {p.id for p in store.health.problems()}
        assert any("quarantined" in r.message for r in caplog.records)
        assert_all_found(store, without(oracle, victim), ids_every=13)
        assert store.query_by_key(victim.topic, victim.keys[0], *ALL_TIME) == []
        assert store.view_by_id(victim.offset_msg_id) is None


def test_a_record_damaged_after_start_is_found_by_a_lookup(tmp_path: Path, clock: FakeClock):
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 50, clock)
        victim = oracle.messages[20]
        patch_log(store, victim.phys_offset + HEADER_BYTES, b"?")
        assert store.view_by_id(victim.offset_msg_id) is None
        assert store.quarantine.covering(victim.phys_offset) is not None


def test_a_zeroed_magic_is_quarantined_by_get_records(tmp_path: Path, clock: FakeClock):
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 100, clock)
        victim = oracle.messages[10]
        patch_log(store, victim.phys_offset + 4, bytes(4))
        got = store.get_records(victim.topic, victim.queue_id, 0, 1000)
        offsets = [r.queue_offset for r in got.records]
        assert victim.queue_offset not in offsets
        expected = [
            e.queue_offset
            for e in oracle.messages
            if (e.topic, e.queue_id) == (victim.topic, victim.queue_id) and e is not victim
        ]
        assert offsets == expected[: len(offsets)] and got.status is GetStatus.FOUND
        assert store.quarantine.covering(victim.phys_offset) is not None


def test_a_unit_pointing_at_another_queues_record_is_skipped_not_quarantined(
    tmp_path: Path, clock: FakeClock
):
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 60, clock)
        queue = store.queues.get("orders", 0)
        assert queue is not None
        foreign = next(e for e in oracle.messages if e.topic == "payments")
        unit = CQ_UNIT.pack(foreign.phys_offset, foreign.size, 0)
        last = queue.segments.last()
        assert last is not None
        last.write_at(5 * CQ_UNIT_SIZE - last.base_offset, unit)  # orders-0 offset 5
        got = read_queue(store, "orders", 0)
        assert 5 not in [m.queue_offset for m in got] and len(got) == queue.max_offset - 1
        assert not store.quarantine.ranges and not store.health.problems()
        assert store.get_records("orders", 0, 5, 1).status is GetStatus.NO_MATCHED_MESSAGE
        assert store.get_records("orders", 0, 5, 1).next_offset == 6


def test_blank_units_in_the_middle_of_a_queue_are_skipped(tmp_path: Path, clock: FakeClock):
    """A gap filled with blank units (``ConsumeQueue.put``): no record has those offsets;
    a pull moves past them and a pull that finds only them says where to go on."""
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 60, clock)
        queue = store.queues.get("payments", 1)
        assert queue is not None
        last = queue.segments.last()
        assert last is not None
        for offset in (3, 4):
            last.write_at(offset * CQ_UNIT_SIZE - last.base_offset, BLANK_UNIT)
        gone = [
            e
            for e in oracle.messages
            if (e.topic, e.queue_id) == ("payments", 1) and e.queue_offset in (3, 4)
        ]
        assert len(gone) == 2
        got = read_queue(store, "payments", 1)
        assert [m.queue_offset for m in got] == [
            o for o in range(queue.max_offset) if o not in (3, 4)
        ]
        only = store.get_messages("g", "payments", 1, 3, 2)
        assert (only.status, only.next_offset, only.messages) == (
            GetStatus.NO_MATCHED_MESSAGE,
            5,
            [],
        )
        records = store.get_records("payments", 1, 0, 1000)
        assert [r.queue_offset for r in records.records] == [m.queue_offset for m in got]
        assert not store.quarantine.ranges


def test_a_gap_from_quarantined_records_keeps_later_offsets(tmp_path: Path, clock: FakeClock):
    """The queue never renumbers: after a record is lost, the next ones keep their offsets
    and a consumer reads past the hole."""
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 40, clock)
        victim = oracle.messages[30]
        patch_log(store, victim.phys_offset + HEADER_BYTES, b"?")
    (tmp_path / "abort").write_text("1")
    # Every ConsumeQueue gone: the crash recovery rebuilds them from the log.
    for path in sorted((tmp_path / "consumequeue").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        assert store.quarantine.covering(victim.phys_offset) is not None
        queue = store.queues.get(victim.topic, victim.queue_id)
        assert queue is not None
        hole = queue.unit_at(victim.queue_offset)
        assert hole is not None and hole.size == 2**31 - 1  # a blank unit
        assert_all_found(store, without(oracle, victim), ids_every=7)


def test_ranges_never_overlap_when_damage_spreads(tmp_path: Path, clock: FakeClock):
    """A record quarantined by a read, then the record before it damaged too: recovery's
    range for the new damage ends where the known one starts, and both are skipped."""
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        oracle = Oracle()
        fill(store, oracle, 120, clock)
        first, second = oracle.messages[60], oracle.messages[61]
        assert first.phys_offset + first.size == second.phys_offset
        patch_log(store, second.phys_offset + HEADER_BYTES, b"?")
        assert store.commit_log.quarantine_unreadable(second.phys_offset, second.size, "t")
        patch_log(store, first.phys_offset + 4, bytes(4))
    (tmp_path / "abort").write_text("1")
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        ranges = [(e.offset, e.end) for e in store.quarantine.ranges]
        assert ranges == [
            (first.phys_offset, second.phys_offset),
            (second.phys_offset, second.phys_offset + second.size),
        ]
        assert_all_found(store, without(oracle, first, second), ids_every=11)
