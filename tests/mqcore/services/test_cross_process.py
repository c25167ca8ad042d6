"""The Celery-mode store roles, with a broker and a worker store on one directory.

The two stores share nothing in memory but what any two processes would: the files, the
flock'd service locks and the mapped progress file. ``tests/workers`` repeats the important
cases with a real worker process.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mqcore.errors import StoreLockedError
from mqcore.message import Message
from mqcore.services import follow, locks, reput
from mqcore.store import GetStatus, MessageStore
from mqcore.store.consume_queue import CQ_UNIT_SIZE
from mqcore.store.sharing.progress import Slot
from tests.mqcore.services.conftest import SMALL, drain, put_many, reput_all


def expected(n: int, queue_id: int, start: int = 0) -> list[bytes]:
    return [f"order {i}".encode() for i in range(start, n) if i % 2 == queue_id]


def test_worker_dispatch_becomes_visible_to_the_broker(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    broker, worker = pair
    seen: list[tuple[int, int]] = []
    broker.add_listener(lambda r: seen.append((r.queue_id, r.queue_offset)))
    put_many(broker, 300)
    assert broker.max_offset("Orders", 0) == 0
    assert broker.dispatch_behind_bytes == broker.commit_log.max_offset

    assert reput_all(worker) == 300

    # Reads see the worker's units at once (the broker follows the queue on demand) ...
    assert drain(broker, "Orders", 0) == expected(300, 0)
    assert broker.max_offset("Orders", 1) == 150
    assert broker.dispatch_behind_bytes == 0
    # ... and the follow step calls the listeners once per record, in CommitLog order.
    assert seen == []
    while follow.step(broker).progressed:
        pass
    assert seen == [(i % 2, i // 2) for i in range(300)]
    assert follow.step(broker).detail["followed"] == 0
    # Index files the worker created, filled and rolled are queried by the broker.
    assert len(worker.index.files) >= 2
    for key in ("K3", "K150", "K299"):
        [found] = broker.query_by_key("Orders", key, 0, 2**62)
        assert found.body == f"order {key[1:]}".encode()


def test_a_new_worker_takes_over_after_one_died_mid_dispatch(
    tmp_path: Path, pair: tuple[MessageStore, MessageStore]
) -> None:
    broker, worker = pair
    put_many(broker, 200)
    reput_all(worker)
    # The worker dies: the kernel drops its lock, nothing is flushed or published, and it
    # was killed between two unit writes: the newest unit is half written.
    progress = broker.progress
    assert progress is not None
    progress.set(Slot.REPUT_OFFSET, 0)
    locks.release(worker, "reput")
    queue = worker.queues.get("Orders", 1)
    assert queue is not None
    last = queue.segments.last()
    assert last is not None
    last.write_at(last.wrote_position - CQ_UNIT_SIZE + 8, b"\0\0\0\0")  # size = 0: torn
    put_many(broker, 100, start=200)

    successor = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        assert reput_all(successor) >= 100
        for queue_id in (0, 1):
            assert drain(broker, "Orders", queue_id) == expected(300, queue_id)
        assert [m.body for m in broker.query_by_key("Orders", "K199", 0, 2**62)] == [b"order 199"]
        assert [m.body for m in broker.query_by_key("Orders", "K250", 0, 2**62)] == [b"order 250"]
        # The dead worker's store, should it still run somewhere, cannot take reput back.
        assert reput.step(worker).status == "skipped"
    finally:
        reput.release(successor)
        successor.close()


def test_a_worker_killed_between_queue_and_index_writes_loses_no_key(
    tmp_path: Path, pair: tuple[MessageStore, MessageStore]
) -> None:
    broker, worker = pair
    put_many(broker, 100)
    reput_all(worker)
    put_many(broker, 50, start=100)

    def killed(*_args: object) -> None:
        raise SystemExit("killed")  # after the units of the batch, before its index keys

    worker.index.build_index_many = killed  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        reput.step(worker)
    locks.release(worker, "reput")
    assert worker.max_offset("Orders", 0) == 75  # the units made it, not yet published
    assert broker.max_offset("Orders", 0) == 50
    successor = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        reput_all(successor)
        for i in (99, 100, 125, 149):
            assert [m.body for m in broker.query_by_key("Orders", f"K{i}", 0, 2**62)] == [
                f"order {i}".encode()
            ]
    finally:
        reput.release(successor)
        successor.close()


def test_a_worker_killed_before_its_index_header_write_loses_no_key(
    tmp_path: Path, pair: tuple[MessageStore, MessageStore]
) -> None:
    """The index header is written once per batch: a holder killed before that write
    leaves entries and slots past the header's count. The successor must not chain new
    entries onto them (that would cut older keys off): it rebuilds the newest files."""
    broker, worker = pair
    put_many(broker, 100)
    reput_all(worker)
    newest = Path(worker.index.files[-1].path)
    header = newest.read_bytes()[:40]
    put_many(broker, 50, start=100)
    reput_all(worker)
    with newest.open("r+b") as f:  # as if killed before the batch's header write
        f.write(header)
    locks.release(worker, "reput")  # dies holding reput: its pid stays published
    successor = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        reput_all(successor)
        put_many(broker, 10, start=150)
        reput_all(successor)
        missing = [i for i in range(160) if not broker.query_by_key("Orders", f"K{i}", 0, 2**62)]
        assert missing == []
    finally:
        reput.release(successor)
        successor.close()


def test_broker_restart_that_cuts_a_torn_tail(tmp_path: Path) -> None:
    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    worker = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        put_many(broker, 20)
        reput_all(worker)
        last = broker.put_message(Message("Orders", b"torn", keys=["TORN"]), queue_id=1)
        reput_all(worker)
        assert drain(broker, "Orders", 1)[-1] == b"torn"
        broker.close()
        # The last record's body is damaged on disk: its CRC no longer matches.
        segment = tmp_path / "commitlog" / f"{0:020d}"
        with segment.open("r+b") as f:
            f.seek(last.phys_offset + last.wrote_bytes - 60)
            f.write(b"\xff" * 8)

        broker = MessageStore(tmp_path, SMALL, role="broker").open()
        assert broker.recovery is not None and broker.recovery.end_offset == last.phys_offset
        # Until the worker has recovered its files, the cut unit is not shown.
        assert broker.max_offset("Orders", 1) == 10
        again = broker.put_message(Message("Orders", b"new", keys=["NEW"]), queue_id=1)
        assert (again.phys_offset, again.queue_offset) == (last.phys_offset, last.queue_offset)

        reput_all(worker)  # sees the new generation: re-attaches, cuts and zeroes the unit
        follow.step(broker)
        assert drain(broker, "Orders", 1) == [*expected(20, 1), b"new"]
        assert broker.query_by_key("Orders", "TORN", 0, 2**62) == []
        assert [m.body for m in broker.query_by_key("Orders", "NEW", 0, 2**62)] == [b"new"]
    finally:
        reput.release(worker)
        worker.close()
        broker.close()


def test_broker_restart_keeps_queue_offsets_of_undispatched_records(tmp_path: Path) -> None:
    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    put_many(broker, 100)
    broker.close()  # no worker ran: nothing dispatched, so ``abort`` stays
    assert (tmp_path / "abort").exists()
    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    worker = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        put_many(broker, 10, start=100)
        assert reput_all(worker) == 110
        for queue_id in (0, 1):
            assert drain(broker, "Orders", queue_id) == expected(110, queue_id)
    finally:
        reput.release(worker)
        worker.close()
        broker.close()
    assert not (tmp_path / "abort").exists()  # dispatch had caught up at close


def test_worker_reads_only_up_to_the_confirmed_offset(tmp_path: Path) -> None:
    cfg = dataclasses.replace(SMALL, flush="sync")
    broker = MessageStore(tmp_path, cfg, role="broker").open()
    worker = MessageStore(tmp_path, cfg, role="services").open()
    try:
        put_many(broker, 10)
        progress = broker.progress
        assert progress is not None
        assert progress.get(Slot.CONFIRM_OFFSET) == progress.get(Slot.MAX_OFFSET) > 0
        fifth = broker.get_messages  # noqa: F841 - readability of the next lines
        # As if the last five were appended but not yet flushed (so not yet confirmed).
        cut = broker.commit_log.max_offset - 5 * (broker.commit_log.max_offset // 10)
        progress.set(Slot.CONFIRM_OFFSET, cut)
        assert reput_all(worker) == 5
        progress.set(Slot.CONFIRM_OFFSET, broker.commit_log.max_offset)
        assert reput_all(worker) == 5
    finally:
        reput.release(worker)
        worker.close()
        broker.close()


def test_one_reput_runner_per_store(
    tmp_path: Path, pair: tuple[MessageStore, MessageStore]
) -> None:
    broker, worker = pair
    put_many(broker, 5)
    assert reput.step(worker).status == "ok"
    second = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        result = reput.step(second)
        assert result.status == "skipped"
        assert "lock held by" in result.detail["reason"]
        assert reput.step(broker).status == "skipped"  # the broker never runs it in this mode
        # A broker that would run the services itself refuses to start beside a worker.
        broker.close()
        with pytest.raises(StoreLockedError, match="CAIRN_SERVICES=celery"):
            MessageStore(tmp_path, SMALL).open()
        reput.release(worker)
        assert reput.step(second).status == "ok"
    finally:
        reput.release(second)
        second.close()


def test_worker_waits_for_a_broker_to_publish(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, role="services") as worker:
        result = reput.step(worker)
        assert result.status == "skipped"
        assert "no broker" in result.detail["reason"]
        assert not locks.holds(worker, "reput")


def test_the_same_worker_reattaches_cheaply_after_its_lease(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    broker, worker = pair
    progress = broker.progress
    assert progress is not None
    put_many(broker, 10)
    reput_all(worker)
    attaches = progress.get(Slot.ATTACH_COUNT)
    reput.release(worker)
    put_many(broker, 10, start=10)
    reput_all(worker)  # lease renewed by the same store: no reload, no follower reloads
    assert progress.get(Slot.ATTACH_COUNT) == attaches
    assert drain(broker, "Orders", 0) == expected(20, 0)


def test_services_store_refuses_puts(pair: tuple[MessageStore, MessageStore]) -> None:
    _broker, worker = pair
    assert not worker.writable
    assert worker.put_message(Message("Orders", b"x")).status.name == "SERVICE_NOT_AVAILABLE"


def test_unknown_queue_on_a_broker(pair: tuple[MessageStore, MessageStore]) -> None:
    broker, _worker = pair
    assert broker.get_messages("g", "Nope", 0, 0, 1).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
