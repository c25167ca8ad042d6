"""Recovery on damaged and foreign stores (spec 5.4-5.8), against an in-memory oracle.

Damage is done to real files at seeded-random places: the tail of the newest segment is torn
mid-record, or one byte is flipped in a record's body (the CRC catches it) or in a header field
recovery checks (TOTALSIZE, MAGIC, BODYCRC, BODYLENGTH, TOPICLENGTH, PROPERTIESLENGTH). Bytes of
other header fields carry no check in RocketMQ's format, so they are not flipped here.
"""

from __future__ import annotations

import os
import random
import socket
import struct
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.geometry import infer_geometry
from mqcore.store.msgid import HostAddress
from mqcore.store.verify import check_store
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
    size = CONFIG.commitlog_file_size
    return root / "commitlog" / f"{phys - phys % size:020d}", phys % size


def flip(root: Path, phys: int, rng: random.Random) -> None:
    path, pos = segment_of(root, phys)
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ rng.randrange(1, 256)]))


def zero_from(root: Path, phys: int) -> None:
    path, pos = segment_of(root, phys)
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(bytes(CONFIG.commitlog_file_size - pos))


def damage(root: Path, oracle: Oracle, kind: str, *, anywhere: bool, seed: int) -> Expected:
    """Damage one record (returned); only the newest segment unless ``anywhere``."""
    rng = random.Random(seed)
    newest = max(e.phys_offset for e in oracle.messages) // CONFIG.commitlog_file_size
    candidates = [
        e
        for e in oracle.messages
        if anywhere and kind != "torn" or e.phys_offset // CONFIG.commitlog_file_size == newest
    ]
    victim = rng.choice(candidates)
    body = len(victim.body)
    topic = len(victim.topic.encode())
    if kind == "torn":
        # Torn within the header, body or topic length: the part the format checks. Bytes of
        # the topic and properties carry no check (no CRC) in RocketMQ's format.
        zero_from(root, victim.phys_offset + rng.randrange(1, HEADER_BYTES + body + 1))
    elif kind == "body":
        flip(root, victim.phys_offset + HEADER_BYTES + rng.randrange(body), rng)
    else:
        fields = [
            *range(0, 12),  # TOTALSIZE, MAGIC, BODYCRC
            *range(84, 88),  # BODYLENGTH
            HEADER_BYTES + body,  # TOPICLENGTH
            HEADER_BYTES + body + 1 + topic,  # PROPERTIESLENGTH (2 bytes)
            HEADER_BYTES + body + 2 + topic,
        ]
        flip(root, victim.phys_offset + rng.choice(fields), rng)
    return victim


def split(oracle: Oracle, at: int) -> tuple[Oracle, list[Expected]]:
    kept = Oracle()
    kept.messages = [e for e in oracle.messages if e.phys_offset < at]
    return kept, [e for e in oracle.messages if e.phys_offset >= at]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["torn", "body", "header"])
@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort"])
def test_recovery_truncates_at_the_first_bad_record(
    tmp_path: Path, kind: str, crashed: bool, seed: int
) -> None:
    clock = FakeClock(T0)
    oracle = build(tmp_path, clock)
    victim = damage(tmp_path, oracle, kind, anywhere=crashed, seed=seed)
    if crashed:
        (tmp_path / "abort").write_text("4242")  # forces abnormal recovery: a full rescan
    kept, dropped = split(oracle, victim.phys_offset)
    clock.advance(10_000)
    with MessageStore(tmp_path, CONFIG, clock=clock) as store:
        report = store.recovery
        assert report is not None and report.last_exit_ok is not crashed
        assert report.end_offset == victim.phys_offset, report
        assert report.dropped_bytes > 0, report
        assert str(victim.phys_offset) in report.stop_reason, report

        # Everything before the bad record is intact; nothing after it is visible.
        assert_all_found(store, kept, ids_every=7)
        for topic, queue_id in {(e.topic, e.queue_id) for e in oracle.messages}:
            count = sum(1 for e in kept.messages if (e.topic, e.queue_id) == (topic, queue_id))
            assert store.max_offset(topic, queue_id) == count
            assert all(u.phys_offset < victim.phys_offset for u in _units(store, topic, queue_id))
        for e in dropped:
            assert store.query_by_key(e.topic, e.keys[0], *ALL_TIME) == []
            assert store.view_by_id(e.msg_id) is None
            assert store.view_by_id(e.offset_msg_id) is None

        # New puts continue the queues and are found (the index was rebuilt past the cut).
        for i in range(60):
            kept.put(
                store,
                Message(("orders", "payments")[i % 2], b"new %d" % i, keys=[f"new-{i}"]),
                i % 2,
            )
            clock.advance(1)
        store.dispatch_until_caught_up()
        assert_all_found(store, kept, ids_every=5)
        for e in dropped:
            assert store.query_by_key(e.topic, e.keys[0], *ALL_TIME) == []
            assert store.view_by_id(e.msg_id) is None

    report = check_store(tmp_path, infer_geometry(tmp_path))
    assert report.ok, report.defects


def _units(store: MessageStore, topic: str, queue_id: int) -> list:
    queue = store.queues.get(topic, queue_id)
    return queue.units(0, queue.max_offset) if queue else []


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
    kept, _ = split(oracle, base)
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
