"""The start check's sampled checks (derived_check.py) on real files with bytes changed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.consume_queue import _UNIT_DTYPE, BLANK_SIZE, CQ_UNIT
from mqcore.store.index.index_file import (
    ENTRY,
    ENTRY_FIELD_OFFSETS,
    HEADER,
    HEADER_FIELD_OFFSETS,
    SLOT,
)
from mqcore.store.recovery import derived_check as dc

CONFIG = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=11,
    index_max_entries=400,
)
COUNT = 600


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("good")
    with MessageStore(root, CONFIG) as store:
        for i in range(COUNT):
            msg = Message("Orders", f"order {i}".encode(), tags=f"T{i % 4}", keys=[f"K{i}"])
            assert store.put_message(msg, i % 3).ok
    return root


def copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst / "store")
    return dst / "store"


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def xor(path: Path, pos: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ mask]))


def queue_findings(root: Path) -> dict[tuple[str, int], str]:
    with MessageStore(root, CONFIG, readonly=True) as store:
        queues = [q for t in store.queues.topics() for q in store.queues.queues(t).values()]
        return dc.check_queues(queues, store.commit_log, store.commit_log.max_offset)


def index_finding(root: Path) -> str:
    with MessageStore(root, CONFIG, readonly=True) as store:
        return dc.check_index(store.index, store.commit_log, store.commit_log.max_offset)


def queue_file(root: Path, queue_id: int, n: int) -> Path:
    return sorted((root / "consumequeue" / "Orders" / str(queue_id)).iterdir())[n]


def index_file(root: Path, n: int) -> Path:
    return sorted((root / "index").iterdir())[n]


def test_spread_and_shares() -> None:
    assert dc.spread(10, 3) == [0, 4, 9] or dc.spread(10, 3) == [0, 5, 9]
    assert dc.spread(3, 10) == [0, 1, 2]
    assert dc.spread(5, 1) == [4]
    assert dc.spread(0, 4) == []
    assert dc.shares([10, 20], 100) == [10, 20]
    assert dc.shares([1000, 3000, 1], 400) == [99, 299, 1]  # in proportion, each at least 1


def units(*rows: tuple[int, int, int]) -> np.ndarray:
    return np.frombuffer(b"".join(CQ_UNIT.pack(*r) for r in rows), dtype=_UNIT_DTYPE)


def test_structure_problem() -> None:
    assert dc.structure_problem(units((0, BLANK_SIZE, 0), (100, 10, 0), (110, 5, 0)), 7, -1) == ""
    assert "invalid unit at queue offset 8" in dc.structure_problem(
        units((100, 10, 0), (110, 0, 0)), 7, -1
    )
    assert "overlaps" in dc.structure_problem(units((100, 10, 0), (105, 5, 0)), 0, -1)
    assert "overlaps" in dc.structure_problem(units((100, 10, 0), (50, 5, 0)), 0, -1)
    assert "does not follow" in dc.structure_problem(units((100, 10, 0)), 0, 100)


def test_a_good_store_has_no_finding(good_store: Path) -> None:
    assert queue_findings(good_store) == {}
    assert index_finding(good_store) == ""


def test_an_index_file_that_does_not_open_is_noted(good_store: Path, tmp_path: Path) -> None:
    root = copy(good_store, tmp_path)
    path = index_file(root, 1)
    xor(path, HEADER_FIELD_OFFSETS["index_count"] + 2, 0x40)  # index_count > max_entries
    with MessageStore(root, CONFIG, readonly=True) as store:
        assert [name for name, _ in store.index.damaged_files] == [path.name]
        assert "index_count" in store.index.damaged_files[0][1]
    assert path.exists()  # read-only: left where it is


@pytest.mark.parametrize(
    ("field_pos", "mask", "expect"),
    [
        (3, 0x01, "overlaps"),  # phys_offset, a high byte
        (7, 0x01, "points at"),  # phys_offset, the lowest bit: off by one byte
        (11, 0x04, "size"),  # size
        (19, 0x01, "tag code"),  # tags_code
    ],
)
def test_a_flipped_unit_field_is_found(
    good_store: Path, tmp_path: Path, field_pos: int, mask: int, expect: str
) -> None:
    root = copy(good_store, tmp_path)
    xor(queue_file(root, 1, 2), 20 * 17 + field_pos, mask)
    findings = queue_findings(root)
    assert list(findings) == [("Orders", 1)]
    assert expect in findings[("Orders", 1)]


def test_a_unit_of_another_queue_is_found(good_store: Path, tmp_path: Path) -> None:
    root = copy(good_store, tmp_path)
    other = queue_file(root, 2, 0).read_bytes()[20 * 5 : 20 * 6]
    patch(queue_file(root, 1, 0), 20 * 5, other)  # points at an Orders/2 record
    findings = queue_findings(root)
    assert "of Orders/2" in findings[("Orders", 1)] or "overlaps" in findings[("Orders", 1)]


def test_every_unit_is_checked_when_the_store_is_small(good_store: Path, tmp_path: Path) -> None:
    """600 records fit the record budget: a tag flip in any unit is found."""
    for n, pos in enumerate((0, 49, 150, 199)):
        root = copy(good_store, tmp_path / str(n))
        queue = pos // 50
        xor(queue_file(root, 0, queue), 20 * (pos % 50) + 19, 0x02)
        assert ("Orders", 0) in queue_findings(root), pos


def test_a_big_store_is_sampled_within_the_budget(
    good_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dc, "RECORD_BUDGET", 12)
    with MessageStore(good_store, CONFIG, readonly=True) as store:
        queues = [q for q in store.queues.queues("Orders").values()]
        reads: list[int] = []
        reader = dc.RecordReader(store.commit_log, store.commit_log.max_offset, set())
        real_at = reader.at

        def counting(phys: int) -> object:
            reads.append(phys)
            return real_at(phys)

        reader.at = counting  # type: ignore[method-assign]
        budget = dc.Budget(records=12)
        for queue, share in zip(queues, dc.shares([200, 200, 200], 12), strict=True):
            assert dc.check_queue(queue, reader, budget, share) == ""
        # Every file of every queue gets its ends read: 3 queues x 4 files x 2.
        assert 12 <= len(reads) <= 3 * 4 * 2


@pytest.mark.parametrize(
    ("where", "expect"),
    [
        ("header_count", "slot"),  # 16 entries fewer: slots point past the count
        ("header_slots", "hash_slot_count"),
        ("slot", "slot"),
        ("entry_phys", "points at"),
        ("entry_hash", "slot"),  # the entry lands in another slot than its chain's
        ("entry_prev", "prev"),
    ],
)
def test_a_flipped_index_byte_is_found(
    good_store: Path, tmp_path: Path, where: str, expect: str
) -> None:
    root = copy(good_store, tmp_path)
    path = index_file(root, 1)
    entries_at = HEADER.size + CONFIG.index_hash_slots * SLOT.size
    entry = entries_at + 57 * ENTRY.size
    positions = {
        "header_count": (HEADER_FIELD_OFFSETS["index_count"] + 3, 0x10),
        "header_slots": (HEADER_FIELD_OFFSETS["hash_slot_count"] + 3, 0x10),
        "slot": (HEADER.size + 4 * 3 + 3, 0x01),
        "entry_phys": (entry + ENTRY_FIELD_OFFSETS["phys_offset"] + 7, 0x01),
        "entry_hash": (entry + ENTRY_FIELD_OFFSETS["key_hash"] + 3, 0x01),
        "entry_prev": (entry + ENTRY_FIELD_OFFSETS["prev_index"] + 3, 0x04),
    }
    pos, mask = positions[where]
    xor(path, pos, mask)
    finding = index_finding(root)
    assert finding.startswith(f"index/{path.name}: "), finding
    assert expect in finding, finding


@pytest.mark.parametrize("where", ["entry_phys", "entry_prev"])
def test_a_small_store_is_checked_whole_however_loaded_the_machine(
    good_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The time budget is gone before the check starts (a loaded machine): the structure
    checks and the first GUARANTEED_RECORDS record reads still happen, so damage in an old
    file of a small store is found (the fault suite once missed an entry this way)."""
    monkeypatch.setattr(dc, "TIME_BUDGET_S", -1.0)
    root = copy(good_store, tmp_path)
    path = index_file(root, 0)  # the oldest: checked last
    entry = HEADER.size + CONFIG.index_hash_slots * SLOT.size + 57 * ENTRY.size
    field, mask = {"entry_phys": ("phys_offset", 0x01), "entry_prev": ("prev_index", 0x04)}[where]
    xor(path, entry + ENTRY_FIELD_OFFSETS[field] + (7 if field == "phys_offset" else 3), mask)
    finding = index_finding(root)
    assert finding.startswith(f"index/{path.name}: "), finding


