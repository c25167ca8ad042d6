from pathlib import Path

from mqcore.message import Message
from mqcore.services import reput
from mqcore.store import GetStatus, MessageStore, StoreConfig

SMALL = StoreConfig(
    commitlog_file_size=16 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=11,
    index_max_entries=400,
)


def put_many(store: MessageStore, n: int) -> None:
    for i in range(n):
        store.put_message(Message("Orders", f"order {i}".encode(), keys=[f"K{i}"]), queue_id=i % 2)


def test_step_dispatches_then_idles(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 300)
        first = reput.step(store)
        assert first.progressed and first.detail["dispatched"] > 0
        total = first.detail["dispatched"]
        while (r := reput.step(store)).progressed:
            total += r.detail["dispatched"]
        assert total == 300
        assert r.detail["behind_bytes"] == 0
        assert store.max_offset("Orders", 0) == 150


def test_step_is_bounded_by_max_bytes(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 300)
        r = reput.step(store, max_bytes=1000)
        assert 0 < r.detail["dispatched"] < 20
        assert r.detail["behind_bytes"] > 0


def test_redispatch_after_crash_between_log_and_queue_duplicates_nothing(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 300)
        store.dispatch_until_caught_up()
        # A runner that died after writing ConsumeQueue units but before saving its progress
        # starts again from an older offset: every write must be skipped as already present.
        store.reput_offset = 0
        while reput.step(store).progressed:
            pass
        assert store.max_offset("Orders", 0) == 150
        assert store.max_offset("Orders", 1) == 150
        seen = []
        offset = 0
        while True:
            got = store.get_messages("g", "Orders", 0, offset, 32)
            if got.status is not GetStatus.FOUND:
                break
            seen += [m.body for m in got.messages]
            offset = got.next_offset
        assert seen == [f"order {i}".encode() for i in range(0, 300, 2)]
        assert [m.body for m in store.query_by_key("Orders", "K7", 0, 2**62)] == [b"order 7"]
