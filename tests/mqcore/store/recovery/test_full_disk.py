"""A full disk, for real: a small tmpfs filled up by a filler file. Writes are refused with
``DiskFullError`` / ``SERVICE_NOT_AVAILABLE`` before anything is written (never a SIGBUS: a
test that got one would kill pytest itself), acknowledged messages stay readable, and
everything resumes once the filler is deleted.

Every test mounts its own tmpfs (``tests/support/tmpfs.py``; skipped where mounting is
impossible)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.clock import SystemClock
from mqcore.errors import DiskFullError
from mqcore.message import Message
from mqcore.services import disk, rebuild, reput
from mqcore.store import GetStatus, MessageStore, PutStatus, StoreConfig
from mqcore.store.files.mapped_file import MappedFile
from mqcore.store.files.prefault import Prefaulter
from mqcore.store.files.segments import MappedFileQueue
from mqcore.store.index.index_file import IndexFile
from mqcore.store.refusals import RETRY_S
from tests.support.tmpfs import PAGE, fill, mounted_tmpfs, shrink

DISK_BYTES = 4 << 20
SEGMENT = 256 * 1024
#: No pre-fault thread (deterministic tests): the CommitLog reserves 16 KiB chunks itself.
CONFIG = StoreConfig(
    commitlog_file_size=SEGMENT,
    consume_queue_file_entries=50,
    index_hash_slots=11,
    index_max_entries=400,
    commitlog_prefault_bytes=0,
)


@pytest.fixture
def disk_dir(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", DISK_BYTES) as mounted:
        yield mounted


def _body(i: int) -> bytes:
    return f"message {i:06d} ".encode() * 20


def _put_until_refused(
    store: MessageStore, topic: str, limit: int = 100_000
) -> list[tuple[int, int, bytes]]:
    """Put one message at a time, dispatching every 20 as the reput thread would, until the
    store refuses; the acked (queue, offset, body)."""
    acked: list[tuple[int, int, bytes]] = []
    for i in range(limit):
        body = _body(i)
        result = store.put_message(Message(topic, body), queue_id=i % 2)
        if result.status is PutStatus.SERVICE_NOT_AVAILABLE:
            return acked
        assert result.ok, result
        acked.append((result.queue_id, result.queue_offset, body))
        if i % 20 == 19:
            reput.step(store)
    raise AssertionError(f"the disk never filled up after {limit} messages")


def _assert_readable(store: MessageStore, topic: str, acked: list[tuple[int, int, bytes]]) -> None:
    for queue_id, offset, body in acked:
        got = store.get_messages("g", topic, queue_id, offset, 1)
        assert got.status is GetStatus.FOUND, (queue_id, offset, got.status)
        assert got.messages[0].body == body and got.messages[0].queue_offset == offset


def test_a_file_created_without_space_is_refused_and_left_behind_nowhere(disk_dir: Path) -> None:
    fill(disk_dir)
    path = disk_dir / f"{0:020d}"
    with pytest.raises(DiskFullError, match=r"^disk full: reserving .*\(No space left"):
        MappedFile(path, 64 * 1024)
    assert not path.exists()
    queue = MappedFileQueue(disk_dir / "cq", 64 * 1024)
    queue.load()
    with pytest.raises(DiskFullError):
        queue.last_or_create(0)
    assert queue.files == () and list((disk_dir / "cq").iterdir()) == []


def test_an_append_past_the_reserved_mark_on_a_full_disk_writes_nothing(disk_dir: Path) -> None:
    mapped = MappedFile(disk_dir / f"{0:020d}", SEGMENT, reserve_chunk_bytes=4 * PAGE)
    try:
        mapped.append(b"a" * (4 * PAGE - 10))  # inside the first chunk
        filler = fill(disk_dir)
        mapped.append(b"b" * 10)  # still inside: no reservation needed, none made
        with pytest.raises(DiskFullError):
            mapped.append(b"c" * 11)  # would pass the mark
        assert mapped.wrote_position == 4 * PAGE and mapped.reserved_position == 4 * PAGE
        assert mapped.read(4 * PAGE - 10, 10) == b"b" * 10
        shrink(filler, 8 * PAGE)
        assert mapped.append(b"c" * 11) == 4 * PAGE  # space is back: the same append works
        assert mapped.reserved_position == 8 * PAGE
        assert mapped.read(4 * PAGE, 11) == b"c" * 11
    finally:
        mapped.close()


def test_zeros_past_the_mark_on_a_full_disk_touch_only_pages_holding_data(disk_dir: Path) -> None:
    """Recovery clears a torn tail with zeros; on a full disk it must not fault on a hole."""
    path = disk_dir / f"{0:020d}"
    mapped = MappedFile(path, SEGMENT, reserve_chunk_bytes=4 * PAGE)
    mapped.append(b"x" * (3 * PAGE))
    mapped.write_at(3 * PAGE, b"torn")  # garbage past the end, in a reserved page
    mapped.close()
    fill(disk_dir)
    again = MappedFile(path, SEGMENT, reserve_chunk_bytes=4 * PAGE)
    try:
        again.set_positions(2 * PAGE)  # recovery keeps two pages; the rest is a torn tail
        again.write_at(2 * PAGE, bytes(SEGMENT - 2 * PAGE))  # clear it all: 62 pages, 1 with data
        # Read the file, not the mapping: a read of a hole through a shared mapping of a
        # full tmpfs is itself a SIGBUS (it allocates a page).
        assert again.nonzero_end(0) == 2 * PAGE
        assert not any(path.read_bytes()[2 * PAGE :])
        with pytest.raises(DiskFullError):
            again.write_at(10 * PAGE, b"not zeros")  # real data into a hole is refused
    finally:
        again.close()


def test_an_index_file_that_finds_no_space_is_not_created(disk_dir: Path) -> None:
    fill(disk_dir)
    path = str(disk_dir / "20240101000000000")
    with pytest.raises(DiskFullError):
        IndexFile.create(path, 11, 400)
    assert not os.path.exists(path)


def test_the_prefault_thread_waits_for_space_instead_of_giving_up(disk_dir: Path) -> None:
    queue = MappedFileQueue(disk_dir / "commitlog", SEGMENT, reserve_chunk_bytes=2 * PAGE)
    queue.load()
    segment = queue.last_or_create(0)
    segment.append(b"x" * 10)
    filler = fill(disk_dir)
    prefaulter = Prefaulter(queue, 8 * PAGE, madvise=lambda _a, _n, _f: 0)
    assert prefaulter.step() is False
    assert prefaulter.short_of_space and prefaulter.enabled  # paused, not disabled
    assert segment.reserved_position == 2 * PAGE
    filler.unlink()
    while prefaulter.step():
        pass
    assert not prefaulter.short_of_space
    assert segment.reserved_position >= 8 * PAGE  # reserved ahead of what it populated
    queue.close()


def test_puts_on_a_full_disk_are_refused_and_resume_when_space_is_freed(disk_dir: Path) -> None:
    root = disk_dir / "store"
    filler = fill(disk_dir, leave_bytes=600 * 1024)
    with MessageStore(root, CONFIG) as store:
        acked = _put_until_refused(store, "Orders")
        assert len(acked) > 100
        refused = store.put_message(Message("Orders", b"late"))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert getattr(refused, "reason", "").startswith("disk full: ")
        # The CommitLog could not reserve its next chunk, or reput its next file: either
        # way puts wait, and the health says so.
        assert store.refusal_sources and store.refusal_sources <= {"space", "reput"}
        conditions = {c.id: c for c in store.health.conditions()}
        assert conditions["disk-full"].summary.startswith("disk full: puts refused (")
        # Reads go on: what reput dispatched through the queues, the rest by position.
        reput.step(store)
        dispatched = [a for a in acked if store.max_offset("Orders", a[0]) > a[1]]
        assert dispatched
        _assert_readable(store, "Orders", dispatched)
        # The disk guard sees a full disk too: puts stay refused.
        disk.guard_step(store)
        assert not store.writable and "disk" in store.refusal_sources
        filler.unlink()  # the operator frees space
        result = disk.guard_step(store)
        assert not result.detail["disk_full"]
        while reput.step(store).progressed:
            pass
        assert store.writable and not store.health.conditions()
        _assert_readable(store, "Orders", acked)  # every acked message, where it was acked
        more = store.put_message(Message("Orders", b"after"), queue_id=0)
        assert more.ok
        assert more.queue_offset == max(o for q, o, _ in acked if q == 0) + 1  # no gap, no reuse
    with MessageStore(root, CONFIG, readonly=True) as again:
        _assert_readable(again, "Orders", acked)


def test_reput_pauses_without_space_for_a_consume_queue_and_resumes(disk_dir: Path) -> None:
    root = disk_dir / "store"
    with MessageStore(root, CONFIG) as store:
        assert store.put_message(Message("A", b"first")).ok
        reput.step(store)
        filler = fill(disk_dir)  # the CommitLog's reserved chunk still has room
        acked = store.put_message(Message("B", b"into a full disk"))
        assert acked.ok and acked.queue_offset == 0
        result = reput.step(store)  # B's first ConsumeQueue file cannot be created
        assert "reput paused" in result.detail["paused"] and not result.progressed
        assert not store.writable and "reput" in store.refusal_sources
        ids = {c.id for c in store.health.conditions()}
        assert {"reput-paused", "disk-full"} <= ids
        assert store.put_message(Message("A", b"refused")).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert store.get_messages("g", "A", 0, 0, 1).messages[0].body == b"first"  # reads go on
        filler.unlink()
        result = reput.step(store)
        assert "paused" not in result.detail and result.detail["dispatched"] == 1
        assert store.writable and not store.health.conditions()
        got = store.get_messages("g", "B", 0, 0, 1)
        assert got.messages[0].body == b"into a full disk"


def test_a_restart_on_a_full_disk_starts_refusing_puts_and_catches_up_later(disk_dir: Path) -> None:
    """A crash, then a start on a full disk that must rebuild derived files: it starts,
    serves what it can, refuses puts, and dispatches the rest once space is back, with the
    queue offsets every acked message was given."""
    root = disk_dir / "store"
    acked: list[tuple[int, int, bytes]] = []
    with MessageStore(root, CONFIG) as store:
        for i in range(300):
            result = store.put_message(Message("B", _body(i)), queue_id=i % 2)
            assert result.ok
            acked.append((result.queue_id, result.queue_offset, _body(i)))
    # As if it had crashed, and its ConsumeQueues and index were lost with it.
    (root / "abort").write_text("4242")
    for directory in (root / "consumequeue" / "B", root / "index"):
        for path in sorted(directory.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        directory.rmdir()
    filler = fill(disk_dir)
    with MessageStore(root, CONFIG) as store:
        assert not store.writable and "reput" in store.refusal_sources
        assert store.reput_offset < store.commit_log.max_offset
        assert any(c.id == "disk-full" for c in store.health.conditions())
        assert store.put_message(Message("B", b"x")).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert reput.step(store).detail.get("paused")  # still no space: still paused
        filler.unlink()
        while reput.step(store).progressed:
            pass
        assert store.writable and store.reput_offset == store.commit_log.max_offset
        _assert_readable(store, "B", acked)
        # The table counted the records dispatched late: new messages follow them.
        result = store.put_message(Message("B", b"next"), queue_id=1)
        assert result.ok and result.queue_offset == 150
    assert not (root / "abort").exists()  # closed cleanly


def test_a_start_on_a_full_disk_still_leaves_its_abort_marker(disk_dir: Path) -> None:
    """The marker's content (a pid) needs a block; the marker is its existence, which needs
    only an inode: an empty ``abort`` still makes the next start rescan."""
    root = disk_dir / "store"
    with MessageStore(root, CONFIG) as store:
        assert store.put_message(Message("A", b"before")).ok
    assert not (root / "abort").exists()
    fill(disk_dir)
    with MessageStore(root, CONFIG) as store:
        assert (root / "abort").exists()
        assert "abort" not in store.refusal_sources


def test_a_start_that_cannot_create_its_abort_marker_refuses_puts_until_it_can(
    tmp_path: Path,
) -> None:
    with mounted_tmpfs(tmp_path / "disk", DISK_BYTES, "nr_inodes=64") as disk_dir:
        root = disk_dir / "store"
        with MessageStore(root, CONFIG) as store:
            assert store.put_message(Message("A", b"before")).ok
        spare = []
        with pytest.raises(OSError):  # use up every inode
            for i in range(100):
                path = disk_dir / f"inode-{i}"
                path.touch()
                spare.append(path)
        with MessageStore(root, CONFIG) as store:
            assert "abort" in store.refusal_sources  # a crash now would skip the rescan
            assert "abort marker" in store.unwritable_reason
            refused = store.put_message(Message("A", b"no"))
            assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
            for path in spare:
                path.unlink()
            time.sleep(RETRY_S)  # a refused put looks again at most once a second
            assert store.put_message(Message("A", b"yes")).ok  # the retry wrote the marker
            assert (root / "abort").read_text() == str(os.getpid())
            assert store.writable


def test_a_close_on_a_full_disk_keeps_what_it_could_not_finish_for_the_next_start(
    disk_dir: Path,
) -> None:
    root = disk_dir / "store"
    store = MessageStore(root, CONFIG).open()
    assert store.put_message(Message("A", b"kept")).ok  # not dispatched yet
    filler = fill(disk_dir)
    store.close()  # dispatch (no space), flush, checkpoint (skipped), unlock: no exception
    assert not (root / "checkpoint.tmp").exists()
    assert (root / "abort").exists()  # not caught up: the next start dispatches the rest
    filler.unlink()
    with MessageStore(root, CONFIG) as again:
        assert again.get_messages("g", "A", 0, 0, 1).messages[0].body == b"kept"


def _rebuild_until_installed(store: MessageStore) -> None:
    """The rebuild service and reput (the inline loops' work) until nothing is rebuilt."""
    for _ in range(1000):
        if not (store.rebuilding_queues or store.index_damage):
            return
        rebuild.step(store, SystemClock())
        reput.step(store)
    raise AssertionError(f"never rebuilt: {store.rebuilding_queues} {store.index_damage!r}")


def test_a_start_on_a_full_disk_checks_the_derived_files_once_dispatch_has_caught_up(
    disk_dir: Path,
) -> None:
    """A crash lost the index (recovery must dispatch it all again: no space) and a unit of
    B/1 is damaged (a flipped tag code, which dispatch leaves as it is). Judged while
    dispatch is stopped, every queue would look cut short; the start check waits for reput
    to catch up once space is back, then finds B/1 alone, which is rebuilt."""
    root = disk_dir / "store"
    acked: list[tuple[int, int, bytes]] = []
    with MessageStore(root, CONFIG) as store:
        for i in range(300):
            result = store.put_message(Message("B", _body(i)), queue_id=i % 2)
            acked.append((result.queue_id, result.queue_offset, _body(i)))
    (root / "abort").write_text("4242")
    for path in sorted((root / "index").iterdir()):
        path.unlink()
    (root / "index").rmdir()
    unit_file = sorted((root / "consumequeue" / "B" / "1").iterdir())[0]
    with open(unit_file, "r+b") as f:  # B/1 offset 7: its tag code's low byte
        f.seek(20 * 7 + 19)
        old = f.read(1)[0]
        f.seek(20 * 7 + 19)
        f.write(bytes([old ^ 0x01]))
    filler = fill(disk_dir)
    with MessageStore(root, CONFIG) as store:
        assert "reput" in store.refusal_sources
        assert store.rebuilding_queues == {} and store.index_damage == ""  # not judged yet
        assert reput.step(store).detail.get("paused")
        filler.unlink()
        while reput.step(store).progressed:
            pass
        assert store.reput_offset == store.commit_log.max_offset
        assert list(store.rebuilding_queues) == [("B", 1)]
        assert "tag code" in store.rebuilding_queues[("B", 1)]
        assert store.index_damage == ""  # dispatched whole again
        _rebuild_until_installed(store)
        _assert_readable(store, "B", acked)
        queue = store.queues.get("B", 1)
        unit = queue.unit_at(7) if queue is not None else None
        assert unit is not None and unit.tags_code == 0  # no tags: code 0, as written
        result = store.put_message(Message("B", b"next"), queue_id=1)
        assert result.ok and result.queue_offset == 150


def test_a_rebuild_that_cannot_be_scheduled_on_a_full_disk_is_scheduled_when_space_returns(
    disk_dir: Path,
) -> None:
    """A clean start on a full disk finds a lost queue: puts to it are refused and its job
    file cannot be written; the rebuild service writes it once space is back and the
    queue is rebuilt with its offsets (before, it stayed refused until a restart)."""
    root = disk_dir / "store"
    acked: list[tuple[int, int, bytes]] = []
    with MessageStore(root, CONFIG) as store:
        for i in range(200):
            result = store.put_message(Message("B", _body(i)), queue_id=i % 2)
            acked.append((result.queue_id, result.queue_offset, _body(i)))
    for path in sorted((root / "consumequeue" / "B" / "0").iterdir()):
        path.unlink()
    (root / "consumequeue" / "B" / "0").rmdir()
    filler = fill(disk_dir)
    with MessageStore(root, CONFIG) as store:
        assert "missing" in store.rebuilding_queues[("B", 0)]
        assert not (root / "rebuild" / "queues.json").exists()
        rebuild.step(store, SystemClock())  # still no space: nothing happens
        assert not (root / "rebuild" / "queues.json").exists()
        filler.unlink()
        _rebuild_until_installed(store)
        _assert_readable(store, "B", acked)
        result = store.put_message(Message("B", b"next"), queue_id=0)
        assert result.ok and result.queue_offset == 100
