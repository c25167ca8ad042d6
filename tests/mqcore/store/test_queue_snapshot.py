"""The queue offset snapshot file (queue_snapshot.py): layout, damage, atomic replacement."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.queue_snapshot import (
    FILE_NAME,
    SNAPSHOT_HEADER,
    QueueEntry,
    QueueOffsetSnapshot,
    mark_deleted,
    read,
    write,
    write_if_changed,
)

SMALL = StoreConfig(
    commitlog_file_size=16 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=11,
    index_max_entries=400,
)


def sample() -> QueueOffsetSnapshot:
    return QueueOffsetSnapshot(
        12_345,
        {
            ("Orders", 0): QueueEntry(10, 9000),
            ("Orders", 3): QueueEntry(2**40, -1),
            ("日本", 1): QueueEntry(7, 100),
        },
    )


def test_round_trip(tmp_path: Path) -> None:
    write(tmp_path, sample())
    assert read(tmp_path) == sample()
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read(tmp_path) is None


@pytest.mark.parametrize("position", [0, 5, 9, 17, 21, SNAPSHOT_HEADER.size + 3, -1])
def test_any_flipped_byte_makes_it_unusable(tmp_path: Path, position: int) -> None:
    write(tmp_path, sample())
    path = tmp_path / FILE_NAME
    data = bytearray(path.read_bytes())
    data[position] ^= 0x20
    path.write_bytes(bytes(data))
    assert read(tmp_path) is None


def test_a_cut_file_is_unusable(tmp_path: Path) -> None:
    write(tmp_path, sample())
    path = tmp_path / FILE_NAME
    path.write_bytes(path.read_bytes()[:-4])
    assert read(tmp_path) is None


def test_a_leftover_temp_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    write(tmp_path, sample())
    (tmp_path / (FILE_NAME + ".tmp")).write_bytes(b"half written")
    assert read(tmp_path) == sample()
    write(tmp_path, QueueOffsetSnapshot(1))
    assert read(tmp_path) == QueueOffsetSnapshot(1)


def test_mark_deleted(tmp_path: Path) -> None:
    write(tmp_path, sample())
    mark_deleted(tmp_path, "Orders")
    assert read(tmp_path) == QueueOffsetSnapshot(
        12_345,
        {
            ("Orders", 0): QueueEntry(10, 0),
            ("Orders", 3): QueueEntry(2**40, 0),
            ("日本", 1): QueueEntry(7, 100),
        },
    )


def test_write_if_changed_skips_an_equal_snapshot(tmp_path: Path) -> None:
    first = write_if_changed(tmp_path, sample, None)
    mtime = (tmp_path / FILE_NAME).stat().st_mtime_ns
    (tmp_path / FILE_NAME).unlink()
    assert write_if_changed(tmp_path, sample, first) == first
    assert not (tmp_path / FILE_NAME).exists()  # not written again
    write_if_changed(tmp_path, lambda: QueueOffsetSnapshot(1), first)
    assert (tmp_path / FILE_NAME).stat().st_mtime_ns >= mtime


def test_a_deletion_is_never_undone_by_a_concurrent_write(tmp_path: Path) -> None:
    """The file lock orders a snapshot write and a topic's deletion."""
    write(tmp_path, sample())
    gate = threading.Event()

    def slow_take() -> QueueOffsetSnapshot:
        gate.wait(5)
        return sample()

    writer = threading.Thread(target=write_if_changed, args=(tmp_path, slow_take, None))
    writer.start()
    forgetter = threading.Thread(target=mark_deleted, args=(tmp_path, "Orders"))
    forgetter.start()
    gate.set()
    writer.join()
    forgetter.join()
    snapshot = read(tmp_path)
    assert snapshot is not None and snapshot.entries[("Orders", 0)].last_phys_end == 0


def test_the_store_keeps_it_at_close_and_marks_a_deleted_topic(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        for i in range(30):
            assert store.put_message(Message("Orders", b"x"), i % 3).ok
            assert store.put_message(Message("Gone", b"y"), 0).ok
        end = store.commit_log.max_offset
        store.dispatch_until_caught_up()
        assert store.queues.delete_topic("Gone")
    snapshot = read(tmp_path)
    assert snapshot is not None
    assert snapshot.log_offset == end
    assert {key: e.next_offset for key, e in snapshot.entries.items()} == {
        ("Orders", 0): 10,
        ("Orders", 1): 10,
        ("Orders", 2): 10,
        ("Gone", 0): 30,
    }
    assert snapshot.entries[("Gone", 0)].last_phys_end == 0
    assert all(snapshot.entries[("Orders", q)].last_phys_end > 0 for q in range(3))
    with MessageStore(tmp_path, SMALL) as store:  # not rebuilt; created again, it goes on
        assert store.rebuilding_queues == {}
        assert store.queues.get("Gone", 0) is None
        assert store.put_message(Message("Gone", b"z"), 0).queue_offset == 30
