"""Publisher: the offsets the CommitLog writer and the reput holder publish for the others."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from mqcore.message import Message
from mqcore.store import MessageStore
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.sharing.progress import Progress, Slot, published_config
from mqcore.store.sharing.publisher import Publisher
from tests.mqcore.store.sharing.conftest import SMALL, put_orders


def test_an_append_publishes_the_end_and_under_async_flush_confirms_it(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_orders(store, 30)
        progress = store.progress
        assert progress is not None
        end = store.commit_log.max_offset
        assert progress.get(Slot.MAX_OFFSET) == end > 0
        assert progress.get(Slot.CONFIRM_OFFSET) == end
        assert progress.get(Slot.FLUSHED_OFFSET) == store.commit_log.flushed_offset < end


def test_under_sync_flush_the_confirm_offset_is_the_flushed_one(tmp_path: Path) -> None:
    with MessageStore(tmp_path, dataclasses.replace(SMALL, flush="sync")) as store:
        put_orders(store, 3)
        publisher = Publisher(store.progress, store.commit_log, store.config, tmp_path)
        progress = store.progress
        assert progress is not None
        progress.set(Slot.CONFIRM_OFFSET, 0)
        progress.set(Slot.FLUSHED_OFFSET, 0)
        publisher.append()
        flushed = store.commit_log.flushed_offset
        assert progress.get(Slot.CONFIRM_OFFSET) == progress.get(Slot.FLUSHED_OFFSET) == flushed > 0


def test_slots_only_rise(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_orders(store, 10)
        progress = store.progress
        assert progress is not None
        end = progress.get(Slot.MAX_OFFSET)
        store.publisher.append(end=10)  # another writer's older end
        assert progress.get(Slot.MAX_OFFSET) == end
        store.dispatch_until_caught_up()
        assert progress.get(Slot.REPUT_OFFSET) == end
        store.publisher.reput(0, Checkpoint(tmp_path / "other"))
        assert progress.get(Slot.REPUT_OFFSET) == end
        assert progress.get(Slot.LOGICS_TIMESTAMP) > 0


def test_a_reput_pass_publishes_its_offset_and_the_checkpoint_times(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_orders(store, 10)
        store.dispatch_until_caught_up()
        progress = store.progress
        assert progress is not None
        assert progress.get(Slot.REPUT_OFFSET) == store.reput_offset == store.commit_log.max_offset
        logics = store.checkpoint.logics_msg_timestamp
        assert progress.get(Slot.LOGICS_TIMESTAMP) == logics > 0


def test_a_standalone_open_is_its_own_reput_holder_and_a_broker_open_is_not(
    tmp_path: Path,
) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_orders(store, 10)
    with MessageStore(tmp_path, SMALL) as store:
        progress = store.progress
        assert progress is not None
        generation = progress.get(Slot.GENERATION)
        assert generation >= 2
        assert progress.get(Slot.REPUT_GENERATION) == generation
        assert progress.get(Slot.WRITER_PID) == os.getpid()
        assert progress.get(Slot.LAST_EXIT_OK) == 1
        assert progress.get(Slot.RECOVERED_END) == store.commit_log.max_offset
    assert published_config(tmp_path) is not None
    with MessageStore(tmp_path, SMALL, role="broker") as broker:
        progress = broker.progress
        assert progress is not None
        assert progress.get(Slot.GENERATION) == generation + 1
        assert progress.get(Slot.REPUT_GENERATION) == generation  # its worker attaches later
    after = Progress(tmp_path)
    try:
        assert after.get(Slot.WRITER_PID) == 0  # the writer closed
    finally:
        after.close()


def test_a_read_only_store_publishes_nothing(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        store.put_message(Message("Orders", b"x"))
    with MessageStore(tmp_path, SMALL, readonly=True) as reader:
        assert reader.progress is None
        assert reader.publisher.progress is None
        reader.publisher.append()
        reader.publisher.reput(10, reader.checkpoint)
        reader.publisher.writer_opened(10, True, reput_offset=10)
        reader.publisher.writer_closed()
