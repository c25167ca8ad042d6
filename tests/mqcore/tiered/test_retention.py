"""Tier retention (spec 10): sealed segments older than the topic's reserve time go."""

from __future__ import annotations

from pathlib import Path

from mqcore.broker import PullStatus
from mqcore.clock import FakeClock
from mqcore.services import tiered as tiered_services
from mqcore.tiered import MemoryBackend, SegmentType
from mqcore.tiered.retention import HOUR_MS, retention_step
from tests.mqcore.tiered.world import TOPIC, World, open_world

OTHER = "invoices"


def segments(world: World, topic: str, kind: SegmentType) -> list[int]:
    return world.tier.backend.list_segments(topic, 0, kind)


def fill_both(world: World, count: int, start: int = 0) -> None:
    world.fill(count, queues=1, start=start)
    for i in range(start, start + count):
        world.broker.send(OTHER, [_message(i)])
        world.clock.advance(100)
    world.store.dispatch_until_caught_up()


def _message(i: int):  # type: ignore[no-untyped-def]
    from mqcore.broker import OutgoingMessage

    return OutgoingMessage(f"invoice {i}".encode() * 8, keys=[f"inv-{i}"], queue_id=0)


def test_old_sealed_segments_go_per_topic_reserve_time(tmp_path: Path) -> None:
    clock = FakeClock()
    world = open_world(tmp_path, MemoryBackend(), clock)
    try:
        # OTHER keeps its data 1000 h; TOPIC uses the tier default (72 h).
        world.broker.admin.create_topic(
            OTHER, read_queue_nums=1, write_queue_nums=1, attributes={"reserve.time": "1000"}
        )
        fill_both(world, 120)
        world.upload()
        old_logs = segments(world, TOPIC, SegmentType.COMMIT_LOG)
        assert len(old_logs) > 3
        clock.advance(10 * HOUR_MS)
        fill_both(world, 40, start=120)  # newer data, in newer segments
        world.upload()
        attributes = tiered_services.topic_attributes_of(world.broker.metadata.topics)

        assert not retention_step(world.tier, attributes).deleted_segments  # nothing is 72 h old
        clock.advance(63 * HOUR_MS)  # the first 120 are now older than 72 h, the rest not
        result = retention_step(world.tier, attributes)
        assert result.deleted_segments and not result.errors
        flat = world.tier.flat_file(TOPIC, 0)
        assert flat is not None
        kept = segments(world, TOPIC, SegmentType.COMMIT_LOG)
        assert kept and kept[0] > 0 and len(kept) < len(old_logs) + 2
        assert 0 < flat.min_offset <= 120
        assert world.tier.metadata.get(TOPIC, 0).min_offset == flat.min_offset  # type: ignore[union-attr]
        # The other topic's attribute keeps it whole.
        assert segments(world, OTHER, SegmentType.COMMIT_LOG)[0] == 0
        other = world.tier.flat_file(OTHER, 0)
        assert other is not None and other.min_offset == 0
        # What is left still reads, from the new min offset.
        world.delete_local()
        got = world.broker.pull(None, TOPIC, 0, flat.min_offset, 4)
        assert got.status is PullStatus.FOUND
        assert [m.queue_offset for m in got.messages][0] == flat.min_offset
        assert world.broker.list_offsets(TOPIC, 0, "earliest") == flat.min_offset
        # Key index segments pointing only below the min went too.
        assert world.broker.query_by_key(TOPIC, "key-0", 0, 2**62) == []
        assert world.broker.query_by_key(TOPIC, "key-130", 0, 2**62)
    finally:
        world.close()


def test_a_restart_sees_the_moved_min_offset(tmp_path: Path) -> None:
    clock = FakeClock()
    backend = MemoryBackend()
    world = open_world(tmp_path, backend, clock)
    try:
        world.fill(150, queues=1)
        world.upload()
        clock.advance(100 * HOUR_MS)
        world.fill(5, queues=1, start=150)
        world.upload()
        retention_step(world.tier)
        moved = world.tier.flat_file(TOPIC, 0).min_offset  # type: ignore[union-attr]
        assert moved > 0
    finally:
        world.close()
    again = open_world(tmp_path, backend, clock)
    try:
        flat = again.tier.flat_file(TOPIC, 0)
        assert flat is not None and flat.min_offset == moved and flat.commit_offset == 155
        assert not flat.resume_report.deleted_segments
    finally:
        again.close()
