"""The offline checker (verify.py) and geometry inference (geometry.py) on real stores.

Each defect kind is made by hand in the files of a good store, then the check must name it:
the file, the position and what is wrong, one line each.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.consume_queue import CQ_UNIT
from mqcore.store.index.index_file import ENTRY, HEADER, SLOT, index_file_size
from mqcore.store.recovery.geometry import infer_geometry
from mqcore.store.recovery.verify import CheckReport, check_store
from tests.support.store_oracle import Oracle

T0 = 1_700_000_000_000
CONFIG = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=100,
    index_hash_slots=7,
    index_max_entries=120,
)


def make_store(root: Path, count: int = 500, config: StoreConfig = CONFIG) -> Oracle:
    clock = FakeClock(T0)
    oracle = Oracle()
    with MessageStore(root, config, clock=clock) as store:
        for i in range(count):
            msg = Message(
                ("orders", "payments")[i % 2], b"%05d" % i * 40, tags=f"T{i % 3}", keys=[f"k{i}"]
            )
            oracle.put(store, msg, i % 3)
            clock.advance(7)
    return oracle


def check(root: Path) -> CheckReport:
    return check_store(root, infer_geometry(root))


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def segment(root: Path, phys: int) -> tuple[Path, int]:
    size = CONFIG.commitlog_file_size
    return root / "commitlog" / f"{phys - phys % size:020d}", phys % size


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path)] = (
                path.stat().st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return out


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Oracle]:
    root = tmp_path_factory.mktemp("good")
    return root, make_store(root)


def copy_store(src: Path, dst: Path) -> Path:
    for path in src.rglob("*"):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.name != "lock":
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    return dst


# --- a good store ---------------------------------------------------------------------------


def test_good_store_has_no_defect_and_a_full_summary(good_store: tuple[Path, Oracle]) -> None:
    root, oracle = good_store
    before = snapshot(root)
    report = check(root)
    assert report.ok, report.defects
    assert snapshot(root) == before  # read-only: not a byte, not an mtime changed
    assert report.last_exit_ok and report.notes == []
    assert report.record_sizes.count == len(oracle.messages)
    assert report.record_sizes.total_bytes == sum(e.size for e in oracle.messages)
    assert report.log_end_offset == max(e.phys_offset + e.size for e in oracle.messages)
    assert len(report.segments) >= 3
    assert all(s.ends_with_blank for s in report.segments[:-1])
    assert not report.segments[-1].ends_with_blank
    assert {(q.topic, q.queue_id): q.units_ok for q in report.queues} == {
        key: len(v) for key, v in oracle.by_queue().items()
    }
    assert all(q.max_offset == q.units_ok == q.log_records for q in report.queues)
    # Two keys per message (UNIQ_KEY and one KEYS element).
    assert sum(f.entries for f in report.index_files) == 2 * len(oracle.messages)
    assert len(report.index_files) >= 8
    assert report.as_dict()["ok"] is True


def test_check_runs_while_a_writer_holds_the_store(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    root = copy_store(good_store[0], tmp_path)
    with MessageStore(root, CONFIG, clock=FakeClock(T0 + 10**6)) as store:
        store.put_message(Message("orders", b"live", keys=["live"]))
        store.dispatch_until_caught_up()
        report = check(root)
        assert report.ok, report.defects
        assert not report.last_exit_ok  # the writer's abort file is there


# --- CommitLog defects ----------------------------------------------------------------------


def test_flipped_body_byte_in_an_old_segment(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    root = copy_store(good_store[0], tmp_path)
    victim = good_store[1].messages[30]  # first segment: normal recovery would not rescan it
    path, pos = segment(root, victim.phys_offset)
    patch(path, pos + 88 + 3, b"\xff")
    report = check(root)
    assert not report.ok
    assert report.defects[0].startswith(
        f"commitlog/{path.name}@{pos} (phys {victim.phys_offset}): body CRC mismatch"
    )
    # Its unit and its index entries point at a corrupt record; later records are still checked.
    unit = f"consumequeue/{victim.topic}/{victim.queue_id} offset {victim.queue_offset}"
    assert any(d.startswith(unit) and "CRC" in d for d in report.defects)
    assert sum("index/" in d and f"(phys {victim.phys_offset})" in d for d in report.defects) == 2
    assert report.record_sizes.count == len(good_store[1].messages) - 1
    assert report.defect_count == len(report.defects) == 4


def test_torn_tail_and_bad_phys_offset_field(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    root = copy_store(good_store[0], tmp_path)
    messages = good_store[1].messages
    last, other = messages[-1], messages[-40]
    path, pos = segment(root, last.phys_offset)
    patch(path, pos + 80, bytes(CONFIG.commitlog_file_size - pos - 80))  # a torn tail
    other_path, other_pos = segment(root, other.phys_offset)
    patch(other_path, other_pos + 28, struct.pack(">q", 12345))  # PHYSICALOFFSET field
    report = check(root)
    where = f"commitlog/{path.name}@{pos} (phys {last.phys_offset})"
    assert any(d.startswith(where) and "torn tail" in d for d in report.defects), report.defects
    assert any("PHYSICALOFFSET field says 12345" in d for d in report.defects)
    assert report.log_end_offset == last.phys_offset


def test_mid_log_corruption_is_named_as_such_not_as_the_end_of_data(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    """A zeroed magic code in the middle of the newest segment: the records after it are
    still checked, the range is a mid-log defect, and the end of the log is the real one."""
    root = copy_store(good_store[0], tmp_path)
    messages = good_store[1].messages
    victim = messages[-20]
    path, pos = segment(root, victim.phys_offset)
    patch(path, pos + 4, bytes(4))
    report = check(root)
    where = f"commitlog/{path.name}@{pos} (phys {victim.phys_offset})"
    [defect] = [d for d in report.defects if d.startswith(where)]
    assert "illegal magic code" in defect and "mid-log corruption" in defect
    resume = victim.phys_offset + victim.size
    assert f"{victim.size} bytes, valid records resume at phys {resume}" in defect
    assert "not quarantined yet" in defect and "torn tail" not in defect
    assert report.log_end_offset == messages[-1].phys_offset + messages[-1].size
    assert report.record_sizes.count == len(messages) - 1
    assert report.quarantine == []

    # Opened by a store: quarantined, still a defect, now listed with its problem's status.
    with MessageStore(root, CONFIG, clock=FakeClock(T0 + 10**6)) as store:
        assert store.quarantine.covering(victim.phys_offset) is not None
    report = check(root)
    assert not report.ok
    [defect] = [d for d in report.defects if d.startswith(where)]
    assert f"quarantined ({victim.phys_offset:020d}), not acknowledged" in defect
    [info] = report.quarantine
    assert (info.offset, info.end, info.kind) == (
        victim.phys_offset,
        victim.phys_offset + victim.size,
        "corrupt",
    )
    assert info.acknowledged is False and info.found_by == "recovery"
    assert f"{victim.topic}-{victim.queue_id} offset {victim.queue_offset}" in info.messages


def test_a_quarantined_range_is_a_defect_even_when_its_bytes_frame(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    """A record quarantined for a flipped topic byte (no CRC covers it) is still reported,
    twice: its topic, and the quarantine entry, so the store never checks OK."""
    root = copy_store(good_store[0], tmp_path)
    victim = good_store[1].messages[-30]
    path, pos = segment(root, victim.phys_offset)
    patch(path, pos + 88 + len(victim.body) + 1, b"/")
    with MessageStore(root, CONFIG, clock=FakeClock(T0 + 10**6)) as store:
        store.commit_log.quarantine_unreadable(victim.phys_offset, victim.size, "topic")
        assert store.quarantine.covering(victim.phys_offset) is not None
    report = check(root)
    assert any(d.startswith(f"quarantine/{victim.phys_offset:020d}") for d in report.defects)
    assert not report.ok


def test_flipped_topic_byte_is_named(good_store: tuple[Path, Oracle], tmp_path: Path) -> None:
    root = copy_store(good_store[0], tmp_path)
    victim = good_store[1].messages[100]
    path, pos = segment(root, victim.phys_offset)
    patch(path, pos + 88 + len(victim.body) + 1, b"/")  # first topic byte; no CRC covers it
    report = check(root)
    assert any("topic '/rders'" in d or "topic '/ayments'" in d for d in report.defects), (
        report.defects
    )


def test_unreadable_segment_size_is_one_defect(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    root = copy_store(good_store[0], tmp_path)
    with open(root / "commitlog" / f"{CONFIG.commitlog_file_size:020d}", "ab") as f:
        f.write(b"x")
    report = check_store(root, infer_geometry(root, commitlog_file_size=CONFIG.commitlog_file_size))
    assert report.defect_count == 1 and "length 65537" in report.defects[0]


# --- ConsumeQueue defects -------------------------------------------------------------------


def cq_file(root: Path, topic: str, queue_id: int) -> Path:
    return root / "consumequeue" / topic / str(queue_id) / f"{0:020d}"


def test_consume_queue_unit_defects(good_store: tuple[Path, Oracle], tmp_path: Path) -> None:
    root = copy_store(good_store[0], tmp_path)
    q = [e for e in good_store[1].messages if (e.topic, e.queue_id) == ("orders", 0)]
    path = cq_file(root, "orders", 0)
    patch(path, 5 * 20, CQ_UNIT.pack(q[5].phys_offset, q[5].size + 1, 0))  # wrong size
    patch(path, 6 * 20, CQ_UNIT.pack(q[8].phys_offset, q[8].size, 0))  # someone else's record
    patch(path, 7 * 20, CQ_UNIT.pack(q[7].phys_offset, q[7].size, 99))  # wrong tag code
    patch(path, 9 * 20, CQ_UNIT.pack(q[9].phys_offset + 3, q[9].size, 0))  # not a record start
    report = check(root)
    text = "\n".join(report.defects)
    assert (
        f"orders/0 offset 5 (phys {q[5].phys_offset}): size {q[5].size + 1}, the record's TOTALSIZE is {q[5].size}"
        in text
    )
    assert "orders/0 offset 6" in text and "the record's QUEUEOFFSET is 8" in text
    assert "orders/0 offset 7" in text and "tag code 99" in text
    assert "orders/0 offset 9" in text and "no valid record there" in text
    assert (
        f"orders/0 offset 7 (phys {q[7].phys_offset}): not after the previous unit's phys {q[8].phys_offset}"
        in text
    )
    assert "orders/0: 4 of its" in text  # those records lost their unit


def test_stale_units_after_the_end_are_reported(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    root = copy_store(good_store[0], tmp_path)
    q = [e for e in good_store[1].messages if (e.topic, e.queue_id) == ("payments", 1)]
    path = root / "consumequeue" / "payments" / "1" / f"{(len(q) // 100) * 2000:020d}"
    end = len(q) % 100
    patch(path, (end + 3) * 20, CQ_UNIT.pack(q[0].phys_offset, q[0].size, 0))
    report = check(root)
    assert report.defects == [
        f"consumequeue/payments/1: 1 non-zero units after the end of the queue at offset {len(q)} "
        "(recovery truncates them)"
    ]


def test_missing_units_are_a_defect_only_after_a_clean_exit(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    root = copy_store(good_store[0], tmp_path)
    for f in (root / "consumequeue" / "orders" / "2").iterdir():
        f.unlink()
    (root / "consumequeue" / "orders" / "2").rmdir()
    report = check(root)
    count = len([e for e in good_store[1].messages if (e.topic, e.queue_id) == ("orders", 2)])
    assert report.defects == [
        f"consumequeue/orders/2: {count} of its {count} records in the CommitLog have no unit "
        f"(the log reaches queue offset {count - 1}, the queue ends at 0)"
    ]
    (root / "abort").write_text("1")
    report = check(root)  # after a crash too: the snapshot knew the queue had files
    assert report.defects == [
        f"consumequeue/orders/2: {count} of its {count} records in the CommitLog have no unit "
        f"(the log reaches queue offset {count - 1}, the queue ends at 0); its directory is "
        "gone (the next start rebuilds it)"
    ]


def test_units_missing_at_the_tail_after_a_crash_are_a_note(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    """A crash between the CommitLog and reput leaves records without units at a queue's
    end: the next start dispatches them."""
    root = copy_store(good_store[0], tmp_path)
    count = len([e for e in good_store[1].messages if (e.topic, e.queue_id) == ("orders", 2)])
    path = sorted((root / "consumequeue" / "orders" / "2").iterdir())[-1]
    cut = (count % 100 - 3) * 20
    patch(path, cut, bytes(3 * 20))  # the last three units never written
    report = check(root)
    assert len(report.defects) == 1  # after a clean exit, a defect
    (root / "abort").write_text("1")
    report = check(root)
    assert report.ok, report.defects
    assert any("3 of its" in n and "the next start dispatches them" in n for n in report.notes)


def test_a_hole_in_a_queue_is_a_defect_whatever_the_exit(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    root = copy_store(good_store[0], tmp_path)
    (root / "abort").write_text("1")
    path = sorted((root / "consumequeue" / "orders" / "1").iterdir())[0]
    patch(path, 20 * 10, CQ_UNIT.pack(0, 2**31 - 1, 0))  # a blank where a record is
    report = check(root)
    assert any("1 of its" in d and "have no unit" in d for d in report.defects), report.defects


def test_an_unfinished_rebuild_is_a_defect(good_store: tuple[Path, Oracle], tmp_path: Path) -> None:
    """Side files of a rebuild that was killed: the store is half built until the next start
    (or rebuildindex) finishes or discards them; check never says OK then."""
    root = copy_store(good_store[0], tmp_path)
    side = root / "rebuild" / "consumequeue" / "orders" / "1"
    side.mkdir(parents=True)
    (side / "00000000000000000000").write_bytes(bytes(2000))
    report = check(root)
    assert report.defects == [
        "rebuild/consumequeue: side files of an unfinished rebuild (the next start or "
        "rebuildindex finishes it)"
    ]
    (root / "rebuild" / "queues.json").write_text(
        '{"state": "building", "scope": "all", "queues": []}'
    )
    report = check(root)
    assert report.defects == [
        "rebuild/queues.json: ConsumeQueue rebuild building (all queues) (the next start or "
        "rebuildindex finishes it)"
    ]


# --- index defects --------------------------------------------------------------------------


def test_index_entry_defects(good_store: tuple[Path, Oracle], tmp_path: Path) -> None:
    root = copy_store(good_store[0], tmp_path)
    name = sorted(os.listdir(root / "index"))[2]
    path = root / "index" / name
    base = HEADER.size + CONFIG.index_hash_slots * SLOT.size
    data = path.read_bytes()
    key_hash, phys, diff, prev = ENTRY.unpack_from(data, base + 5 * ENTRY.size)
    patch(path, base + 5 * ENTRY.size, ENTRY.pack(key_hash ^ 1, phys, diff, prev))
    key_hash, phys, diff, prev = ENTRY.unpack_from(data, base + 9 * ENTRY.size)
    patch(path, base + 9 * ENTRY.size, ENTRY.pack(key_hash, phys, diff + 50, prev))
    report = check(root)
    text = "\n".join(report.defects)
    assert f"index/{name} entry 5 (phys" in text and "matches no key of the record" in text
    assert f"index/{name} entry 9 (phys {phys}): time_diff {diff + 50}s" in text
    # IndexService.check sees the changed hash in its slot chain too.
    assert f"index/{name}: " in text


# --- geometry inference ---------------------------------------------------------------------


def test_cut_short_queue_and_index_files_are_defects(
    good_store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    """And the index geometry still comes from the other files."""
    root = copy_store(good_store[0], tmp_path)
    index = sorted((root / "index").iterdir())
    os.truncate(index[0], 1000)
    queue = sorted((root / "consumequeue" / "orders" / "1").iterdir())[0]
    os.truncate(queue, 333)
    geometry = infer_geometry(root)
    assert (geometry.index_hash_slots, geometry.index_max_entries) == (7, 120)
    report = check(root)
    size = index_file_size(7, 120)
    cut = (
        f"consumequeue/orders/1/{queue.name}: cut short, 333 bytes of 2000 (the next start "
        "rebuilds the queue)"
    )
    assert cut in report.defects
    assert f"index/{index[0].name}: 1000 bytes, expected {size} for 7 slots x 120 entries" in (
        report.defects
    )
