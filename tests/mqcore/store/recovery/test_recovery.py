"""Recovery on damaged and foreign stores (spec 5.4-5.8), against an in-memory oracle.

Damage is done to real files at seeded-random places: one byte is flipped in a record's body
(the CRC catches it) or in a header field recovery checks (TOTALSIZE, MAGIC, BODYCRC,
BODYLENGTH, TOPICLENGTH, PROPERTIESLENGTH), anywhere but in the last record of the log: that
is mid-log corruption, quarantined with every other record kept. The tail of the newest
segment torn mid-record, garbage after the last record and a damaged last record are torn
tails: cut, after their bytes are copied to the quarantine. Bytes of other header fields
carry no check in RocketMQ's format, so they are not flipped here.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.format.msgid import HostAddress
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.recovery.geometry import infer_geometry
from mqcore.store.recovery.verify import check_store
from tests.support.foreign_store import ForeignMessage, write_commitlog
from tests.support.store_oracle import (
    ALL_TIME,
    Expected,
    Oracle,
    assert_all_found,
    read_queue,
)

T0 = 1_700_000_000_000
CONFIG = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=100,
    index_hash_slots=7,
    index_max_entries=200,
)
SEGMENT = CONFIG.commitlog_file_size
HEADER_BYTES = 88  # V1 record with IPv4 hosts: the body starts here (spec 1.2)
SEEDS = range(3)


def build(root: Path, clock: FakeClock, count: int = 600) -> Oracle:
    """``count`` messages over 2 topics x 2 queues, unique keys, 1 ms apart; closed cleanly."""
    rng = random.Random(99)
    oracle = Oracle()
    with MessageStore(root, CONFIG, clock=clock) as store:
        for i in range(count):
            msg = Message(
                rng.choice(("orders", "payments")),
                rng.randbytes(rng.choice((1, 50, 300, 1200))),
                tags=rng.choice(("TagA", "TagB")),
                keys=[f"id-{i}"],
                born_host=HostAddress("10.1.2.3", 4000 + i % 50),
            )
            oracle.put(store, msg, rng.randrange(2))
            clock.advance(1)
            if i % 50 == 0:
                store.dispatch_until_caught_up()
    return oracle


def segment_of(root: Path, phys: int) -> tuple[Path, int]:
    return root / "commitlog" / f"{phys - phys % SEGMENT:020d}", phys % SEGMENT


def read_at(root: Path, phys: int, size: int) -> bytes:
    path, pos = segment_of(root, phys)
    with open(path, "rb") as f:
        f.seek(pos)
        return f.read(size)


def write_at(root: Path, phys: int, data: bytes) -> None:
    path, pos = segment_of(root, phys)
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip(root: Path, phys: int, rng: random.Random) -> None:
    write_at(root, phys, bytes([read_at(root, phys, 1)[0] ^ rng.randrange(1, 256)]))


def zero_from(root: Path, phys: int) -> None:
    write_at(root, phys, bytes(SEGMENT - phys % SEGMENT))


def log_end(oracle: Oracle) -> int:
    return max(e.phys_offset + e.size for e in oracle.messages)


def without(oracle: Oracle, *gone: Expected) -> Oracle:
    kept = Oracle()
    kept.messages = [e for e in oracle.messages if e not in gone]
    return kept


def damage(root: Path, victim: Expected, kind: str, rng: random.Random) -> None:
    """Flip one byte of ``victim``: in its body, or in a header field recovery checks."""
    body = len(victim.body)
    topic = len(victim.topic.encode())
    if kind == "body":
        flip(root, victim.phys_offset + HEADER_BYTES + rng.randrange(body), rng)
        return
    fields = [
        *range(0, 12),  # TOTALSIZE, MAGIC, BODYCRC
        *range(84, 88),  # BODYLENGTH
        HEADER_BYTES + body,  # TOPICLENGTH
        HEADER_BYTES + body + 1 + topic,  # PROPERTIESLENGTH (2 bytes)
        HEADER_BYTES + body + 2 + topic,
    ]
    flip(root, victim.phys_offset + rng.choice(fields), rng)


def choose_victim(oracle: Oracle, where: str, rng: random.Random) -> Expected:
    """A record in the newest segment or the one before, never the last of the log."""
    newest = max(e.phys_offset for e in oracle.messages) // SEGMENT
    segment = newest if where == "newest" else newest - 1
    last = max(oracle.messages, key=lambda e: e.phys_offset)
    candidates = [
        e for e in oracle.messages if e.phys_offset // SEGMENT == segment and e is not last
    ]
    return rng.choice(candidates)


def quarantine_report(root: Path, offset: int) -> dict:
    return json.loads((root / "quarantine" / f"{offset:020d}.json").read_text())


def assert_quarantined(store: MessageStore, victim: Expected, original: bytes, found_by: str):
    """The victim's range is in the table, its copy and report on disk, the health problem
    reported and unacknowledged, and its bytes still in the log."""
    root = store.root
    entry = store.quarantine.covering(victim.phys_offset, victim.size)
    assert entry is not None, store.quarantine.entries()
    assert (entry.offset, entry.end) == (victim.phys_offset, victim.phys_offset + victim.size)
    report = quarantine_report(root, victim.phys_offset)
    path, pos = segment_of(root, victim.phys_offset)
    assert report["kind"] == "corrupt" and report["found_by"] == found_by
    assert report["segment"] == f"commitlog/{path.name}" and report["position"] == pos
    assert (report["offset"], report["length"]) == (victim.phys_offset, victim.size)
    assert report["reason"] and report["found_ms"] > 0
    damaged = read_at(root, victim.phys_offset, victim.size)
    assert damaged != original
    copy = (root / "quarantine" / f"{victim.phys_offset:020d}.bin").read_bytes()
    assert copy == damaged.rstrip(b"\0")  # the bytes, kept in place as well
    problems = {p.id: p for p in store.health.problems()}
    problem = problems[f"quarantine:{victim.phys_offset:020d}"]
    assert problem.kind == "quarantine" and not problem.acknowledged
    assert store.health.status == "degraded"


def assert_victim_skipped(store: MessageStore, victim: Expected) -> None:
    assert store.query_by_key(victim.topic, victim.keys[0], *ALL_TIME) == []
    assert store.view_by_id(victim.offset_msg_id) is None
    assert store.view_by_id(victim.msg_id) is None


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["body", "header"])
@pytest.mark.parametrize(
    ("crashed", "where"),
    [(False, "newest"), (True, "newest"), (True, "before")],
    ids=["clean-newest", "abort-newest", "abort-second-to-last"],
)
def test_mid_log_corruption_is_quarantined_and_nothing_else_is_lost(
    tmp_path: Path, kind: str, crashed: bool, where: str, seed: int
) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock)
    rng = random.Random(seed)
    victim = choose_victim(oracle, where, rng)
    original = read_at(tmp_path, victim.phys_offset, victim.size)
    damage(tmp_path, victim, kind, rng)
    if crashed:
        (tmp_path / "abort").write_text("4242")  # forces abnormal recovery: a full rescan
    kept = without(oracle, victim)
    segments_before = sorted(os.listdir(tmp_path / "commitlog"))
    clock.advance(10_000)
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        report = store.recovery
        assert report is not None and report.last_exit_ok is not crashed
        # Nothing cut, no segment deleted: the log ends where it ended.
        assert report.end_offset == log_end(oracle), report
        assert (report.dropped_bytes, report.deleted_segments) == (0, []), report
        assert [e.offset for e in report.quarantined] == [victim.phys_offset], report
        assert sorted(os.listdir(tmp_path / "commitlog")) == segments_before
        assert_quarantined(store, victim, original, "recovery")
        # Every other record at its queue and offset, by key and by both ids.
        assert_all_found(store, kept, ids_every=7)
        assert_victim_skipped(store, victim)

        # New puts never take an offset a record already had; they are found.
        last_offsets = {}
        for e in oracle.messages:
            key = (e.topic, e.queue_id)
            last_offsets[key] = max(last_offsets.get(key, -1), e.queue_offset)
        for i in range(60):
            e = kept.put(
                store,
                Message(("orders", "payments")[i % 2], b"new %d" % i, keys=[f"new-{i}"]),
                i % 2,
            )
            assert e.queue_offset > last_offsets[(e.topic, e.queue_id)]
            last_offsets[(e.topic, e.queue_id)] = e.queue_offset
            clock.advance(1)
        store.dispatch_until_caught_up()
        assert_all_found(store, kept, ids_every=5)
        assert_victim_skipped(store, victim)

    # A second start finds the same range again: nothing new, the same problem.
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        assert [p.id for p in store.health.problems()] == [f"quarantine:{victim.phys_offset:020d}"]
        assert [e.offset for e in store.quarantine.ranges] == [victim.phys_offset]
        assert len(list((tmp_path / "quarantine").glob("*.json"))) == 1
        assert_all_found(store, kept, ids_every=11)
        store.health.acknowledge(None, "operator")

    checked = check_store(tmp_path, infer_geometry(tmp_path))
    assert not checked.ok
    mid_log = [d for d in checked.defects if "mid-log corruption" in d]
    assert len(mid_log) == 1 and f"(phys {victim.phys_offset})" in mid_log[0], checked.defects
    assert "acknowledged by operator" in mid_log[0]
    assert [q.offset for q in checked.quarantine] == [victim.phys_offset]
    assert checked.quarantine[0].acknowledged is True


def test_a_flipped_totalsize_that_lands_on_a_later_record_swallows_nothing(
    tmp_path: Path,
) -> None:
    """TOTALSIZE grown by the size of the next record points at a valid record: the search
    between them finds the next one first, so only the damaged record is quarantined."""
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock, count=200)
    ordered = sorted(oracle.messages, key=lambda e: e.phys_offset)
    victim, following = next(
        (a, b)
        for a, b in zip(ordered, ordered[1:], strict=False)
        if a.phys_offset // SEGMENT
        == b.phys_offset // SEGMENT
        == ordered[-1].phys_offset // SEGMENT
        and a.phys_offset + a.size == b.phys_offset
    )
    write_at(tmp_path, victim.phys_offset, struct.pack(">i", victim.size + following.size))
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        assert store.recovery is not None
        assert [(e.offset, e.end) for e in store.recovery.quarantined] == [
            (victim.phys_offset, following.phys_offset)
        ]
        assert_all_found(store, without(oracle, victim), ids_every=9)


def test_an_implausible_totalsize_is_searched_past_by_magic(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock, count=200)
    victim = choose_victim(oracle, "newest", random.Random(3))
    write_at(tmp_path, victim.phys_offset, struct.pack(">i", 0x7FFF0000))
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        assert store.recovery is not None
        assert [(e.offset, e.end) for e in store.recovery.quarantined] == [
            (victim.phys_offset, victim.phys_offset + victim.size)
        ]
        assert "TOTALSIZE" in store.recovery.quarantined[0].reason or "claims" in (
            store.recovery.quarantined[0].reason
        )
        assert_all_found(store, without(oracle, victim), ids_every=9)


def test_garbage_between_records_is_quarantined_and_the_record_after_it_kept(
    tmp_path: Path,
) -> None:
    """The second-to-last record overwritten with random bytes, the last one intact: a valid
    record after garbage is never a torn tail."""
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock, count=200)
    ordered = sorted(oracle.messages, key=lambda e: e.phys_offset)
    victim, last = ordered[-2], ordered[-1]
    assert victim.phys_offset // SEGMENT == last.phys_offset // SEGMENT
    original = read_at(tmp_path, victim.phys_offset, victim.size)
    write_at(tmp_path, victim.phys_offset, random.Random(1).randbytes(victim.size))
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        assert store.recovery is not None and store.recovery.end_offset == log_end(oracle)
        assert_quarantined(store, victim, original, "recovery")
        assert_all_found(store, without(oracle, victim), ids_every=9)
        assert [m.body for m in read_queue(store, last.topic, last.queue_id)][-1] == last.body


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort"])
def test_garbage_then_zeros_after_the_last_record_is_a_torn_tail(
    tmp_path: Path, crashed: bool
) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock, count=300)
    end = log_end(oracle)
    garbage = random.Random(2).randbytes(700).replace(b"\0", b"\1")
    write_at(tmp_path, end, garbage)
    if crashed:
        (tmp_path / "abort").write_text("1")
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        report = store.recovery
        assert report is not None
        assert report.end_offset == end and report.dropped_bytes == len(garbage), report
        assert report.quarantined == [] and not store.quarantine.ranges
        [copy] = report.tail_copies
        assert (copy.kind, copy.offset, copy.copied_bytes) == ("torn_tail", end, len(garbage))
        assert (tmp_path / "quarantine" / f"{copy.name}.bin").read_bytes() == garbage
        assert read_at(tmp_path, end, len(garbage)) == bytes(len(garbage))  # zeroed
        # Unexpected after a clean exit: a problem then; after a crash, a torn write.
        problems = [p.id for p in store.health.problems()]
        assert problems == ([f"quarantine:{copy.name}"] if not crashed else [])
        assert_all_found(store, oracle, ids_every=9)
        oracle.put(store, Message("orders", b"after", keys=["after"]))
        store.dispatch_until_caught_up()
        assert_all_found(store, oracle, ids_every=9)
    assert check_store(tmp_path, infer_geometry(tmp_path)).ok


def test_a_damaged_last_record_is_a_torn_tail_and_its_bytes_are_kept(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock, count=300)
    last = max(oracle.messages, key=lambda e: e.phys_offset)
    flip(tmp_path, last.phys_offset + HEADER_BYTES, random.Random(4))
    damaged = read_at(tmp_path, last.phys_offset, last.size)
    (tmp_path / "abort").write_text("1")
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        report = store.recovery
        assert report is not None and report.end_offset == last.phys_offset
        assert "body CRC mismatch" in report.stop_reason
        [copy] = report.tail_copies
        assert (tmp_path / "quarantine" / f"{copy.name}.bin").read_bytes() == damaged
        assert_all_found(store, without(oracle, last), ids_every=9)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_tail_torn_mid_record_is_cut_and_copied(tmp_path: Path, seed: int) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock)
    rng = random.Random(seed)
    last = max(oracle.messages, key=lambda e: e.phys_offset)
    cut = last.phys_offset + rng.randrange(1, HEADER_BYTES + len(last.body) + 1)
    kept_bytes = read_at(tmp_path, last.phys_offset, cut - last.phys_offset)
    zero_from(tmp_path, cut)
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        report = store.recovery
        assert report is not None and report.end_offset == last.phys_offset, report
        assert report.dropped_bytes == len(kept_bytes.rstrip(b"\0"))
        copies = [e for e in store.quarantine.entries() if e.kind == "torn_tail"]
        assert len(copies) == 1 and copies[0].offset == last.phys_offset
        copy = (tmp_path / "quarantine" / f"{copies[0].name}.bin").read_bytes()
        assert copy == kept_bytes.rstrip(b"\0")
        assert_all_found(store, without(oracle, last), ids_every=9)
    assert check_store(tmp_path, infer_geometry(tmp_path)).ok


def test_a_truncated_middle_segment_keeps_every_later_segment(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(names) >= 4
    middle = tmp_path / "commitlog" / names[1]
    base = int(names[1])
    cut_at = SEGMENT // 2
    os.truncate(middle, cut_at)
    lost = [e for e in oracle.messages if base <= e.phys_offset < base + SEGMENT]
    lost = [e for e in lost if e.phys_offset + e.size > base + cut_at]
    assert lost
    kept = without(oracle, *lost)
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        report = store.recovery
        assert report is not None and report.end_offset == log_end(oracle)
        assert sorted(os.listdir(tmp_path / "commitlog")) == names
        assert report.truncated_segments == [(names[1], cut_at)]
        problems = {p.id: p for p in store.health.problems()}
        truncated = problems[f"commitlog_truncated:{names[1]}"]
        assert truncated.detail["bytes_missing"] == SEGMENT - cut_at
        assert names[1] in truncated.summary
        # The missing part (and the record cut in two) is quarantined up to the segment end.
        first_lost = min(e.phys_offset for e in lost)
        [entry] = report.quarantined
        assert (entry.offset, entry.end) == (first_lost, base + SEGMENT)
        assert f"quarantine:{first_lost:020d}" in problems
        assert_all_found(store, kept, ids_every=9)
        for e in lost:
            assert store.query_by_key(e.topic, e.keys[0], *ALL_TIME) == []
        kept.put(store, Message("orders", b"after", keys=["after"]))
        store.dispatch_until_caught_up()
        assert_all_found(store, kept, ids_every=9)
    checked = check_store(tmp_path, infer_geometry(tmp_path))
    assert not checked.ok and any("mid-log corruption" in d for d in checked.defects)


def test_a_truncated_last_segment_is_recovered_up_to_its_last_valid_record(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    newest = tmp_path / "commitlog" / names[-1]
    base = int(names[-1])
    in_newest = sorted(
        (e for e in oracle.messages if e.phys_offset >= base), key=lambda e: e.phys_offset
    )
    assert len(in_newest) >= 4
    cut_at = in_newest[len(in_newest) // 2].phys_offset - base + 30  # inside a record
    os.truncate(newest, cut_at)
    lost = [e for e in in_newest if e.phys_offset + e.size > base + cut_at]
    kept = without(oracle, *lost)
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        report = store.recovery
        assert report is not None
        assert report.end_offset == min(e.phys_offset for e in lost)
        assert report.truncated_segments == [(names[-1], cut_at)]
        assert f"commitlog_truncated:{names[-1]}" in {p.id for p in store.health.problems()}
        [copy] = report.tail_copies  # the 30 bytes of the record that was cut in two
        assert copy.offset == report.end_offset and copy.copied_bytes <= 30
        assert_all_found(store, kept, ids_every=9)
        kept.put(store, Message("payments", b"after", keys=["after"]), 1)
        store.dispatch_until_caught_up()
        assert_all_found(store, kept, ids_every=9)


def test_clean_store_reopens_without_loss_or_report(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock)
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        report = store.recovery
        assert report is not None
        assert (report.dropped_bytes, report.deleted_segments, report.index_files_dropped) == (
            0,
            [],
            [],
        )
        assert report.end_offset == max(e.phys_offset + e.size for e in oracle.messages)
        assert_all_found(store, oracle)


def test_zeroed_newest_segment_is_dropped_whole(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock)
    newest = max(e.phys_offset for e in oracle.messages)
    base = newest - newest % CONFIG.commitlog_file_size
    zero_from(tmp_path, base)
    (tmp_path / "abort").write_text("1")
    kept = Oracle()
    kept.messages = [e for e in oracle.messages if e.phys_offset < base]
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        assert store.recovery is not None and store.recovery.end_offset == base
        assert_all_found(store, kept)
        kept.put(store, Message("orders", b"after", keys=["after"]))
        store.dispatch_until_caught_up()
        assert_all_found(store, kept)


# --- a store written by someone else ---------------------------------------------------------


def foreign_messages(count: int) -> list[ForeignMessage]:
    rng = random.Random(5)
    out = []
    for i in range(count):
        uniq = f"C0A8000A{i:04X}1B6D3586{i * 7:08X}{i:04X}"
        props = {"KEYS": f"order-{i} customer-{i % 9}", "UNIQ_KEY": uniq, "TAGS": f"Tag{i % 3}"}
        out.append(
            ForeignMessage(
                topic=("TopicTest", "Billing")[i % 2],
                queue_id=rng.randrange(3),
                body=f"foreign body {i} ".encode() * rng.randint(1, 20),
                properties=props,
                born_timestamp=T0 - 5000 + i * 3,
                store_timestamp=T0 + i * 10,
                flag=i,
            )
        )
    return out


def offset_msg_id(phys: int) -> str:
    """Spec 2.3 by hand: store host 10.0.0.5:10911 (what foreign_store writes) + offset."""
    return (socket.inet_aton("10.0.0.5") + struct.pack(">iq", 10911, phys)).hex().upper()


def test_foreign_store_is_recovered_and_indexed(tmp_path: Path) -> None:
    written = write_commitlog(tmp_path, foreign_messages(240), file_size=8192)
    assert len(list((tmp_path / "commitlog").iterdir())) >= 5
    config = StoreConfig(
        commitlog_file_size=8192,
        consume_queue_file_entries=20,
        index_hash_slots=7,
        index_max_entries=100,
    )
    clock = FakeClock(T0 + 100_000)
    with MessageStore(tmp_path, config, clock=clock) as store:
        report = store.recovery
        assert report is not None and not report.last_exit_ok
        assert report.records_dispatched == len(written) and report.dropped_bytes == 0
        queues: dict[tuple[str, int], list] = {}
        for w in written:
            queues.setdefault((w.message.topic, w.message.queue_id), []).append(w)
        for (topic, queue_id), expected in queues.items():
            got = read_queue(store, topic, queue_id)
            assert [m.queue_offset for m in got] == [w.queue_offset for w in expected]
            for m, w in zip(got, expected, strict=True):
                assert_foreign(m, w.message, w.phys_offset)
        for w in written:
            m = w.message
            for key in m.properties["KEYS"].split():
                found = store.query_by_key(m.topic, key, *ALL_TIME, max_count=64)
                assert w.phys_offset in [f.phys_offset for f in found], key
            by_offset = store.view_by_id(offset_msg_id(w.phys_offset))
            assert by_offset is not None
            assert_foreign(by_offset, m, w.phys_offset)
            by_uniq = store.view_by_id(m.properties["UNIQ_KEY"])
            assert by_uniq is not None and by_uniq.phys_offset == w.phys_offset
        # Cairn goes on writing where the foreign broker stopped.
        last = store.put_message(Message("TopicTest", b"cairn", keys=["cairn-1"]), queue_id=0)
        assert last.queue_offset == len(queues[("TopicTest", 0)])
        assert last.phys_offset >= written[-1].phys_offset + written[-1].size
        store.dispatch_until_caught_up()
        assert [m.phys_offset for m in store.query_by_key("TopicTest", "cairn-1", *ALL_TIME)] == [
            last.phys_offset
        ]
    report = check_store(tmp_path, infer_geometry(tmp_path))
    assert report.ok, report.defects


def assert_foreign(found, m: ForeignMessage, phys: int) -> None:
    assert (found.topic, found.queue_id, found.phys_offset) == (m.topic, m.queue_id, phys)
    assert found.body == m.body
    assert found.flag == m.flag
    assert (found.born_timestamp, found.store_timestamp) == (m.born_timestamp, m.store_timestamp)
    assert found.born_host == HostAddress("192.168.0.10", 50123)
    assert found.store_host == HostAddress("10.0.0.5", 10911)
    assert found.properties == m.properties
    assert found.msg_id == m.properties["UNIQ_KEY"]
    assert found.offset_msg_id == offset_msg_id(phys)


# --- index files left half-created by a crash --------------------------------------------------


def crash_mid_index_create(root: Path, oracle: Oracle, size: int | None) -> str:
    """What a kill inside ``IndexFile.create`` leaves: a newest file, 0 bytes or all zeros."""
    names = sorted(os.listdir(root / "index"))
    assert len(names) >= 2
    name = str(int(names[-1]) + 1)
    with open(root / "index" / name, "wb") as f:
        f.truncate(size if size is not None else 0)
    (root / "abort").write_text("1")
    return name


def test_headless_newest_index_file_is_dropped(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock, count=300)
    size = (tmp_path / "index" / sorted(os.listdir(tmp_path / "index"))[0]).stat().st_size
    name = crash_mid_index_create(tmp_path, oracle, size)
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        assert store.recovery is not None and name in store.recovery.index_files_dropped
        assert_all_found(store, oracle, ids_every=10)
    report = check_store(tmp_path, infer_geometry(tmp_path))
    assert report.ok, report.defects
    # Without the drop, the rescan after the crash indexes every message a second time. With
    # it, only the keys of the message at the newest file's end offset are (RocketMQ's quirk).
    entries = sum(f.entries for f in report.index_files)
    assert 2 * len(oracle.messages) <= entries <= 2 * len(oracle.messages) + 2


def test_zero_length_newest_index_file_does_not_block_open(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock, count=300)
    crash_mid_index_create(tmp_path, oracle, None)
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        assert_all_found(store, oracle, ids_every=10)


# --- broker role (Celery mode): the CommitLog writer recovers alone ---------------------------


@pytest.mark.parametrize("where", ["newest", "before"])
def test_broker_role_recovery_quarantines_mid_log_corruption(tmp_path: Path, where: str) -> None:
    from mqcore.services import reput
    from tests.mqcore.services.conftest import SMALL, drain, put_many, reput_all

    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    worker = MessageStore(tmp_path, SMALL, role="services").open()
    put_many(broker, 400)
    reput_all(worker)
    units = [
        (u.phys_offset, u.size, u.queue_offset, queue_id)
        for queue_id in (0, 1)
        for offset in range(200)
        if (u := worker.queues.get("Orders", queue_id).unit_at(offset))  # type: ignore[union-attr]
    ]
    assert len(units) == 400
    end = broker.commit_log.max_offset
    reput.release(worker)
    worker.close()
    broker.close()
    size = SMALL.commitlog_file_size
    segment = end // size if where == "newest" else end // size - 1
    in_segment = sorted(u for u in units if u[0] // size == segment and u[0] + u[1] < end)
    phys, record_size, queue_offset, queue_id = in_segment[len(in_segment) // 2]
    path = tmp_path / "commitlog" / f"{phys - phys % size:020d}"
    with open(path, "r+b") as f:
        f.seek(phys % size + HEADER_BYTES + 2)  # a body byte
        f.write(b"\xff")
    if where == "before":
        (tmp_path / "abort").write_text("1")
    segments_before = sorted(os.listdir(tmp_path / "commitlog"))

    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    worker = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        report = broker.recovery
        assert report is not None and report.end_offset == end, report
        assert [(e.offset, e.end) for e in report.quarantined] == [(phys, phys + record_size)]
        assert sorted(os.listdir(tmp_path / "commitlog")) == segments_before
        assert f"quarantine:{phys:020d}" in {p.id for p in broker.health.problems()}
        reput_all(worker)
        lost = 2 * queue_offset + queue_id  # put_many alternates queues: body "order {i}"
        for q in (0, 1):
            assert drain(broker, "Orders", q) == [
                f"order {i}".encode() for i in range(400) if i % 2 == q and i != lost
            ]
        assert broker.query_by_key("Orders", f"K{lost}", 0, 2**62) == []
        assert [m.body for m in broker.query_by_key("Orders", "K7", 0, 2**62)] == [b"order 7"]
        put_many(broker, 10, start=400)
        reput_all(worker)
        assert drain(broker, "Orders", queue_id, queue_offset + 1)[-1] == (
            f"order {408 + queue_id}".encode()
        )
    finally:
        reput.release(worker)
        worker.close()
        broker.close()
