"""One reput pass: columns or requests, chosen once, reaching the same place."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.format.record import DispatchRequest
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.reput import reput_pass
from mqcore.store.reput.dispatch_write import DispatchWriter
from mqcore.store.reput.reput_columns import Columns

CONFIG = StoreConfig(commitlog_file_size=4 * 1024 * 1024, consume_queue_file_entries=10_000)


class Recording(DispatchWriter):
    """The real writer, noting each batch it is handed and in which form."""

    def __init__(self, store: MessageStore) -> None:
        super().__init__(store.views, index_enabled=True)
        self.calls: list[tuple[str, int]] = []

    def write_columns(self, columns: Columns) -> None:
        self.calls.append(("columns", len(columns)))
        super().write_columns(columns)

    def write_requests(self, batch: Sequence[DispatchRequest]) -> None:
        self.calls.append(("requests", len(batch)))
        super().write_requests(batch)


def filled(tmp_path: Path, count: int) -> MessageStore:
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock()).open()
    for start in range(0, count, 500):
        batch = [
            Message("T", b"x" * 20, keys=f"k{i}") for i in range(start, min(count, start + 500))
        ]
        store.put_messages(batch)
    return store


def run(store: MessageStore, writer: DispatchWriter, **kwargs: object) -> tuple[int, int]:
    options: dict[str, object] = {
        "max_bytes": 64 << 20,
        "delay_levels_ms": store.delay_levels_ms,
        "per_record": False,
    }
    options.update(kwargs)
    return reput_pass.dispatch_pass(
        store.commit_log,
        writer,
        store.reput_offset,
        store.commit_log.confirm_offset,
        **options,  # type: ignore[arg-type]
    )


def test_a_large_pass_goes_by_columns_in_batches(tmp_path: Path) -> None:
    with filled(tmp_path, 5_000) as store:
        writer = Recording(store)
        assert run(store, writer) == (5_000, store.commit_log.max_offset)
        assert writer.calls == [("columns", reput_pass.COLUMNS_BATCH), ("columns", 904)]
        assert store.queues.get("T", 0) is not None
        assert store.max_offset("T", 0) == 5_000
        store.reput_offset = store.commit_log.max_offset  # what the pass reached


def test_a_listener_or_a_short_log_goes_by_requests(tmp_path: Path) -> None:
    with filled(tmp_path, 2_100) as store:
        writer = Recording(store)
        assert run(store, writer, per_record=True) == (2_100, store.commit_log.max_offset)
        assert writer.calls == [("requests", 1024), ("requests", 1024), ("requests", 52)]
        store.reput_offset = store.commit_log.max_offset
        store.put_message(Message("T", b"one more"))
        short = Recording(store)
        assert store.commit_log.confirm_offset - store.reput_offset < reput_pass.COLUMNS_MIN_BYTES
        assert run(store, short) == (1, store.commit_log.max_offset)
        assert short.calls == [("requests", 1)]
        store.reput_offset = store.commit_log.max_offset


def test_max_bytes_ends_a_pass_early_at_a_record_boundary(tmp_path: Path) -> None:
    with filled(tmp_path, 1_000) as store:
        columns = run(store, Recording(store), max_bytes=10_000)
        assert 0 < columns[0] < 1_000 and columns[1] < store.commit_log.max_offset
        assert store.commit_log.record_size_at(columns[1]) is not None
        store.reput_offset = columns[1]
        assert store.max_offset("T", 0) == columns[0]


def test_nothing_new_dispatches_nothing(tmp_path: Path) -> None:
    with filled(tmp_path, 10) as store:
        store.dispatch_until_caught_up()
        writer = Recording(store)
        assert run(store, writer) == (0, store.reput_offset)
