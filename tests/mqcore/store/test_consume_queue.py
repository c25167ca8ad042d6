"""ConsumeQueue and ConsumeQueueStore: put rules, reads, recovery, truncation, cleanup, time."""

from __future__ import annotations

import bisect
import dataclasses
import logging
import random
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from mqcore.clock import FakeClock
from mqcore.store.consume_queue import (
    BLANK_SIZE,
    BLANK_UNIT,
    CQ_UNIT,
    CQ_UNIT_SIZE,
    DEFAULT_FILE_SIZE_BYTES,
    Boundary,
    ConsumeQueue,
    Unit,
    round_file_size,
)
from mqcore.store.consume_queue_store import ConsumeQueueStore

UNITS_PER_FILE = 100
FILE_SIZE = UNITS_PER_FILE * CQ_UNIT_SIZE
REC = 100  # every fake CommitLog record is 100 bytes: record i sits at i * REC


@pytest.fixture
def cq(tmp_path: Path) -> Iterator[ConsumeQueue]:
    queue = ConsumeQueue(tmp_path / "consumequeue", "TopicA", 0, FILE_SIZE, clock=FakeClock())
    queue.load()
    yield queue
    queue.close()


def fill(cq: ConsumeQueue, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        assert cq.put(i * REC, REC, i * 7, i)


def reopen(cq: ConsumeQueue) -> ConsumeQueue:
    cq.close()
    again = ConsumeQueue(cq.directory.parent.parent, cq.topic, cq.queue_id, FILE_SIZE)
    again.load()
    return again


def test_unit_layout() -> None:
    assert CQ_UNIT.format == ">qiq" and CQ_UNIT_SIZE == 20
    assert CQ_UNIT.pack(1, 2, -3) == (
        (1).to_bytes(8, "big") + (2).to_bytes(4, "big") + (-3).to_bytes(8, "big", signed=True)
    )
    assert BLANK_UNIT == bytes(8) + b"\x7f\xff\xff\xff" + bytes(8)


def test_file_size_rounding(tmp_path: Path) -> None:
    assert DEFAULT_FILE_SIZE_BYTES == 6_000_000
    assert round_file_size(1990) == 2000 and round_file_size(2000) == 2000
    assert round_file_size(1) == 20
    assert ConsumeQueue(tmp_path, "t", 0, 1999).file_size == 2000


def test_put_and_read_across_files(cq: ConsumeQueue) -> None:
    fill(cq, 250)
    assert [p.name for p in sorted(cq.directory.iterdir())] == [
        f"{i * FILE_SIZE:020d}" for i in range(3)
    ]
    assert (cq.min_offset, cq.max_offset, cq.max_phys_offset) == (0, 250, 250 * REC)
    assert cq.unit_at(0) == Unit(0, 0, REC, 0)
    assert cq.unit_at(149) == Unit(149, 149 * REC, REC, 149 * 7)
    assert cq.unit_at(250) is None and cq.unit_at(-1) is None
    assert cq.last_unit() == Unit(249, 249 * REC, REC, 249 * 7)


def test_units_stay_inside_one_file(cq: ConsumeQueue) -> None:
    fill(cq, 250)
    assert [u.queue_offset for u in cq.units(95, 10)] == [95, 96, 97, 98, 99]
    assert [u.queue_offset for u in cq.units(100, 3)] == [100, 101, 102]
    assert [u.queue_offset for u in cq.units(245, 50)] == list(range(245, 250))
    assert cq.units(250, 5) == [] and cq.units(0, 0) == []
    assert cq.roll_next_file(95) == 100 and cq.roll_next_file(100) == 200


def test_idempotent_reput(cq: ConsumeQueue) -> None:
    fill(cq, 10)
    assert cq.put(5 * REC, REC, 0, 5) is False  # phys + size <= max_phys_offset
    assert cq.put(9 * REC, REC, 0, 9) is False
    assert cq.max_offset == 10
    # A higher phys offset for a queue offset already written: duplicate, skipped.
    assert cq.put(50 * REC, REC, 0, 3) is False
    assert cq.max_offset == 10
    assert cq.unit_at(3) == Unit(3, 3 * REC, REC, 21)


def test_a_gap_is_logged_and_filled_with_blanks(
    cq: ConsumeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    fill(cq, 5)
    with caplog.at_level(logging.ERROR):
        assert cq.put(10 * REC, REC, 1, 8) is True
    assert "queue offset gap" in caplog.text
    assert cq.max_offset == 9
    assert cq.unit_at(8) == Unit(8, 10 * REC, REC, 1)  # at its own offset: never renumbered
    assert [cq.unit_at(i) for i in (5, 6, 7)] == [Unit(i, 0, BLANK_SIZE, 0) for i in (5, 6, 7)]
    again = reopen(cq)
    again.recover()
    assert (again.max_offset, again.max_phys_offset) == (9, 11 * REC)
    again.close()


def test_a_gap_across_files_is_filled(cq: ConsumeQueue) -> None:
    fill(cq, 5)
    far = 3 * UNITS_PER_FILE + 7
    assert cq.put(1000 * REC, REC, 2, far) is True
    assert [m.base_offset for m in cq.segments.files] == [i * FILE_SIZE for i in range(4)]
    assert cq.max_offset == far + 1
    assert cq.unit_at(far) == Unit(far, 1000 * REC, REC, 2)
    assert cq.unit_at(UNITS_PER_FILE) == Unit(UNITS_PER_FILE, 0, BLANK_SIZE, 0)
    assert cq.put(1001 * REC, REC, 3, far + 1) is True
    assert cq.max_offset == far + 2


def test_blank_prefill_for_queue_starting_late(cq: ConsumeQueue) -> None:
    assert cq.put(7000, REC, 9, 150) is True
    files = sorted(cq.directory.iterdir())
    assert [p.name for p in files] == [f"{FILE_SIZE:020d}"]
    assert (cq.min_offset, cq.max_offset) == (150, 151)
    assert cq.unit_at(149) is None
    assert cq.unit_at(150) == Unit(150, 7000, REC, 9)
    mapped = cq.segments.files[0]
    assert mapped.read(0, 50 * CQ_UNIT_SIZE) == BLANK_UNIT * 50
    cq.put(7100, REC, 9, 151)
    again = reopen(cq)
    again.recover()
    assert again.max_phys_offset == 7200  # blanks do not count
    assert again.max_offset == 152
    again.correct_min_offset(0)
    assert again.min_offset == 150  # blanks are never exposed
    again.close()


def test_recover_torn_zeroed_tail(cq: ConsumeQueue) -> None:
    fill(cq, 250)
    last = cq.segments.files[-1]
    last.write_at(47 * CQ_UNIT_SIZE, b"\0" * (3 * CQ_UNIT_SIZE))  # units 247..249 zeroed
    last.write_at(46 * CQ_UNIT_SIZE + 8, b"\0\0\0\0")  # unit 246 torn: size 0
    again = reopen(cq)
    assert again.max_offset == 300  # all files full until recovery
    again.recover()
    assert (again.max_offset, again.max_phys_offset) == (246, 246 * REC)
    assert again.segments.files[-1].wrote_position == 46 * CQ_UNIT_SIZE
    assert again.segments.flushed_where == 246 * CQ_UNIT_SIZE
    assert again.put(246 * REC, REC, 0, 246) is True  # reput fills the hole again
    assert again.put(245 * REC, REC, 0, 245) is False
    assert again.max_offset == 247
    again.close()


def test_recover_deletes_files_after_first_invalid_unit(cq: ConsumeQueue) -> None:
    fill(cq, 450)  # five files
    cq.segments.files[3].write_at(10 * CQ_UNIT_SIZE, b"\xff" * 8)  # negative phys offset
    again = reopen(cq)
    again.recover()
    assert [f.base_offset for f in again.segments.files] == [i * FILE_SIZE for i in range(4)]
    assert again.max_offset == 310 and again.max_phys_offset == 310 * REC
    assert len(list(again.directory.iterdir())) == 4
    again.close()


def test_recover_file_boundary_keeps_empty_last_file(cq: ConsumeQueue) -> None:
    fill(cq, 200)
    cq.segments.last_or_create(0)  # a third file created, crash before its first unit
    again = reopen(cq)
    again.recover()
    assert again.max_offset == 200 and again.max_phys_offset == 200 * REC
    assert again.put(200 * REC, REC, 0, 200) is True
    assert again.max_offset == 201
    again.close()


def test_truncate_dirty_within_a_file(cq: ConsumeQueue) -> None:
    fill(cq, 250)
    cq.truncate_dirty(170 * REC + 1)  # keeps units pointing below it: 0..170
    assert (cq.max_offset, cq.max_phys_offset) == (171, 171 * REC)
    assert len(cq.segments.files) == 2
    assert cq.put(171 * REC, REC, 0, 171) is True


def test_truncate_dirty_across_file_boundary(cq: ConsumeQueue) -> None:
    fill(cq, 250)
    cq.truncate_dirty(200 * REC)  # file 3 starts exactly at the cut: deleted
    assert [f.base_offset for f in cq.segments.files] == [0, FILE_SIZE]
    assert (cq.max_offset, cq.max_phys_offset) == (200, 200 * REC)
    assert len(list(cq.directory.iterdir())) == 2
    cq.truncate_dirty(150 * REC)
    assert [f.base_offset for f in cq.segments.files] == [0, FILE_SIZE]
    assert cq.max_offset == 150
    fill(cq, 60, start=150)
    assert cq.max_offset == 210 and len(cq.segments.files) == 3


def test_truncate_dirty_everything(cq: ConsumeQueue) -> None:
    fill(cq, 50, start=300)  # a queue whose first file is not file 0
    cq.truncate_dirty(0)
    assert cq.segments.files == ()
    assert cq.max_phys_offset == 0


def test_delete_expired_files_and_correct_min_offset(cq: ConsumeQueue) -> None:
    fill(cq, 450)
    assert cq.delete_expired_files(150 * REC) == 1  # file 0's last unit (99) < 150
    assert cq.segments.files[0].base_offset == FILE_SIZE
    assert cq.min_offset == 0  # not corrected yet
    assert cq.units(0, 10) == []  # the file is gone
    cq.correct_min_offset(150 * REC)
    assert cq.min_offset == 150
    cq.correct_min_offset(150 * REC)  # intact: unchanged
    assert cq.min_offset == 150
    cq.correct_min_offset(180 * REC + 1)
    assert cq.min_offset == 181  # no unit points exactly there: the next one
    cq.correct_min_offset(199 * REC + 1)
    assert cq.min_offset == 181  # nothing in the first file: left for its deletion
    assert cq.delete_expired_files(10**9) == 3  # never the last file
    assert len(cq.segments.files) == 1
    cq.correct_min_offset(10**9)  # even the last unit is older: the queue is empty
    assert cq.min_offset == cq.max_offset == 450
    assert cq.units(449, 1) == []


def test_correct_min_offset_from_start_of_first_file(cq: ConsumeQueue) -> None:
    fill(cq, 80)
    cq.correct_min_offset(0)
    assert cq.min_offset == 0
    cq.correct_min_offset(37 * REC)
    assert cq.min_offset == 37


def build_timeline(cq: ConsumeQueue, count: int, seed: int) -> tuple[list[int], dict[int, int]]:
    rng = random.Random(seed)
    times, now = [], 1_000
    for _ in range(count):
        now += rng.choice((0, 0, 0, 1, 2, 5))  # many ties
        times.append(now)
    fill(cq, count)
    return times, {i * REC: t for i, t in enumerate(times)}


def oracle(times: list[int], ts: int, boundary: str) -> int:
    if boundary == "lower":
        return bisect.bisect_left(times, ts)
    return max(0, bisect.bisect_right(times, ts) - 1)


@pytest.mark.parametrize("seed", range(6))
def test_offset_for_time_matches_oracle(cq: ConsumeQueue, seed: int) -> None:
    times, by_phys = build_timeline(cq, 437, seed)

    def store_time_of(phys: int, size: int) -> int:
        return by_phys.get(phys, -1) if size == REC else -1

    probes = set(times) | {times[0] - 1, times[-1] + 1} | {t + 1 for t in times}
    for ts in sorted(probes):
        boundary: Boundary
        for boundary in ("lower", "upper"):
            got = cq.offset_for_time(ts, store_time_of, 0, boundary)
            assert got == oracle(times, ts, boundary), (ts, boundary)


def test_offset_for_time_ties_across_file_boundary(cq: ConsumeQueue) -> None:
    times = [10] * 95 + [20] * 110 + [30] * 5  # the 20s span files 0, 1 and 2
    fill(cq, len(times))
    by_phys = {i * REC: t for i, t in enumerate(times)}

    def store_time_of(phys: int, size: int) -> int:
        return by_phys.get(phys, -1)

    assert cq.offset_for_time(20, store_time_of, 0, "lower") == 95
    assert cq.offset_for_time(20, store_time_of, 0, "upper") == 204
    assert cq.offset_for_time(15, store_time_of, 0, "lower") == 95
    assert cq.offset_for_time(15, store_time_of, 0, "upper") == 94
    assert cq.offset_for_time(5, store_time_of, 0, "lower") == 0
    assert cq.offset_for_time(5, store_time_of, 0, "upper") == 0
    assert cq.offset_for_time(99, store_time_of, 0, "lower") == 210
    assert cq.offset_for_time(99, store_time_of, 0, "upper") == 209


def test_offset_for_time_skips_units_below_commitlog_min(cq: ConsumeQueue) -> None:
    times, by_phys = build_timeline(cq, 250, seed=1)
    min_phys = 120 * REC

    def store_time_of(phys: int, size: int) -> int:
        return by_phys[phys] if phys >= min_phys else -1

    cq.delete_expired_files(min_phys)
    cq.correct_min_offset(min_phys)
    assert cq.min_offset == 120
    live = times[120:]
    for ts in sorted(set(live) | {live[-1] + 1} | {t + 1 for t in live}):
        if ts < live[0]:
            continue  # covered below
        lower = cq.offset_for_time(ts, store_time_of, min_phys, "lower")
        upper = cq.offset_for_time(ts, store_time_of, min_phys, "upper")
        assert lower == 120 + bisect.bisect_left(live, ts), ts
        assert upper == 120 + bisect.bisect_right(live, ts) - 1, ts
    # Before the first live unit, spec 7.2 answers the first index of the file (100),
    # not min_offset; the pull path then reports OFFSET_TOO_SMALL.
    assert cq.offset_for_time(live[0] - 1, store_time_of, min_phys, "lower") == 100
    assert cq.offset_for_time(live[0] - 1, store_time_of, min_phys, "upper") == 0


def test_offset_for_time_empty_and_bad_boundary(cq: ConsumeQueue) -> None:
    assert cq.offset_for_time(5, lambda p, s: 1, 0, "lower") == 0
    with pytest.raises(ValueError):
        cq.offset_for_time(5, lambda p, s: 1, 0, "middle")  # type: ignore[arg-type]


def test_readers_never_see_half_written_units(cq: ConsumeQueue) -> None:
    total = 3000
    errors: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            end = cq.max_offset
            if end == 0:
                continue
            for unit in cq.units(max(0, end - 5), 5):
                if unit.phys_offset != unit.queue_offset * REC or unit.size != REC:
                    errors.append(repr(unit))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        fill(cq, total)
    finally:
        done.set()
        thread.join()
    assert errors == []
    assert cq.max_offset == total


def test_flush_and_destroy(cq: ConsumeQueue) -> None:
    fill(cq, 150)
    assert cq.flush(0) is True  # first file (full)
    assert cq.flush(0) is True  # second file's dirty tail
    assert cq.flush(0) is False
    cq.destroy()
    assert not cq.directory.exists()
    assert (cq.max_offset, cq.max_phys_offset, cq.min_offset) == (0, -1, 0)


# -- ConsumeQueueStore ------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConsumeQueueStore]:
    s = ConsumeQueueStore(tmp_path, file_size_bytes=FILE_SIZE, clock=FakeClock())
    s.load()
    yield s
    s.close()


def test_store_layout_and_lookup(store: ConsumeQueueStore, tmp_path: Path) -> None:
    a0 = store.find_or_create("TopicA", 0)
    assert store.find_or_create("TopicA", 0) is a0
    assert store.get("TopicA", 1) is None and store.get("Nope", 0) is None
    a0.put(0, REC, 0, 0)
    store.find_or_create("TopicA", 3).put(REC, REC, 0, 0)
    store.find_or_create("TopicB", 1).put(2 * REC, REC, 0, 0)
    assert (tmp_path / "consumequeue" / "TopicA" / "0" / f"{0:020d}").is_file()
    assert store.topics() == ["TopicA", "TopicB"]
    assert list(store.queues("TopicA")) == [0, 3]
    assert store.queues("Nope") == {}
    assert store.max_phys_offset() == 3 * REC
    with pytest.raises(ValueError):
        store.find_or_create("../evil", 0)


def test_store_load_ignores_non_integer_dirs(tmp_path: Path) -> None:
    writer = ConsumeQueueStore(tmp_path, file_size_bytes=FILE_SIZE)
    for queue_id in (0, 1):
        queue = writer.find_or_create("T", queue_id)
        for i in range(120):
            queue.put((2 * i + queue_id) * REC, REC, 0, i)
    writer.close()
    root = tmp_path / "consumequeue"
    (root / "T" / "abc").mkdir()
    (root / "T" / "01").mkdir()
    (root / "T" / "note.txt").write_text("x")
    (root / "stray-file").write_text("x")
    store = ConsumeQueueStore(tmp_path, file_size_bytes=FILE_SIZE)
    store.load()
    assert store.topics() == ["T"] and list(store.queues("T")) == [0, 1]
    store.recover_all()
    assert [q.max_offset for q in store.queues("T").values()] == [120, 120]
    assert store.max_phys_offset() == (2 * 119 + 1) * REC + REC
    store.truncate_dirty(100 * REC)
    assert [q.max_offset for q in store.queues("T").values()] == [50, 50]
    assert store.max_phys_offset() == 100 * REC
    assert store.flush_all(0) is False  # what truncation kept counts as flushed
    store.queues("T")[0].put(100 * REC, REC, 0, 50)
    assert store.flush_all(0) is True
    store.close()


def test_store_clean_expired_and_delete(store: ConsumeQueueStore) -> None:
    queue = store.find_or_create("T", 0)
    fill(queue, 250)
    other = store.find_or_create("Old", 0)
    other.put(0, REC, 0, 0)
    assert store.clean_expired(150 * REC) == 1
    assert queue.min_offset == 150
    assert other.min_offset == other.max_offset == 1  # everything below the min
    assert store.destroy_expired_queues(150 * REC, keep_topic=lambda t: t == "T") == 1
    assert store.topics() == ["T"]
    assert not other.directory.exists()
    assert store.delete_topic("T") is True
    assert store.delete_topic("T") is False
    assert store.topics() == []
    assert not (store.directory / "T").exists()


# --- put_many (reput's batch path) ---------------------------------------------------------------


def queue_bytes(queue: ConsumeQueue) -> list[tuple[str, bytes]]:
    return [(m.path.name, m.read(0, m.wrote_position)) for m in queue.segments.files]


@pytest.mark.parametrize("method", ["put_many", "put_run lists", "put_run arrays"])
@pytest.mark.parametrize("seed", range(8))
def test_put_many_equals_one_by_one(
    tmp_path: Path, seed: int, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(seed)
    start = rng.choice([0, 0, 3, 250])  # 3 and 250: the queue starts late (blank pre-fill)
    units: list[tuple[int, int, int, int]] = []
    offset = start
    for _ in range(rng.randrange(1, 400)):
        kind = rng.random()
        if kind < 0.05 and units:  # re-dispatch of an earlier record: skipped
            units.append(rng.choice(units))
            continue
        if kind < 0.08:  # a gap in queue offsets: logged, filled with blanks
            offset += rng.randrange(1, 5)
        units.append((offset * REC, REC, rng.randrange(-(2**31), 2**31), offset))
        offset += 1
    one = ConsumeQueue(tmp_path / "one", "T", 0, FILE_SIZE, clock=FakeClock())
    many = ConsumeQueue(tmp_path / "many", "T", 0, FILE_SIZE, clock=FakeClock())
    with caplog.at_level(logging.INFO):
        written_one = sum(one.put(*unit) for unit in units)
        logs_one = [r.getMessage() for r in caplog.records]
        caplog.clear()
        written_many = 0
        rest = units
        while rest:
            step = rng.randrange(1, 150)
            if method == "put_many":
                written_many += many.put_many(rest[:step])
            else:  # columns: reput's lists, or its int64 arrays
                columns: list[Sequence[int]] = [list(c) for c in zip(*rest[:step], strict=True)]
                if method == "put_run arrays":
                    columns = [np.array(column, np.int64) for column in columns]
                written_many += many.put_run(*columns)
            rest = rest[step:]
        logs_many = [r.getMessage() for r in caplog.records]
    assert written_many == written_one
    assert logs_many == logs_one
    assert queue_bytes(many) == queue_bytes(one)
    assert type(many.max_phys_offset) is int
    assert (many.min_offset, many.max_offset, many.max_phys_offset) == (
        one.min_offset,
        one.max_offset,
        one.max_phys_offset,
    )
    one.close()
    many.close()


def test_store_put_many_groups_by_queue(tmp_path: Path) -> None:
    @dataclasses.dataclass
    class Rec:
        topic: str
        queue_id: int
        phys_offset: int
        size: int
        tags_code: int
        queue_offset: int

    next_offsets: dict[tuple[str, int], int] = {}
    records = []
    for i in range(300):
        key = (random.Random(i).choice(["A", "B"]), i % 3)
        records.append(Rec(*key, i * REC, REC, i, next_offsets.get(key, 0)))
        next_offsets[key] = next_offsets.get(key, 0) + 1
    one = ConsumeQueueStore(tmp_path / "one", file_size_bytes=FILE_SIZE)
    many = ConsumeQueueStore(tmp_path / "many", file_size_bytes=FILE_SIZE)
    for r in records:
        one.find_or_create(r.topic, r.queue_id).put(
            r.phys_offset, r.size, r.tags_code, r.queue_offset
        )
    assert many.put_many(records[:120]) + many.put_many(records[120:]) == 300
    for topic in ("A", "B"):
        for queue_id in range(3):
            a, b = one.get(topic, queue_id), many.get(topic, queue_id)
            assert a is not None and b is not None
            assert queue_bytes(b) == queue_bytes(a)
    one.close()
    many.close()
