"""Reads through the TieredMessageStore and the Broker (spec 10): cold offsets come from the
tier once the local files are gone, each strategy picks its source, errors fall back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.broker import PullStatus
from mqcore.clock import FakeClock
from mqcore.message import Message, MessageExt
from mqcore.metadata.topics import SCHEDULE_TOPIC
from mqcore.store.results import GetStatus
from mqcore.tiered import MemoryBackend, PosixBackend, SegmentBackend, SegmentId, TieredStoreError
from mqcore.tiered.config import ReadStrategy
from tests.mqcore.tiered.world import TOPIC, World, open_world, with_strategy


def snapshot(message: MessageExt) -> tuple[object, ...]:
    return (
        message.queue_id,
        message.queue_offset,
        message.phys_offset,
        message.store_timestamp,
        message.born_timestamp,
        message.body,
        message.topic,
        dict(message.properties),
        message.body_crc,
        message.store_size,
    )


def pull_all(world: World, queue_id: int, offset: int = 0, count: int = 7) -> list[MessageExt]:
    out: list[MessageExt] = []
    while True:
        result = world.broker.pull(None, TOPIC, queue_id, offset, count)
        if result.status is not PullStatus.FOUND:
            return out
        out += result.messages
        offset = result.next_offset


@pytest.fixture(params=["memory", "posix"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> SegmentBackend:
    if request.param == "memory":
        return MemoryBackend()
    return PosixBackend(tmp_path / "tier", "DefaultCluster", "broker-a")


@pytest.fixture
def cold(tmp_path: Path, backend: SegmentBackend) -> Iterator[tuple[World, dict[int, list]]]:
    """200 messages uploaded, then every CommitLog file but the last deleted locally.
    Yields the world and, per queue, the messages as read locally before the deletion."""
    world = open_world(tmp_path, backend, FakeClock())
    try:
        world.fill(200)
        before = {q: [snapshot(m) for m in pull_all(world, q)] for q in (0, 1)}
        assert [len(v) for v in before.values()] == [100, 100]
        assert world.upload().messages_committed == 200
        world.delete_local()
        assert world.store.min_offset(TOPIC, 0) > 20  # the early offsets are gone locally
        yield world, before
    finally:
        world.close()


def test_a_deleted_queue_is_consumed_from_offset_0_identically(
    cold: tuple[World, dict[int, list]],
) -> None:
    world, before = cold
    for queue_id in (0, 1):
        after = [snapshot(m) for m in pull_all(world, queue_id)]
        assert after == before[queue_id]
    assert world.tiered.stats.tier > 0 and world.tiered.stats.local > 0


def test_the_raw_records_in_the_tier_are_the_local_bytes(tmp_path: Path) -> None:
    world = open_world(tmp_path, MemoryBackend(), FakeClock())
    try:
        world.fill(40)
        world.upload()
        for queue_id in (0, 1):
            queue = world.store.queues.get(TOPIC, queue_id)
            assert queue is not None
            flat = world.tier.flat_file(TOPIC, queue_id)
            assert flat is not None
            tier = flat.entries(0, 100)
            assert len(tier) == 20
            for unit, raw in tier:
                local = queue.unit_at(unit.queue_offset)
                assert local is not None and unit.tags_code == local.tags_code
                assert raw == world.store.commit_log.read(local.phys_offset, local.size)
    finally:
        world.close()


def test_min_offset_is_the_smaller_of_local_and_tier(cold: tuple[World, dict[int, list]]) -> None:
    world, _ = cold
    local_min = world.store.min_offset(TOPIC, 0)
    assert local_min > 0
    assert world.tiered.min_offset(TOPIC, 0) == 0
    assert world.broker.list_offsets(TOPIC, 0, "earliest") == 0
    assert world.broker.admin.queue_status(TOPIC, 0).min_offset == 0
    got = world.tiered.get_messages("", TOPIC, 0, local_min, 1)
    assert got.source == "local" and got.min_offset == 0


def test_each_strategy_picks_its_source(cold: tuple[World, dict[int, list]]) -> None:
    world, _ = cold
    local_min = world.store.min_offset(TOPIC, 0)
    hot = local_min + 2
    cases = {
        # strategy: (source of a cold read at 0, source of a hot read still on disk)
        ReadStrategy.DISABLE: ("local", "local"),
        ReadStrategy.NOT_IN_DISK: ("tier", "local"),
        ReadStrategy.FORCE: ("tier", "tier"),
    }
    for strategy, (cold_source, hot_source) in cases.items():
        reader = with_strategy(world, read_strategy=strategy)
        cold_read = reader.get_messages("", TOPIC, 0, 0, 4)
        hot_read = reader.get_messages("", TOPIC, 0, hot, 4)
        assert (cold_read.source, hot_read.source) == (cold_source, hot_source), strategy
        assert hot_read.status is GetStatus.FOUND
        offsets = [m.queue_offset for m in hot_read.messages]  # a local read stops at a
        assert offsets and offsets == list(range(hot, hot + len(offsets)))  # CQ file end
        if strategy is ReadStrategy.DISABLE:
            assert cold_read.status is GetStatus.OFFSET_TOO_SMALL
        else:
            assert [m.queue_offset for m in cold_read.messages] == [0, 1, 2, 3]


def test_not_in_mem_reads_the_tier_for_messages_far_behind_the_end(
    cold: tuple[World, dict[int, list]],
) -> None:
    world, _ = cold
    local_min = world.store.min_offset(TOPIC, 0)
    last = world.store.max_offset(TOPIC, 0) - 1
    # With "RAM" of 1000 bytes, 40 % = 400 bytes: only the last message is "in memory".
    reader = with_strategy(world, read_strategy=ReadStrategy.NOT_IN_MEM)
    reader.memory_bytes = 1000
    assert reader.get_messages("", TOPIC, 0, local_min, 2).source == "tier"
    assert reader.get_messages("", TOPIC, 0, last, 1).source == "local"
    assert reader.get_messages("", TOPIC, 0, 0, 2).source == "tier"
    reader.memory_bytes = 1 << 40  # everything fits: NOT_IN_MEM behaves as NOT_IN_DISK
    assert reader.get_messages("", TOPIC, 0, local_min, 2).source == "local"
    assert reader.get_messages("", TOPIC, 0, 0, 2).source == "tier"


def test_only_offsets_below_the_commit_offset_come_from_the_tier(tmp_path: Path) -> None:
    world = open_world(tmp_path, MemoryBackend(), FakeClock())
    try:
        world.fill(40)
        world.upload()
        world.fill(10, start=40)  # not uploaded
        reader = with_strategy(world, read_strategy=ReadStrategy.FORCE)
        flat = world.tier.flat_file(TOPIC, 0)
        assert flat is not None and flat.commit_offset == 20
        assert reader.get_messages("", TOPIC, 0, 19, 1).source == "tier"
        beyond = reader.get_messages("", TOPIC, 0, 20, 1)
        assert beyond.source == "local" and beyond.messages[0].queue_offset == 20
    finally:
        world.close()


def test_system_topics_are_never_tiered(tmp_path: Path) -> None:
    world = open_world(tmp_path, MemoryBackend(), FakeClock())
    try:
        world.store.put_message(Message(SCHEDULE_TOPIC, b"parked"), queue_id=0)
        world.store.dispatch_until_caught_up()
        world.upload()
        assert world.tier.flat_file(SCHEDULE_TOPIC, 0) is None
        reader = with_strategy(world, read_strategy=ReadStrategy.FORCE)
        assert reader.get_messages("", SCHEDULE_TOPIC, 0, 0, 1).source == "local"
    finally:
        world.close()


class FailingReads(MemoryBackend):
    """A backend whose reads fail while ``broken`` is set (an unreachable object store)."""

    broken = False

    def read(self, segment: SegmentId, position: int, length: int) -> bytes:
        if self.broken:
            raise TieredStoreError(f"{segment}: backend unreachable")
        return super().read(segment, position, length)


def test_a_tier_error_falls_back_to_the_local_store(tmp_path: Path) -> None:
    backend = FailingReads()
    world = open_world(tmp_path, backend, FakeClock())
    try:
        world.fill(40)
        world.upload()
        reader = with_strategy(world, read_strategy=ReadStrategy.FORCE, read_ahead_count=0)
        assert reader.get_messages("", TOPIC, 0, 3, 2).source == "tier"
        backend.broken = True
        got = reader.get_messages("", TOPIC, 0, 3, 2)
        assert got.source == "local" and got.status is GetStatus.FOUND
        assert [m.queue_offset for m in got.messages] == [3, 4]
        assert reader.stats.fallbacks == 1
    finally:
        world.close()


def test_a_tier_miss_falls_back_to_the_local_store(tmp_path: Path) -> None:
    world = open_world(tmp_path, MemoryBackend(), FakeClock())
    try:
        world.fill(40)
        world.upload()
        flat = world.tier.flat_file(TOPIC, 0)
        assert flat is not None
        world.clock.advance(10**9)
        world.tier.backend.delete  # noqa: B018 - the backend stays; the metadata moves on
        reader = with_strategy(world, read_strategy=ReadStrategy.FORCE, read_ahead_count=0)
        # A reader whose flat file lost its segments: every tier read fails, local serves.
        for segment in world.tier.backend.list_segments(TOPIC, 0, flat_type := _cl()):
            world.tier.backend.delete(SegmentId(TOPIC, 0, flat_type, segment))
        got = reader.get_messages("", TOPIC, 0, 0, 2)
        assert got.source == "local" and [m.queue_offset for m in got.messages] == [0, 1]
    finally:
        world.close()


def _cl():  # type: ignore[no-untyped-def]
    from mqcore.tiered import SegmentType

    return SegmentType.COMMIT_LOG


def test_sequential_cold_reads_hit_the_read_ahead_cache(
    cold: tuple[World, dict[int, list]],
) -> None:
    world, before = cold
    reader = with_strategy(world, read_ahead_batch=32)
    first = reader.get_messages("", TOPIC, 0, 0, 4)
    assert first.source == "tier" and reader.cache.misses == 1 and len(reader.cache) == 28
    offset, bodies = first.next_offset, [m.body for m in first.messages]
    for _ in range(7):
        got = reader.get_messages("", TOPIC, 0, offset, 4)
        assert got.source == "tier"
        bodies += [m.body for m in got.messages]
        offset = got.next_offset
    assert reader.cache.hits == 7 and reader.cache.misses == 1
    assert bodies == [snap[5] for snap in before[0][:32]]
    world.clock.advance(reader.cache.expire_ms + 1)
    reader.get_messages("", TOPIC, 0, offset, 4)
    reader.get_messages("", TOPIC, 0, offset + 4, 4)  # cached by the read before
    assert reader.cache.misses == 2


def test_read_ahead_cache_is_bounded(cold: tuple[World, dict[int, list]]) -> None:
    world, _ = cold
    reader = with_strategy(world, read_ahead_batch=64, read_ahead_count=10)
    reader.get_messages("", TOPIC, 0, 0, 1)
    assert len(reader.cache) == 10
    reader = with_strategy(world, read_ahead_batch=64, read_ahead_bytes=500)
    reader.get_messages("", TOPIC, 0, 0, 1)
    assert 0 < reader.cache.size_bytes <= 500


def test_tag_filter_applies_to_tier_reads(cold: tuple[World, dict[int, list]]) -> None:
    world, _ = cold
    result = world.broker.pull(None, TOPIC, 0, 0, 5, tag_expression="even")
    assert result.status is PullStatus.FOUND
    assert all(m.tags == "even" for m in result.messages)
    odd = world.broker.pull(None, TOPIC, 0, 0, 5, tag_expression="odd")
    assert odd.status is not PullStatus.FOUND or not odd.messages  # queue 0 holds evens


def test_key_lookup_after_local_deletion_uses_the_tier_index(
    cold: tuple[World, dict[int, list]],
) -> None:
    world, before = cold
    assert world.store.query_by_key(TOPIC, "key-4", 0, 2**62) == []  # gone locally
    [found] = world.broker.query_by_key(TOPIC, "key-4", 0, 2**62)
    assert snapshot(found) == before[0][2]
    assert world.broker.query_by_key(TOPIC, "key-4", 0, found.store_timestamp - 1) == []
    uniq = found.properties["UNIQ_KEY"]
    assert world.store.view_by_id(uniq) is None
    viewed = world.broker.get_message(uniq)
    assert viewed is not None and snapshot(viewed) == snapshot(found)
    by_offset_id = world.broker.get_message(found.offset_msg_id)
    assert by_offset_id is not None and by_offset_id.queue_offset == 2
    # Hot messages still come from the local store, once.
    hot = world.broker.query_by_key(TOPIC, "key-199", 0, 2**62)
    assert [m.properties["n"] for m in hot] == ["199"]


def test_offset_for_time_reaches_into_the_tier(cold: tuple[World, dict[int, list]]) -> None:
    world, before = cold
    stored_at_10 = before[0][10][3]
    assert isinstance(stored_at_10, int)
    assert world.tiered.offset_for_time(TOPIC, 0, stored_at_10) == 10
    assert world.broker.list_offsets(TOPIC, 0, stored_at_10) == 10
    assert world.tiered.offset_for_time(TOPIC, 0, 0) == 0


def test_a_cold_message_can_be_sent_back_for_retry(cold: tuple[World, dict[int, list]]) -> None:
    world, before = cold
    world.broker.admin.create_group("billing")
    [cold_message] = world.broker.query_by_key(TOPIC, "key-4", 0, 2**62)
    assert world.store.commit_log.message_at(cold_message.phys_offset) is None
    result = world.broker.send_back("billing", cold_message.offset_msg_id, -1)  # to the DLQ
    assert result.send is not None and result.send.topic == "%DLQ%billing"
    world.store.dispatch_until_caught_up()
    retried = world.store.query_by_key(
        result.send.topic, cold_message.properties["UNIQ_KEY"], 0, 2**62
    )
    assert [m.body for m in retried] == [before[0][2][5]]


def test_group_lag_ages_come_from_the_tier_for_cold_offsets(
    cold: tuple[World, dict[int, list]],
) -> None:
    world, before = cold
    world.broker.admin.create_group("billing")
    world.broker.commit_offset("billing", TOPIC, 0, 3)
    [lag] = [q for q in world.broker.admin.group_lag("billing", TOPIC).queues if q.queue_id == 0]
    assert lag.lag == 97 and lag.oldest_unconsumed_timestamp == before[0][3][3]


def test_the_s3_backend_from_settings_serves_cold_reads(tmp_path: Path, s3_endpoint: str) -> None:
    import boto3

    from mqcore.tiered.storage import make_backend
    from tests.mqcore.tiered.conftest import s3_client_args

    boto3.client("s3", **s3_client_args(s3_endpoint)).create_bucket(Bucket="cairn-settings")
    env = {
        "CAIRN_TIERED_S3_BUCKET": "cairn-settings",
        "CAIRN_TIERED_S3_ENDPOINT": s3_endpoint,
        "CAIRN_TIERED_S3_ACCESS_KEY_ID": "testing",
        "CAIRN_TIERED_S3_SECRET_ACCESS_KEY": "testing",
    }
    backend = make_backend("s3", tmp_path / "unused", "DefaultCluster", "broker-a", env)
    assert backend is not None
    world = open_world(tmp_path, backend, FakeClock())
    try:
        world.fill(120)
        before = [snapshot(m) for m in pull_all(world, 1)]
        world.upload()
        world.delete_local()
        assert world.store.min_offset(TOPIC, 1) > 0
        assert [snapshot(m) for m in pull_all(world, 1)] == before
        assert world.tiered.stats.tier > 0
    finally:
        world.close()
