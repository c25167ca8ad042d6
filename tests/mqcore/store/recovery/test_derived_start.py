"""The start check (derived_start.py) on real stores whose derived files were damaged by hand:
what is found damaged, the next queue offsets, refused puts, the health condition."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mqcore.message import Message
from mqcore.store import MessageStore, PutStatus, StoreConfig, queue_snapshot
from mqcore.store.queue_snapshot import QueueEntry, QueueOffsetSnapshot
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.results import RefusedPutResult

CONFIG = StoreConfig(
    commitlog_file_size=16 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=11,
    index_max_entries=400,
)
PER_QUEUE = 120  # three files a queue


def fill(root: Path, count: int = 3 * PER_QUEUE, topic: str = "Orders") -> None:
    with MessageStore(root, CONFIG) as store:
        put(store, count, topic)


def put(store: MessageStore, count: int, topic: str = "Orders", start: int = 0) -> None:
    for i in range(start, start + count):
        msg = Message(topic, f"{topic} {i}".encode(), tags=f"T{i % 2}", keys=[f"{topic}-{i}"])
        assert store.put_message(msg, i % 3).ok


def queue_dir(root: Path, queue_id: int, topic: str = "Orders") -> Path:
    return root / "consumequeue" / topic / str(queue_id)


def test_a_clean_store_has_no_damage(tmp_path: Path) -> None:
    fill(tmp_path)
    with MessageStore(tmp_path, CONFIG) as store:
        assert store.rebuilding_queues == {}
        assert store.index_damage == ""
        assert store.health.conditions() == []
        assert store.commit_log.queue_offsets == {("Orders", q): PER_QUEUE for q in range(3)}
    assert not (tmp_path / "rebuild" / "queues.json").exists()


def test_a_deleted_queue_directory_is_damaged_and_keeps_its_offsets(tmp_path: Path) -> None:
    fill(tmp_path)
    shutil.rmtree(queue_dir(tmp_path, 1))
    with MessageStore(tmp_path, CONFIG) as store:
        assert list(store.rebuilding_queues) == [("Orders", 1)]
        assert "missing" in store.rebuilding_queues[("Orders", 1)]
        assert store.commit_log.queue_offsets[("Orders", 1)] == PER_QUEUE  # not 0
        refused = store.put_message(Message("Orders", b"x"), 1)
        assert isinstance(refused, RefusedPutResult)
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "Orders/1 is being rebuilt" in refused.reason
        assert store.put_message(Message("Orders", b"y"), 0).queue_offset == PER_QUEUE
        [condition] = store.health.conditions()
        assert condition.id == "rebuild" and condition.progress == 0.0
        assert "1 ConsumeQueue" in condition.summary
    job = queue_snapshot.read(tmp_path)
    assert job is not None and job.entries[("Orders", 1)].next_offset == PER_QUEUE


def test_a_cut_short_queue_file_is_damaged(tmp_path: Path) -> None:
    fill(tmp_path)
    first = sorted(queue_dir(tmp_path, 2).iterdir())[0]
    os.truncate(first, 333)
    with MessageStore(tmp_path, CONFIG) as store:
        assert "cut short" in store.rebuilding_queues[("Orders", 2)]
        assert store.commit_log.queue_offsets[("Orders", 2)] == PER_QUEUE


def test_a_queue_whose_files_do_not_follow_is_set_aside(tmp_path: Path) -> None:
    fill(tmp_path)
    sorted(queue_dir(tmp_path, 0).iterdir())[1].unlink()  # a hole in the middle
    with MessageStore(tmp_path, CONFIG) as store:
        assert "cannot be loaded" in store.rebuilding_queues[("Orders", 0)]
        assert store.commit_log.queue_offsets[("Orders", 0)] == PER_QUEUE
        assert store.queues.get("Orders", 0) is None  # nothing it could serve
    assert (tmp_path / "rebuild" / "trash" / "consumequeue" / "Orders" / "0").is_dir()
    assert not queue_dir(tmp_path, 0).exists()


def test_a_queue_that_lost_its_last_file_ends_below_the_snapshot(tmp_path: Path) -> None:
    fill(tmp_path)
    sorted(queue_dir(tmp_path, 1).iterdir())[-1].unlink()
    with MessageStore(tmp_path, CONFIG) as store:
        why = store.rebuilding_queues[("Orders", 1)]
        assert "ends at queue offset 100" in why and "snapshot" in why
        assert store.commit_log.queue_offsets[("Orders", 1)] == PER_QUEUE


def crashed_copy(tmp_path: Path) -> Path:
    """A store killed a second after its last queue offset snapshot: 3 x PER_QUEUE records
    counted in the snapshot, 30 more after it."""
    live = tmp_path / "live"
    store = MessageStore(live, CONFIG).open()
    try:
        put(store, 3 * PER_QUEUE)
        store.dispatch_until_caught_up()
        from mqcore.store import offset_table

        offset_table.save_snapshot(store)
        put(store, 30, start=3 * PER_QUEUE)
        store.dispatch_until_caught_up()
        crashed = tmp_path / "crashed"
        shutil.copytree(live, crashed)  # what a kill -9 leaves: the mapped files, abort
    finally:
        store.close()
    assert (crashed / "abort").exists()
    return crashed


def checkpoint_at_the_end(root: Path) -> None:
    """A checkpoint written just before the kill: crash recovery rescans the newest segment
    only (spec 5.7), not the whole log."""
    checkpoint = Checkpoint.load(root / "checkpoint")
    late = 2**62
    checkpoint.physic_msg_timestamp = checkpoint.logics_msg_timestamp = late
    checkpoint.flush()


def test_records_after_the_snapshot_count_after_a_crash(tmp_path: Path) -> None:
    """The snapshot is a second old at a crash: the records after it are scanned. A queue
    lost with the crash is damaged: recovery re-created it from the newest segment on,
    with blanks before (which would hide the older records)."""
    crashed = crashed_copy(tmp_path)
    checkpoint_at_the_end(crashed)
    shutil.rmtree(queue_dir(crashed, 1))
    with MessageStore(crashed, CONFIG) as store:
        assert store.recovery is not None and store.recovery.scan_from > 0
        assert ("Orders", 1) in store.rebuilding_queues
        assert store.commit_log.queue_offsets[("Orders", 1)] == PER_QUEUE + 10


def test_a_queue_lost_before_a_crash_recovery_of_the_whole_log_is_whole(tmp_path: Path) -> None:
    """No checkpoint to start from: crash recovery dispatches every record again, which
    re-creates the lost queue whole; nothing to rebuild, and puts go on after its records."""
    crashed = crashed_copy(tmp_path)
    shutil.rmtree(queue_dir(crashed, 1))
    with MessageStore(crashed, CONFIG) as store:
        assert store.recovery is not None and store.recovery.scan_from == 0
        assert store.rebuilding_queues == {}
        assert store.commit_log.queue_offsets[("Orders", 1)] == PER_QUEUE + 10
        bodies = []
        offset = 0
        while (got := store.get_messages("g", "Orders", 1, offset, 32)).messages:
            bodies += [m.body for m in got.messages]
            offset = got.next_offset
        assert bodies == [f"Orders {i}".encode() for i in range(1, 3 * PER_QUEUE + 30, 3)]
        assert store.put_message(Message("Orders", b"x"), 1).queue_offset == PER_QUEUE + 10


def test_a_snapshot_past_the_recovered_end_is_not_used(tmp_path: Path) -> None:
    fill(tmp_path)
    snapshot = queue_snapshot.read(tmp_path)
    assert snapshot is not None
    queue_snapshot.write(
        tmp_path, QueueOffsetSnapshot(snapshot.log_offset + 1, {("Orders", 0): QueueEntry(999)})
    )
    with MessageStore(tmp_path, CONFIG) as store:
        assert store.rebuilding_queues == {}
        assert store.commit_log.queue_offsets[("Orders", 0)] == PER_QUEUE


def test_a_damaged_snapshot_leaves_the_consume_queues_to_decide(tmp_path: Path) -> None:
    fill(tmp_path)
    path = tmp_path / queue_snapshot.FILE_NAME
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with MessageStore(tmp_path, CONFIG) as store:
        assert store.rebuilding_queues == {}
        assert store.commit_log.queue_offsets[("Orders", 2)] == PER_QUEUE
    assert queue_snapshot.read(tmp_path) is not None  # written again


def test_a_queue_whose_records_all_expired_is_not_damaged(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CONFIG) as store:
        assert store.put_message(Message("Old", b"old"), 0).ok
        put(store, 3 * PER_QUEUE)
    # Cleanup would delete the first segment and the queue's files with it.
    sorted((tmp_path / "commitlog").iterdir())[0].unlink()
    shutil.rmtree(tmp_path / "consumequeue" / "Old")
    with MessageStore(tmp_path, CONFIG) as store:
        assert ("Old", 0) not in store.rebuilding_queues
        assert store.commit_log.queue_offsets[("Old", 0)] == 1  # still never reused


@pytest.mark.parametrize(
    "damage",
    ["cut", "deleted", "slot", "middle"],
    ids=["cut-short", "deleted-dir", "flipped-slot", "middle-file-lost"],
)
def test_a_damaged_index_is_noted_and_its_rebuild_requested(tmp_path: Path, damage: str) -> None:
    fill(tmp_path)
    files = sorted((tmp_path / "index").iterdir())
    if damage == "cut":
        os.truncate(files[0], 1000)
    elif damage == "deleted":
        shutil.rmtree(tmp_path / "index")
    elif damage == "middle":
        files[1].unlink()
    else:
        with open(files[0], "r+b") as f:
            f.seek(40 + 4 * 5 + 3)
            byte = f.read(1)[0]
            f.seek(40 + 4 * 5 + 3)
            f.write(bytes([byte ^ 0x01]))
    with MessageStore(tmp_path, CONFIG) as store:
        assert store.index_damage
        assert store.rebuilding_queues == {}
        assert (tmp_path / "rebuild" / "index.request").exists()
        assert "the index" in store.health.conditions()[0].summary


def test_the_scan_after_an_old_snapshot_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mqcore.store import offset_table

    fill(tmp_path)
    queue_snapshot.write(tmp_path, QueueOffsetSnapshot(0, {}))  # as if none was written since
    monkeypatch.setattr(offset_table, "SCAN_LIMIT_BYTES", 100)
    with MessageStore(tmp_path, CONFIG, readonly=True) as store:
        end = store.commit_log.max_offset
        scan = offset_table.scan_after(store, 0, end)
        last_segment = store.commit_log.segments.find(end - 100)
        assert last_segment is not None and last_segment.base_offset > 0
        first = min(scan.first_offsets.values())
        assert first > 0  # the records of the older segments were not read
        assert scan.next_offsets == {("Orders", q): PER_QUEUE for q in range(3)}
