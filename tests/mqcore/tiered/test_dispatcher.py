"""The upload dispatcher (spec 10 "Upload"): where a queue starts, group commit, retries
after a failed upload, and the key index it builds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.services import cleanup
from mqcore.services.cleanup import CleanupState
from mqcore.store import MessageStore
from mqcore.store.consume_queue import BLANK_UNIT, CQ_UNIT_SIZE
from mqcore.store.files.mapped_file import MappedFile
from mqcore.tiered import MemoryBackend, SegmentId, SegmentType, TieredStoreError
from mqcore.tiered.config import ReadStrategy
from mqcore.tiered.dispatcher import upload_step
from mqcore.tiered.flat_file import is_blank
from mqcore.tiered.storage import TieredStorage
from mqcore.tiered.tiered_store import SOURCE_TIER, TieredMessageStore
from tests.mqcore.tiered.world import EAGER, SMALL, TOPIC


def put(store: MessageStore, count: int, clock: FakeClock, *, step_ms: int = 1000) -> None:
    for i in range(count):
        store.put_message(Message(TOPIC, f"m{i}".encode() * 10, keys=[f"k{i}"]), queue_id=0)
        clock.advance(step_ms)
    store.dispatch_until_caught_up()


def local_records(store: MessageStore, queue_id: int) -> list[bytes | None]:
    """Every record of a local queue, across ConsumeQueue files."""
    queue = store.queues.get(TOPIC, queue_id)
    assert queue is not None
    out: list[bytes | None] = []
    offset = queue.min_offset
    while units := queue.units(offset, 1000):
        out += [store.commit_log.read(u.phys_offset, u.size) for u in units]
        offset = units[-1].queue_offset + 1
    return out


def test_a_new_queue_starts_two_minutes_back(tmp_path: Path) -> None:
    clock = FakeClock()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        put(store, 200, clock)  # one per second: the last 120 are within 2 min
        tier = TieredStorage(
            MemoryBackend(),
            tmp_path,
            dataclasses.replace(EAGER, initial_window_ms=120_000),
            clock=clock,
        )
        result = upload_step(store, tier, force=True)
        flat = tier.flat_file(TOPIC, 0)
        assert flat is not None
        assert flat.min_offset == 80 and flat.commit_offset == 200
        assert result.messages_appended == 120 and result.messages_committed == 120


def test_the_window_is_clamped_to_the_local_queue(tmp_path: Path) -> None:
    clock = FakeClock()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        put(store, 10, clock, step_ms=60_000)  # everything is older than the window
        clock.advance(3_600_000)
        tier = TieredStorage(
            MemoryBackend(),
            tmp_path,
            dataclasses.replace(EAGER, initial_window_ms=120_000),
            clock=clock,
        )
        upload_step(store, tier, force=True)
        assert tier.flat_file(TOPIC, 0) is None or tier.flat_file(TOPIC, 0).commit_offset == 10  # type: ignore[union-attr]
        put(store, 1, clock)
        upload_step(store, tier, force=True)
        flat = tier.flat_file(TOPIC, 0)
        assert flat is not None and (flat.min_offset, flat.commit_offset) == (10, 11)


def test_group_commit_waits_for_count_size_or_age(tmp_path: Path) -> None:
    clock = FakeClock()
    config = dataclasses.replace(EAGER, group_commit_count=50, group_commit_timeout_ms=30_000)
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        tier = TieredStorage(MemoryBackend(), tmp_path, config, clock=clock)
        put(store, 10, clock, step_ms=10)
        result = upload_step(store, tier)
        flat = tier.flat_file(TOPIC, 0)
        assert flat is not None
        assert (result.messages_appended, result.messages_committed) == (10, 0)
        assert (flat.dispatch_offset, flat.commit_offset) == (10, 0)
        assert upload_step(store, tier).messages_committed == 0  # still young and few
        put(store, 45, clock, step_ms=10)  # 55 waiting >= 50
        result = upload_step(store, tier)
        assert flat.commit_offset == 50 and result.messages_committed == 50
        clock.advance(30_000)  # the 5 left over are now old enough
        assert upload_step(store, tier).messages_committed == 5
        put(store, 1, clock)
        assert upload_step(store, tier, force=True).messages_committed == 1
        assert flat.commit_offset == 56


def test_group_commit_by_size(tmp_path: Path) -> None:
    clock = FakeClock()
    config = dataclasses.replace(
        EAGER,
        group_commit_count=10_000,
        group_commit_size_bytes=2000,
        group_commit_timeout_ms=10**9,
    )
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        tier = TieredStorage(MemoryBackend(), tmp_path, config, clock=clock)
        put(store, 30, clock, step_ms=1)  # ~175-byte records: ~12 make 2000 bytes
        result = upload_step(store, tier)
        record = result.bytes_appended // 30
        per_commit = -(-2000 // record)
        assert result.commits == 30 // per_commit
        assert result.messages_committed == result.commits * per_commit


def test_an_old_backlog_is_committed_in_one_batch_not_per_message(tmp_path: Path) -> None:
    clock = FakeClock()
    config = dataclasses.replace(EAGER, group_commit_count=4096, group_commit_timeout_ms=30_000)
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        put(store, 300, clock, step_ms=10)
        clock.advance(60_000)  # every waiting message is past the commit timeout
        tier = TieredStorage(MemoryBackend(), tmp_path, config, clock=clock)
        result = upload_step(store, tier)
        assert (result.messages_committed, result.commits) == (300, 1)


class FlakyAppends(MemoryBackend):
    """Fails the next ``fail`` appends (after writing half the bytes when ``partial``)."""

    fail = 0
    partial = False

    def append(self, segment: SegmentId, data: bytes, position: int) -> int:
        if self.fail:
            self.fail -= 1
            if self.partial and len(data) > 1:
                super().append(segment, data[: len(data) // 2], position)
            raise TieredStoreError(f"{segment}: upload failed")
        return super().append(segment, data, position)


def test_a_failed_upload_is_retried_without_loss_or_duplicates(tmp_path: Path) -> None:
    clock = FakeClock()
    backend = FlakyAppends()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        tier = TieredStorage(backend, tmp_path, EAGER, clock=clock)
        put(store, 25, clock)
        backend.fail, backend.partial = 1, True
        first = upload_step(store, tier, force=True)
        assert first.errors and "upload failed" in first.errors[0]
        committed_before = tier.metadata.get(TOPIC, 0)
        for _ in range(3):
            upload_step(store, tier, force=True)
        flat = tier.flat_file(TOPIC, 0)
        assert flat is not None and flat.commit_offset == 25
        assert committed_before is None or committed_before.commit_offset < 25
        assert [raw for _, raw in flat.entries(0, 100)] == local_records(store, 0)


def test_committed_messages_get_key_index_entries(tmp_path: Path) -> None:
    clock = FakeClock()
    backend = MemoryBackend()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        tier = TieredStorage(backend, tmp_path, EAGER, clock=clock)
        put(store, 30, clock)
        result = upload_step(store, tier, force=True)
        # UNIQ_KEY, one KEYS entry and the offsetMsgId per message.
        assert result.keys_indexed == 90
        [hit] = tier.key_index.lookup(TOPIC, 0, "k7", 0, 2**62)
        assert hit.queue_offset == 7
        assert tier.key_index.lookup(TOPIC, 0, "k7", 0, hit.store_timestamp - 1) == []
        assert tier.key_index.lookup(TOPIC, 0, "nope", 0, 2**62) == []
        assert len(backend.list_segments(TOPIC, 0, SegmentType.INDEX)) > 1  # rolled


def test_a_local_gap_is_reported_not_skipped(tmp_path: Path) -> None:
    clock = FakeClock()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        tier = TieredStorage(MemoryBackend(), tmp_path, EAGER, clock=clock)
        put(store, 5, clock)
        upload_step(store, tier, force=True)
        put(store, 300, clock)
        state = CleanupState()  # cleanup deletes what was never uploaded
        for _ in range(20):
            cleanup.step(store, state, clock, probe=lambda _p: 0.86, first_delay_ms=0)
        assert store.min_offset(TOPIC, 0) > 5
        result = upload_step(store, tier, force=True)
        assert result.gaps and result.messages_appended == 0
        flat = tier.flat_file(TOPIC, 0)
        assert flat is not None and flat.commit_offset == 5


def _unit_file(store: MessageStore, queue_offset: int) -> tuple[MappedFile, int]:
    queue = store.queues.get(TOPIC, 0)
    assert queue is not None
    per_file = SMALL.consume_queue_file_entries
    first = queue.segments.files[0].base_offset // CQ_UNIT_SIZE
    index = (queue_offset - first) // per_file
    return queue.segments.files[index], (queue_offset % per_file) * CQ_UNIT_SIZE


def _make_blank(store: MessageStore, queue_offset: int) -> None:
    """Put a blank unit at ``queue_offset``, as the gap fill leaves for a record missing from
    the CommitLog (its offset kept, no record)."""
    mapped, position = _unit_file(store, queue_offset)
    mapped.write_at(position, BLANK_UNIT)


def _damage(store: MessageStore, queue_offset: int) -> tuple[int, int]:
    """Flip a byte of the magic code of the record at ``queue_offset``, in its CommitLog
    file (the mapping sees it); returns its (phys, size)."""
    queue = store.queues.get(TOPIC, 0)
    unit = queue.unit_at(queue_offset) if queue is not None else None
    assert unit is not None
    segment = store.commit_log.segments.find(unit.phys_offset)
    assert segment is not None
    with open(segment.path, "r+b") as f:
        f.seek(unit.phys_offset - segment.base_offset + 5)
        old = f.read(1)[0]
        f.seek(unit.phys_offset - segment.base_offset + 5)
        f.write(bytes([old ^ 0x40]))
    return unit.phys_offset, unit.size


def test_records_the_local_store_does_not_serve_are_copied_as_blanks_and_the_queue_goes_on(
    tmp_path: Path,
) -> None:
    """Offset 7 is quarantined already, 12 and 29 (the last) are blank units (records
    missing from the CommitLog), 20 went bad and nobody knows yet: each becomes a blank
    unit in the tier (20 quarantined on the way, found by the read), the queue is copied
    to its end and goes on, every other record at its offset, and the tier's readers skip
    the blanks as the local ones do. Resuming on a blank last unit works."""
    clock = FakeClock()
    backend = MemoryBackend()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        put(store, 30, clock)
        records = local_records(store, 0)
        phys7, size7 = _damage(store, 7)
        assert store.commit_log.quarantine_unreadable(phys7, size7, "found by a pull")
        _make_blank(store, 12)
        _make_blank(store, 29)
        phys20, size20 = _damage(store, 20)
        tier = TieredStorage(backend, tmp_path, EAGER, clock=clock)
        result = upload_step(store, tier, force=True)
        assert (result.gaps, result.errors) == ([], [])
        assert (result.messages_appended, result.blanks_appended) == (30, 4)
        flat = tier.flat_file(TOPIC, 0)
        assert flat is not None and flat.commit_offset == 30
        entry = store.quarantine.covering(phys20)
        assert entry is not None and (entry.offset, entry.length) == (phys20, size20)
        missing = {7, 12, 20, 29}
        kept = [o for o in range(30) if o not in missing]
        assert [u.queue_offset for u, raw in flat.entries(0, 100) if raw] == kept
        assert [u.queue_offset for u in flat.units(0, 100) if is_blank(u)] == sorted(missing)
        assert flat.read(0, 100) == [records[o] for o in kept]
        assert tier.key_index.lookup(TOPIC, 0, "k20", 0, 2**62) == []
        assert [h.queue_offset for h in tier.key_index.lookup(TOPIC, 0, "k21", 0, 2**62)] == [21]

        forced = dataclasses.replace(EAGER, read_strategy=ReadStrategy.FORCE)
        reader = TieredMessageStore(
            store, TieredStorage(backend, tmp_path, forced, clock=clock, readonly=True)
        )
        for start in (5, 10, 18):  # as the local store answers: blanks use up the scan
            got, local = (
                reader.get_messages("g", TOPIC, 0, start, 6),
                store.get_messages("g", TOPIC, 0, start, 6),
            )
            assert got.source == SOURCE_TIER
            offsets = [m.queue_offset for m in got.messages]
            assert offsets == [o for o in range(start, start + 6) if o not in missing]
            assert offsets == [m.queue_offset for m in local.messages]
            assert got.next_offset == local.next_offset == start + 6
            assert [m.body for m in got.messages] == [f"m{i}".encode() * 10 for i in offsets]
        only_blank = reader.get_messages("g", TOPIC, 0, 29, 1)
        assert (only_blank.messages, only_blank.next_offset) == ([], 30)

        resumed = TieredStorage(backend, tmp_path, EAGER, clock=clock)  # a restart
        flat = resumed.flat_file(TOPIC, 0)
        assert flat is not None and flat.commit_offset == 30
        put(store, 5, clock)
        after = upload_step(store, resumed, force=True)
        assert (after.gaps, after.messages_committed, flat.commit_offset) == ([], 5, 35)


def test_a_unit_that_points_into_a_record_stops_the_queue_and_quarantines_nothing(
    tmp_path: Path,
) -> None:
    """A damaged ConsumeQueue unit (off by a byte) is not the CommitLog's damage: nothing is
    quarantined, nothing is skipped; the queue waits at that offset (reported in gaps) for
    the queue's rebuild."""
    clock = FakeClock()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        put(store, 20, clock)
        mapped, position = _unit_file(store, 9)
        phys = int.from_bytes(mapped.read(position, 8), "big")
        mapped.write_at(position, (phys + 1).to_bytes(8, "big"))
        tier = TieredStorage(MemoryBackend(), tmp_path, EAGER, clock=clock)
        result = upload_step(store, tier, force=True)
        assert result.gaps == [f"{TOPIC}/0: record 9 is not readable"]
        flat = tier.flat_file(TOPIC, 0)
        assert flat is not None and flat.dispatch_offset == 9
        assert store.quarantine.ranges == ()
