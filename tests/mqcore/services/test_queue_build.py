"""Damaged derived files rebuilt in the background (queue_build.py, rebuild.py, the index side
build) on real stores: steps called directly, then the same through the inline loops and
through a broker and a worker (Celery mode's two roles, one directory)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from mqcore.clock import SystemClock
from mqcore.message import Message
from mqcore.services import inline, queue_build, rebuild, reput
from mqcore.store import MessageStore, PutStatus, queue_snapshot
from mqcore.store.consume_queue import CQ_UNIT
from mqcore.store.queue_snapshot import QueueEntry
from mqcore.store.recovery.geometry import infer_geometry
from mqcore.store.recovery.verify import check_store
from mqcore.store.sharing.progress import Slot
from tests.mqcore.services.conftest import SMALL, drain, put_many

CLOCK = SystemClock()
COUNT = 300  # 150 a queue, 3 ConsumeQueue files each


def bodies(queue_id: int, count: int = COUNT) -> list[bytes]:
    return [f"order {i}".encode() for i in range(queue_id, count, 2)]


def fill(root: Path) -> None:
    with MessageStore(root, SMALL) as store:
        put_many(store, COUNT)


def rebuild_until_installed(store: MessageStore, max_bytes: int = 1 << 20) -> int:
    """Step the rebuild service and reput (the inline loops' work) until nothing is left."""
    steps = 0
    while store.rebuilding_queues or store.index_damage:
        rebuild.step(store, CLOCK, max_bytes=max_bytes)
        reput.step(store)
        steps += 1
        assert steps < 1000
    return steps


def assert_checks_clean(root: Path) -> None:
    report = check_store(root, infer_geometry(root))
    assert report.ok, report.defects[:5]


def test_a_deleted_queue_is_rebuilt_and_keeps_its_offsets(tmp_path: Path) -> None:
    fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    with MessageStore(tmp_path, SMALL) as store:
        assert list(store.rebuilding_queues) == [("Orders", 1)]
        assert drain(store, "Orders", 0) == bodies(0)  # the other queue serves meanwhile
        assert rebuild_until_installed(store, max_bytes=4096) > 3
        assert drain(store, "Orders", 1) == bodies(1)
        result = store.put_message(Message("Orders", b"next"), 1)
        assert (result.status, result.queue_offset) == (PutStatus.PUT_OK, COUNT // 2)
        [problem] = store.health.problems()
        assert problem.kind == "derived_rebuilt"
        assert problem.detail["queues"] == {"Orders/1": store_reason(problem.detail)}
        assert store.health.conditions() == []
    assert not (tmp_path / "rebuild" / "queues.json").exists()
    assert not (tmp_path / "rebuild" / "trash").exists()
    assert_checks_clean(tmp_path)


def store_reason(detail: dict[str, object]) -> str:
    reasons = detail["queues"]
    assert isinstance(reasons, dict)
    reason = reasons["Orders/1"]
    assert isinstance(reason, str) and "missing" in reason
    return reason


def test_a_damaged_queue_serves_what_its_files_hold_until_it_is_rebuilt(tmp_path: Path) -> None:
    fill(tmp_path)
    sorted((tmp_path / "consumequeue" / "Orders" / "0").iterdir())[-1].unlink()
    with MessageStore(tmp_path, SMALL) as store:
        assert ("Orders", 0) in store.rebuilding_queues
        assert drain(store, "Orders", 0) == bodies(0)[:100]
        refused = store.put_message(Message("Orders", b"x"), 0)
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        rebuild_until_installed(store)
        assert drain(store, "Orders", 0) == bodies(0)
        assert store.put_message(Message("Orders", b"x"), 0).queue_offset == COUNT // 2


def test_a_rebuild_cut_short_by_a_stop_starts_again_at_the_next_open(tmp_path: Path) -> None:
    fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    with MessageStore(tmp_path, SMALL) as store:
        rebuild.step(store, CLOCK, max_bytes=4096)
        rebuild.step(store, CLOCK, max_bytes=4096)
        job = (tmp_path / "rebuild" / "queues.json").read_text()
        assert '"cursor"' in job
        assert any((tmp_path / "rebuild" / "consumequeue").rglob("0*"))
    with MessageStore(tmp_path, SMALL) as store:
        assert "its rebuild was interrupted" in store.rebuilding_queues[("Orders", 1)]
        assert '"cursor"' not in (tmp_path / "rebuild" / "queues.json").read_text()
        rebuild_until_installed(store)
        assert drain(store, "Orders", 1) == bodies(1)
    assert_checks_clean(tmp_path)


def test_records_missing_from_the_commit_log_keep_their_offsets(tmp_path: Path) -> None:
    """The snapshot knows two more messages than the CommitLog holds (quarantined, say): the
    rebuilt queue ends in two blank units and the next put gets the offset after them."""
    fill(tmp_path)
    snapshot = queue_snapshot.read(tmp_path)
    assert snapshot is not None
    snapshot.entries[("Orders", 1)] = QueueEntry(COUNT // 2 + 2, -1)
    queue_snapshot.write(tmp_path, snapshot)
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    with MessageStore(tmp_path, SMALL) as store:
        rebuild_until_installed(store)
        queue = store.queues.get("Orders", 1)
        assert queue is not None and queue.max_offset == COUNT // 2 + 2
        assert drain(store, "Orders", 1) == bodies(1)
        assert store.put_message(Message("Orders", b"x"), 1).queue_offset == COUNT // 2 + 2
    assert_checks_clean(tmp_path)


def test_a_queue_of_a_topic_deleted_meanwhile_is_not_swapped_in(tmp_path: Path) -> None:
    fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    with MessageStore(tmp_path, SMALL) as store:
        rebuild.step(store, CLOCK)
        store.queues.delete_topic("Orders")
        assert store.rebuilding_queues == {}
        queue_build.apply_ready(store)
        assert store.queues.get("Orders", 1) is None
    assert not (tmp_path / "consumequeue" / "Orders").exists()


@pytest.mark.parametrize("damage", ["cut", "deleted"])
def test_a_damaged_index_is_rebuilt_by_itself(tmp_path: Path, damage: str) -> None:
    fill(tmp_path)
    if damage == "cut":
        index = sorted((tmp_path / "index").iterdir())
        index[len(index) // 2].write_bytes(b"\0" * 100)
    else:
        shutil.rmtree(tmp_path / "index")
    with MessageStore(tmp_path, SMALL) as store:
        assert store.index_damage
        rebuild_until_installed(store)
        missing = [i for i in range(COUNT) if not store.query_by_key("Orders", f"K{i}", 0, 2**62)]
        assert missing == []
        [problem] = store.health.problems()
        assert problem.id.startswith("derived_rebuilt:index:")
        assert store.health.conditions() == []
    assert_checks_clean(tmp_path)


def test_the_inline_loops_rebuild_while_the_broker_serves(tmp_path: Path) -> None:
    fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "0")
    shutil.rmtree(tmp_path / "index")
    with MessageStore(tmp_path, SMALL) as store:
        loops = inline.build_service_loops(store)
        for loop in loops:
            loop.start()
        try:
            put_many(store, 20, start=COUNT, queues=1)  # queue 0 only: refused ...
        except AssertionError:
            pass
        try:
            deadline = time.monotonic() + 30
            while store.rebuilding_queues or store.index_damage:
                assert time.monotonic() < deadline, store.health.conditions()
                time.sleep(0.05)
            put_many(store, 2, start=COUNT, queues=1)  # ... accepted again
        finally:
            for loop in loops:
                loop.stop()
        store.dispatch_until_caught_up()
        assert drain(store, "Orders", 0) == bodies(0) + [b"order 300", b"order 301"]
        assert store.query_by_key("Orders", "K301", 0, 2**62)
    assert_checks_clean(tmp_path)


def test_celery_mode_worker_rebuilds_and_the_broker_follows(tmp_path: Path) -> None:
    fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    holder = MessageStore(tmp_path, SMALL, role="services").open()
    builder = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        # The broker's offsets come from the snapshot: the lost queue does not restart at 0.
        assert broker.commit_log.queue_offsets[("Orders", 1)] == COUNT // 2
        reput.step(holder)  # attaches: its start check writes the job
        assert ("Orders", 1) in holder.rebuilding_queues
        broker.follow_others()
        refused = broker.put_message(Message("Orders", b"x"), 1)
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        while rebuild.step(builder, CLOCK, max_bytes=4096).progressed:
            pass
        attaches = broker.progress.get(Slot.ATTACH_COUNT) if broker.progress else 0
        reput.step(holder)  # installs
        assert holder.rebuilding_queues == {}
        assert broker.progress is not None
        assert broker.progress.get(Slot.ATTACH_COUNT) == attaches + 1
        broker.follow_others()
        assert broker.rebuilding_queues == {}
        assert drain(broker, "Orders", 1) == bodies(1)
        result = broker.put_message(Message("Orders", b"x"), 1)
        assert (result.status, result.queue_offset) == (PutStatus.PUT_OK, COUNT // 2)
    finally:
        reput.release(holder)
        builder.close()
        holder.close()
        broker.close()


def test_a_rebuild_that_cannot_be_installed_starts_again_and_reput_goes_on(
    tmp_path: Path,
) -> None:
    fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    with MessageStore(tmp_path, SMALL) as store:
        while queue_build.step(store, CLOCK).progressed:
            pass
        queue_build._open.pop(store).close()  # as in another process: read from the files
        side = tmp_path / "rebuild" / "consumequeue" / "Orders" / "1"
        sorted(side.iterdir())[1].unlink()  # the side files are no longer contiguous
        put_many(store, 2, start=COUNT, queues=1)  # queue 0
        result = reput.step(store)  # logs the failure, dispatches all the same
        assert result.detail["dispatched"] == 2
        assert '"state": "building"' in (tmp_path / "rebuild" / "queues.json").read_text()
        rebuild_until_installed(store)
        assert drain(store, "Orders", 1) == bodies(1)


def damage_record(root: Path, queue_id: int, queue_offset: int, byte: int, mask: int) -> tuple:
    """XOR ``mask`` into byte ``byte`` of the record of Orders/``queue_id`` at
    ``queue_offset``, in its CommitLog segment; returns the record's (phys, size)."""
    per_file = SMALL.consume_queue_file_entries
    unit_file = sorted((root / "consumequeue" / "Orders" / str(queue_id)).iterdir())[
        queue_offset // per_file
    ]
    phys, size, _ = CQ_UNIT.unpack_from(unit_file.read_bytes(), 20 * (queue_offset % per_file))
    segment_size = SMALL.commitlog_file_size
    path = root / "commitlog" / f"{phys // segment_size * segment_size:020d}"
    with open(path, "r+b") as f:
        f.seek(phys % segment_size + byte)
        old = f.read(1)[0]
        f.seek(phys % segment_size + byte)
        f.write(bytes([old ^ mask]))
    return phys, size


@pytest.mark.parametrize(("byte", "mask"), [(2, 0x02), (5, 0x40)], ids=["totalsize+512", "magic"])
def test_a_rebuild_quarantines_a_record_gone_bad_in_an_old_segment_and_renumbers_nothing(
    tmp_path: Path, byte: int, mask: int
) -> None:
    """The queue and the index are lost, and a record of that queue went bad in the first
    segment (recovery scans only the newest): the rebuild's walk quarantines the record
    (found by rebuild) and goes on after it, never skipping by a flipped TOTALSIZE; its
    queue offset becomes a blank unit, every other record keeps its offset and its keys."""
    fill(tmp_path)
    victim = 10  # Orders/1 offset 10: "order 21", K21
    phys, size = damage_record(tmp_path, 1, victim, byte, mask)
    assert phys < SMALL.commitlog_file_size
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    shutil.rmtree(tmp_path / "index")
    with MessageStore(tmp_path, SMALL) as store:
        assert store.quarantine.ranges == ()
        rebuild_until_installed(store, max_bytes=4096)
        [entry] = store.quarantine.ranges
        assert (entry.offset, entry.length, entry.found_by) == (phys, size, "rebuild")
        expected = bodies(1)
        del expected[victim]
        assert drain(store, "Orders", 1) == expected
        queue = store.queues.get("Orders", 1)
        assert queue is not None
        assert queue.unit_at(victim - 1) is not None and queue.unit_at(victim + 1) is not None
        got = store.get_messages("g", "Orders", 1, victim + 1, 1)
        assert [m.body for m in got.messages] == [b"order 23"]
        missing = [i for i in range(COUNT) if not store.query_by_key("Orders", f"K{i}", 0, 2**62)]
        assert missing == [2 * victim + 1]
        result = store.put_message(Message("Orders", b"next"), 1)
        assert (result.status, result.queue_offset) == (PutStatus.PUT_OK, COUNT // 2)
