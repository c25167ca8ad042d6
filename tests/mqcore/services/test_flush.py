import dataclasses
from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.services import flush
from mqcore.services.flush import FlushState
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.recovery.checkpoint import Checkpoint

CFG = StoreConfig(
    commitlog_file_size=1024 * 1024,
    consume_queue_file_entries=1000,
    index_hash_slots=11,
    index_max_entries=1000,
    flush_commitlog_least_pages=4,
    flush_commitlog_thorough_interval_ms=10_000,
)


def write(store: MessageStore, total_bytes: int) -> None:
    body = b"x" * 900
    for _ in range(total_bytes // 1000):
        store.put_message(Message("T", body))


def test_async_flush_waits_for_least_pages_until_thorough_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    state = FlushState()
    with MessageStore(tmp_path, CFG, clock=clock) as store:
        flush.step(store, state, clock)  # the first pass is thorough
        assert store.commit_log.flushed_offset == store.commit_log.max_offset == 0

        write(store, 6_000)  # about 1.5 pages: below the 4-page threshold
        clock.advance(500)
        flush.step(store, state, clock)
        assert store.commit_log.flushed_offset == 0

        write(store, 20_000)  # now at least 4 dirty pages
        clock.advance(500)
        flush.step(store, state, clock)
        # Past the threshold a flush writes out everything written so far.
        assert store.commit_log.flushed_offset == store.commit_log.max_offset
        flushed = store.commit_log.flushed_offset

        write(store, 2_000)  # below the threshold again
        clock.advance(500)
        flush.step(store, state, clock)
        assert store.commit_log.flushed_offset == flushed

        clock.advance(10_000)  # thorough: everything, regardless of page count
        flush.step(store, state, clock)
        assert store.commit_log.flushed_offset == store.commit_log.max_offset > flushed


def test_checkpoint_gets_the_flushed_store_time(tmp_path: Path) -> None:
    clock = FakeClock(now_ms=1_800_000_000_000)
    state = FlushState()
    with MessageStore(tmp_path, CFG, clock=clock) as store:
        store.put_message(Message("T", b"hello"))
        store.dispatch_until_caught_up()
        flush.step(store, state, clock)
        assert store.checkpoint.physic_msg_timestamp == 1_800_000_000_000
        assert store.checkpoint.logics_msg_timestamp == 1_800_000_000_000
    raw = (tmp_path / "checkpoint").read_bytes()
    assert len(raw) == 4096
    assert int.from_bytes(raw[0:8], "big") == 1_800_000_000_000


def test_sync_flush_put_returns_flushed(tmp_path: Path) -> None:
    cfg = StoreConfig(
        commitlog_file_size=64 * 1024,
        consume_queue_file_entries=100,
        index_hash_slots=11,
        index_max_entries=100,
        flush="sync",
    )
    with MessageStore(tmp_path, cfg) as store:
        for i in range(200):  # crosses segment boundaries too
            r = store.put_message(Message("T", b"y" * 500))
            assert r.ok
            assert store.commit_log.flushed_offset >= r.phys_offset + r.wrote_bytes, i


def test_worker_flushes_the_brokers_commitlog_and_owns_the_checkpoint(tmp_path: Path) -> None:
    """Celery mode: the worker maps the CommitLog read-only and fdatasyncs what the broker
    wrote, with the same page thresholds; it writes the checkpoint from published times."""
    from mqcore.services import reput
    from mqcore.store.sharing.progress import Slot

    clock = FakeClock(now_ms=1_800_000_000_000)
    broker = MessageStore(tmp_path, CFG, role="broker", clock=clock).open()
    worker = MessageStore(tmp_path, CFG, role="services", clock=clock).open()
    flusher = MessageStore(tmp_path, CFG, role="services", clock=clock).open()
    progress = broker.progress
    assert progress is not None
    state = FlushState()
    try:
        assert flush.step(broker, state, clock).status == "skipped"  # not the broker's job
        flush.step(flusher, state, clock)  # first pass: thorough
        write(broker, 6_000)  # about 1.5 pages
        clock.advance(500)
        result = flush.step(flusher, state, clock)
        assert not result.detail["commitlog_flushed"]
        assert progress.get(Slot.SERVICES_FLUSHED_OFFSET) == 0

        write(broker, 20_000)  # past 4 dirty pages
        while reput.step(worker).progressed:
            pass
        clock.advance(500)
        result = flush.step(flusher, state, clock)
        assert result.detail["commitlog_flushed"]
        end = broker.commit_log.max_offset
        assert progress.get(Slot.SERVICES_FLUSHED_OFFSET) == end == result.detail["flushed_offset"]

        checkpoint = Checkpoint.load(tmp_path / "checkpoint")
        # The last record was stored after the first advance.
        assert checkpoint.logics_msg_timestamp == 1_800_000_000_500
        assert checkpoint.physic_msg_timestamp == 1_800_000_000_500

        write(broker, 1_000)
        clock.advance(10_000)  # thorough: whatever the page count
        while reput.step(worker).progressed:
            pass
        assert flush.step(flusher, state, clock).detail["commitlog_flushed"]
        assert progress.get(Slot.SERVICES_FLUSHED_OFFSET) == broker.commit_log.max_offset
        clock.advance(60_000)  # the ConsumeQueues' thorough interval (spec 6.3)
        flush.step(flusher, state, clock)
        # The thorough pass fdatasync'ed the worker's read-only views of the queues.
        queue_files = [m for q in flusher.queues.queues("T").values() for m in q.segments.files]
        assert queue_files and all(m.flushed_position == m.wrote_position > 0 for m in queue_files)
    finally:
        flusher.close()
        reput.release(worker)
        worker.close()
        broker.close()


def test_consume_queues_flush_on_their_own_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    state = FlushState()
    with MessageStore(tmp_path, CFG, clock=clock) as store:
        calls: list[int] = []
        original = store.queues.flush_all

        def counting(least_pages: int) -> bool:
            calls.append(least_pages)
            return original(least_pages)

        store.queues.flush_all = counting  # type: ignore[method-assign]
        flush.step(store, state, clock)
        clock.advance(500)
        flush.step(store, state, clock)
        clock.advance(500)
        flush.step(store, state, clock)
        assert calls == [0, 2]  # 1 s apart; the first pass is thorough


def test_sync_flush_flushes_what_no_put_waited_for(tmp_path: Path) -> None:
    """A WAIT=false put (a delayed message's delivery) under sync flush is not flushed by
    its put; the flush pass flushes it, and only then can reput dispatch and a reader see it
    (it used to wait for the next put that waited, for ever on an idle broker)."""
    clock = FakeClock()
    state = FlushState()
    cfg = dataclasses.replace(CFG, flush="sync")
    with MessageStore(tmp_path, cfg, clock=clock) as store:
        store.put_message(Message("T", b"waited"))
        unwaited = store.put_message(Message("T", b"not waited", properties={"WAIT": "false"}))
        store.dispatch_until_caught_up()
        assert store.max_offset("T", 0) == 1
        assert store.commit_log.flushed_offset <= unwaited.phys_offset

        clock.advance(500)
        result = flush.step(store, state, clock)
        assert result.detail["commitlog_flushed"] is True
        assert store.commit_log.flushed_offset == store.commit_log.max_offset
        assert store.appended.is_set()
        store.dispatch_until_caught_up()
        assert store.max_offset("T", 0) == 2

        clock.advance(500)
        assert flush.step(store, state, clock).detail["commitlog_flushed"] is False
