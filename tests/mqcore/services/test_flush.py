from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.services import flush
from mqcore.services.flush import FlushState
from mqcore.store import MessageStore, StoreConfig

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
