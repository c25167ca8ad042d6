"""Flat CommitLog + flat ConsumeQueue over both backends, with real records from a MessageStore:
byte-for-byte copies, re-based CQ units, rolling, group commit and crash/resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import CorruptRecordError, ValidationError
from mqcore.store.consume_queue import CQ_UNIT_SIZE
from mqcore.tiered import (
    FlatFile,
    SegmentBackend,
    SegmentId,
    SegmentType,
    TieredConfig,
    TieredMetadataStore,
    TieredStoreError,
)
from mqcore.tiered.flat_file import is_blank
from tests.mqcore.tiered.conftest import TOPIC, LocalRecord

QUEUE = 1
SMALL = TieredConfig(
    commit_log_segment_size_bytes=8 * 1024,  # ~45 records of up to 3 KiB: many rolls
    consume_queue_segment_size_bytes=7 * CQ_UNIT_SIZE,
    group_commit_count=10,
    group_commit_size_bytes=16 * 1024,
    group_commit_timeout_ms=1000,
)


def open_flat(
    backend: SegmentBackend, store_root: Path, clock: FakeClock, config: TieredConfig = SMALL
) -> FlatFile:
    """What a broker does on start: load the metadata, resume the queue's flat file."""
    metadata = TieredMetadataStore(store_root).load()
    return FlatFile(backend, metadata, TOPIC, QUEUE, config, clock=clock)


def append_all(flat: FlatFile, records: list[LocalRecord], start: int = 0) -> None:
    for r in records[start:]:
        assert flat.append(r.record, r.queue_offset, r.tags_code, r.store_timestamp)


def assert_tier_holds_exactly(flat: FlatFile, records: list[LocalRecord]) -> None:
    """Every record once, byte for byte, and the CQ units re-based to the flat CommitLog."""
    assert flat.commit_offset == len(records)
    assert flat.read(0, 10_000) == [r.record for r in records]
    units = flat.units(0, 10_000)
    expected_phys = 0
    for unit, r in zip(units, records, strict=True):
        assert unit.queue_offset == r.queue_offset
        assert unit.phys_offset == expected_phys  # re-based: contiguous from 0
        assert unit.size == len(r.record)
        assert unit.tags_code == r.tags_code
        expected_phys += unit.size
    assert flat.commit_log_offset == expected_phys