def test_a_slot_pointing_at_an_older_entry_of_its_chain_is_found(
    good_store: Path, tmp_path: Path
) -> None:
    """The slot's head moved back along its own chain (a flipped low bit often does that:
    UNIQ_KEY and KEYS entries of one message sit side by side): every head is still an entry
    of its slot, but not the newest; the finding names the slot."""
    root = copy(good_store, tmp_path)
    path = index_file(root, 1)
    data = path.read_bytes()
    entries_at = HEADER.size + CONFIG.index_hash_slots * SLOT.size
    slot, head = next(
        (s, h)
        for s in range(CONFIG.index_hash_slots)
        if (h := int.from_bytes(data[HEADER.size + 4 * s : HEADER.size + 4 * s + 4], "big")) > 1
    )
    prev_at = entries_at + head * ENTRY.size + ENTRY_FIELD_OFFSETS["prev_index"]
    prev = int.from_bytes(data[prev_at : prev_at + 4], "big")
    assert prev > 0
    patch(path, HEADER.size + 4 * slot, prev.to_bytes(4, "big"))
    finding = index_finding(root)
    assert finding == (
        f"index/{path.name}: slot {slot}'s head is entry {prev}, not its newest entry {head}"
    ), finding


def _flip_record(root: Path, queue_id: int, queue_offset: int, at: int) -> tuple[int, int]:
    """XOR a byte ``at`` bytes into the record of Orders/``queue_id`` at ``queue_offset``
    (in its CommitLog segment); returns the record's (phys, size)."""
    unit = queue_file(root, queue_id, queue_offset // 50).read_bytes()
    phys, size, _ = CQ_UNIT.unpack_from(unit, 20 * (queue_offset % 50))
    segment_size = CONFIG.commitlog_file_size
    name = f"{phys // segment_size * segment_size:020d}"
    xor(root / "commitlog" / name, phys % segment_size + at, 0x40)
    return phys, size


@pytest.mark.parametrize("at", [5, 2], ids=["magic", "totalsize"])
def test_a_unit_pointing_at_a_damaged_record_quarantines_the_record(
    good_store: Path, tmp_path: Path, at: int
) -> None:
    """The unit is right, the CommitLog went bad (in a segment recovery does not scan):
    the record is quarantined (found by the check) and neither the queue nor the index is
    damaged; the units and entries pointing into the range are accepted from then on."""
    root = copy(good_store, tmp_path)
    phys, size = _flip_record(root, 1, 17, at)
    with MessageStore(root, CONFIG, readonly=True) as store:
        queues = [q for q in store.queues.queues("Orders").values()]
        end = store.commit_log.max_offset
        assert dc.check_queues(queues, store.commit_log, end) == {}
        entry = store.quarantine.covering(phys)
        assert entry is not None and (entry.offset, entry.length) == (phys, size)
        assert entry.found_by == "check"
        assert dc.check_index(store.index, store.commit_log, end) == ""
        assert dc.check_queues(queues, store.commit_log, end) == {}


def test_an_index_entry_pointing_at_a_damaged_record_quarantines_it_through_its_unit(
    good_store: Path, tmp_path: Path
) -> None:
    """The index check alone meets the record first (a big store's sampling may): the
    record's header still names its queue unit, which frames it."""
    root = copy(good_store, tmp_path)
    phys, size = _flip_record(root, 2, 30, 5)
    with MessageStore(root, CONFIG, readonly=True) as store:
        end = store.commit_log.max_offset
        alone = dc.check_index(store.index, store.commit_log, end)
        assert "points at no valid record" in alone, alone  # nothing to tell it by
        assert store.quarantine.covering(phys) is None
        assert dc.check_index(store.index, store.commit_log, end, store.queues) == ""
        entry = store.quarantine.covering(phys)
        assert entry is not None and (entry.offset, entry.length) == (phys, size)


def test_a_unit_off_by_a_byte_next_to_damage_is_still_damage(
    good_store: Path, tmp_path: Path
) -> None:
    """A wrong pointer is never taken for a damaged record: nothing is quarantined."""
    root = copy(good_store, tmp_path)
    xor(queue_file(root, 1, 0), 20 * 9 + 7, 0x01)  # Orders/1 offset 9: phys off by one
    with MessageStore(root, CONFIG, readonly=True) as store:
        queues = [q for q in store.queues.queues("Orders").values()]
        findings = dc.check_queues(queues, store.commit_log, store.commit_log.max_offset)
        assert "points at" in findings[("Orders", 1)]
        assert store.quarantine.ranges == ()