def test_round_trip_byte_for_byte(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    flat = open_flat(backend, tmp_path, clock)
    assert flat.resume_report.clean
    append_all(flat, local_records)
    assert flat.dispatch_offset == len(local_records)
    assert flat.commit_offset == 0
    assert flat.read(0, 10) == []  # nothing committed yet: nothing served
    assert flat.commit() == len(local_records)
    assert flat.commit() == 0
    assert_tier_holds_exactly(flat, local_records)
    # the local phys offsets start late and have gaps (queue 2 interleaves); the tier's do not
    assert local_records[0].phys_offset > 0
    assert any(
        b.phys_offset > a.phys_offset + len(a.record)
        for a, b in zip(local_records, local_records[1:], strict=False)
    )
    # partial reads, across segment boundaries
    for start in (0, 3, 17, 44):
        assert flat.read(start, 5) == [r.record for r in local_records[start : start + 5]]
    assert flat.read(45, 5) == []
    assert flat.read(0, 0) == []


def test_segments_roll_and_seal(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    flat = open_flat(backend, tmp_path, clock)
    append_all(flat, local_records)
    flat.commit()
    cl_bases = backend.list_segments(TOPIC, QUEUE, SegmentType.COMMIT_LOG)
    cq_bases = backend.list_segments(TOPIC, QUEUE, SegmentType.CONSUME_QUEUE)
    assert len(cl_bases) >= 4
    assert cq_bases == list(range(0, len(local_records) * CQ_UNIT_SIZE, 7 * CQ_UNIT_SIZE))
    total = 0
    for i, base in enumerate(cl_bases):
        segment = SegmentId(TOPIC, QUEUE, SegmentType.COMMIT_LOG, base)
        size = backend.size(segment)
        assert base == total  # segments are contiguous in the flat CommitLog
        assert size <= SMALL.commit_log_segment_size_bytes
        assert backend.is_sealed(segment) == (i < len(cl_bases) - 1)
        total += size
    assert total == flat.commit_log_offset


def test_commit_in_groups_and_reads_stop_at_commit_offset(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    flat = open_flat(backend, tmp_path, clock)
    for r in local_records:
        flat.append(r.record, r.queue_offset, r.tags_code, r.store_timestamp)
        if flat.should_commit(r.store_timestamp):
            flat.commit()
            assert flat.commit_offset % SMALL.group_commit_count == 0 or (
                flat.commit_offset == flat.dispatch_offset
            )
    assert 40 <= flat.commit_offset < len(local_records)
    assert len(flat.read(0, 100)) == flat.commit_offset
    flat.commit()
    assert_tier_holds_exactly(flat, local_records)


def test_group_commit_thresholds(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    first = local_records[0]
    by_time = TieredConfig(group_commit_count=100, group_commit_timeout_ms=1000)
    flat = open_flat(backend, tmp_path, clock, by_time)
    assert not flat.should_commit()
    flat.append(first.record, 0, first.tags_code, first.store_timestamp)
    assert not flat.should_commit(first.store_timestamp + 999)
    assert flat.should_commit(first.store_timestamp + 1000)
    by_size = TieredConfig(group_commit_size_bytes=len(first.record))
    flat = open_flat(backend, tmp_path / "other", clock, by_size)
    flat.append(first.record, 0, first.tags_code, first.store_timestamp)
    assert flat.should_commit(first.store_timestamp)


def test_append_rejects_gaps_duplicates_and_non_records(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    flat = open_flat(backend, tmp_path, clock)
    r0, r1 = local_records[:2]
    with pytest.raises(ValidationError):
        flat.append(r1.record, 1, r1.tags_code, r1.store_timestamp)
    assert flat.append(r0.record, 0, r0.tags_code, r0.store_timestamp)
    assert not flat.append(r0.record, 0, r0.tags_code, r0.store_timestamp)  # idempotent
    with pytest.raises(CorruptRecordError):
        flat.append(r1.record[:-1], 1, r1.tags_code, r1.store_timestamp)
    with pytest.raises(CorruptRecordError):
        flat.append(r1.record + r1.record, 1, r1.tags_code, r1.store_timestamp)
    assert flat.dispatch_offset == 1


def test_starts_mid_queue(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    metadata = TieredMetadataStore(tmp_path).load()
    flat = FlatFile(backend, metadata, TOPIC, QUEUE, SMALL, clock=clock, start_queue_offset=30)
    append_all(flat, local_records, start=30)
    flat.commit()
    assert (flat.min_offset, flat.commit_offset) == (30, 45)
    assert flat.read(29, 5) == []
    assert flat.read(30, 100) == [r.record for r in local_records[30:]]
    assert backend.list_segments(TOPIC, QUEUE, SegmentType.CONSUME_QUEUE)[0] == 30 * CQ_UNIT_SIZE
    resumed = open_flat(backend, tmp_path, clock)
    assert (resumed.min_offset, resumed.commit_offset) == (30, 45)
    assert resumed.read(40, 100) == [r.record for r in local_records[40:]]


# --- crash and resume ------------------------------------------------------------------------


class Crash(Exception):
    """Stands for the process dying at this point."""


def crash_on(monkeypatch: pytest.MonkeyPatch, target: object, name: str, *, after: bool) -> None:
    """Make ``target.name`` die, before doing anything or after doing its work."""
    real = getattr(target, name)

    def dying(*args: object, **kwargs: object) -> object:
        if after:
            real(*args, **kwargs)
        raise Crash(name)

    monkeypatch.setattr(target, name, dying)


def resume_and_finish(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, records: list[LocalRecord]
) -> FlatFile:
    """A restarted dispatcher: resume, re-append from the commit offset, commit."""
    flat = open_flat(backend, tmp_path, clock)
    assert flat.dispatch_offset == flat.commit_offset
    append_all(flat, records, start=flat.commit_offset)
    flat.commit()
    return flat


@pytest.mark.parametrize(
    ("step", "after", "dirty"),
    [
        ("append", False, False),  # dies before the CommitLog upload
        ("commit_log_append", True, True),  # CommitLog uploaded, ConsumeQueue not
        ("append", True, True),  # both uploaded, metadata not saved
        ("save", False, True),  # same, dying inside the save
        ("save", True, False),  # everything durable, dies before returning
    ],
)
def test_crash_at_each_commit_step_loses_and_duplicates_nothing(
    backend: SegmentBackend,
    tmp_path: Path,
    clock: FakeClock,
    local_records: list[LocalRecord],
    monkeypatch: pytest.MonkeyPatch,
    step: str,
    after: bool,
    dirty: bool,
) -> None:
    writer = open_flat(backend, tmp_path, clock)
    append_all(writer, local_records[:20])
    writer.commit()
    append_all(writer, local_records, start=20)
    with monkeypatch.context() as m:
        if step == "save":
            crash_on(m, writer.metadata, "save", after=after)
        else:
            real_append = backend.append
            wanted = SegmentType.COMMIT_LOG if step == "commit_log_append" else None

            def dying_append(segment: SegmentId, data: bytes, position: int) -> int:
                last_cq = segment.type == SegmentType.CONSUME_QUEUE and wanted is None
                if after and (segment.type == wanted or last_cq) and _last_chunk(writer, segment):
                    real_append(segment, data, position)
                    raise Crash(step)
                if not after:
                    raise Crash(step)
                return real_append(segment, data, position)

            m.setattr(backend, "append", dying_append)
        with pytest.raises(Crash):
            writer.commit()
    # the process is gone: only the backend and the metadata file remain
    resumed = resume_and_finish(backend, tmp_path, clock, local_records)
    assert resumed.resume_report.clean == (not dirty)
    assert_tier_holds_exactly(resumed, local_records)
    again = open_flat(backend, tmp_path, clock)
    assert again.resume_report.clean
    assert_tier_holds_exactly(again, local_records)


def _last_chunk(flat: FlatFile, segment: SegmentId) -> bool:
    """Whether ``segment`` is the last one of its type to get bytes in this commit."""
    log = flat._commit_log if segment.type == SegmentType.COMMIT_LOG else flat._consume_queue
    return [s.base_offset for s in log.segments if s.pending][-1] == segment.base_offset


def test_resume_truncates_a_partial_tail_and_deletes_unknown_segments(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    flat = open_flat(backend, tmp_path, clock)
    append_all(flat, local_records[:10])
    flat.commit()
    last_cl = backend.list_segments(TOPIC, QUEUE, SegmentType.COMMIT_LOG)[-1]
    cl = SegmentId(TOPIC, QUEUE, SegmentType.COMMIT_LOG, last_cl)
    backend.append(cl, local_records[10].record[:50], backend.size(cl))  # half a record
    stray = SegmentId(TOPIC, QUEUE, SegmentType.CONSUME_QUEUE, 10_000 * CQ_UNIT_SIZE)
    backend.create(stray)
    resumed = open_flat(backend, tmp_path, clock)
    assert resumed.resume_report.truncated_bytes == {SegmentType.COMMIT_LOG: 50}
    assert resumed.resume_report.deleted_segments == [stray]
    assert not backend.exists(stray)
    append_all(resumed, local_records, start=10)
    resumed.commit()
    assert_tier_holds_exactly(resumed, local_records)


def test_resume_refuses_when_the_backend_lost_committed_bytes(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    flat = open_flat(backend, tmp_path, clock)
    append_all(flat, local_records[:10])
    flat.commit()
    last_cl = backend.list_segments(TOPIC, QUEUE, SegmentType.COMMIT_LOG)[-1]
    cl = SegmentId(TOPIC, QUEUE, SegmentType.COMMIT_LOG, last_cl)
    backend.truncate(cl, backend.size(cl) - 1)
    with pytest.raises(TieredStoreError, match="committed"):
        open_flat(backend, tmp_path, clock)
    backend.delete(cl)
    with pytest.raises(TieredStoreError, match="missing"):
        open_flat(backend, tmp_path, clock)


def test_blank_units_keep_offsets_skip_reads_and_survive_resume_and_expiry(
    backend: SegmentBackend, tmp_path: Path, clock: FakeClock, local_records: list[LocalRecord]
) -> None:
    """Offsets whose record the local store lacks (a gap fill, a quarantined record) get a
    blank unit and no CommitLog bytes: later offsets stay theirs, reads skip the blanks,
    a resume whose last unit is blank checks the CommitLog end against the last record,
    and retention finds the first offset left across blanks."""
    flat = open_flat(backend, tmp_path, clock)
    blanks = {0, 9, 10, 11, 30, 44}
    for r in local_records:
        if r.queue_offset in blanks:
            assert flat.append_blank(r.queue_offset)
        else:
            assert flat.append(r.record, r.queue_offset, r.tags_code, r.store_timestamp)
    assert not flat.append_blank(3)  # appended already
    with pytest.raises(ValidationError):
        flat.append_blank(len(local_records) + 1)
    assert flat.commit() == len(local_records) == 45
    kept = [r for r in local_records if r.queue_offset not in blanks]
    assert flat.read(0, 100) == [r.record for r in kept]
    assert flat.read(9, 3) == []  # only blanks there
    units = flat.units(0, 100)
    assert [u.queue_offset for u in units if is_blank(u)] == sorted(blanks)
    real = [u for u in units if not is_blank(u)]
    assert [u.phys_offset for u in real] == [
        sum(len(r.record) for r in kept[:i]) for i in range(len(kept))
    ]
    assert flat.commit_log_offset == sum(len(r.record) for r in kept)

    resumed = open_flat(backend, tmp_path, clock)  # its last unit (44) is blank
    assert resumed.resume_report.clean and resumed.commit_offset == 45
    assert resumed.read(40, 10) == [r.record for r in kept if r.queue_offset >= 40]
    gone = resumed.expire(kept[25].store_timestamp)
    assert gone
    low = resumed.min_offset
    assert 0 < low < 45
    assert resumed.read(low, 100) == [r.record for r in kept if r.queue_offset >= low]
    left = resumed.units(low, 100)
    first_record = next(u for u in left if not is_blank(u))
    assert resumed.entries(first_record.queue_offset, 1)[0][1] == next(
        r.record for r in kept if r.queue_offset == first_record.queue_offset
    )
