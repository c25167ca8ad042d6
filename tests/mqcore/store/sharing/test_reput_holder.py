"""ReputHolder: a worker's turn as the one writer of the derived files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mqcore.store import MessageStore
from mqcore.store.sharing.progress import Slot
from mqcore.store.sharing.reput_holder import ReputHolder
from tests.mqcore.store.sharing.conftest import SMALL, put_orders


def holder_of(store: MessageStore) -> ReputHolder:
    assert store.reput_holder is not None
    return store.reput_holder


def test_only_a_services_store_has_a_holder(tmp_path: Path, broker: MessageStore) -> None:
    assert broker.reput_holder is None
    with pytest.raises(RuntimeError, match="only a services-role store attaches"):
        broker.attach()


def test_no_attach_before_a_writer_published(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "alone", SMALL, role="services") as worker:
        assert worker.attach() is False
        assert not worker.attached


def test_dispatch_needs_an_attach(broker: MessageStore, worker: MessageStore) -> None:
    with pytest.raises(RuntimeError, match="only after attach"):
        holder_of(worker).before_reput(0)


def test_attach_takes_the_derived_files_and_says_so(
    broker: MessageStore, worker: MessageStore
) -> None:
    put_orders(broker, 30)
    progress = holder_of(worker).progress
    count = progress.get(Slot.ATTACH_COUNT)
    old_queues = worker.views.queues
    assert worker.attach() is True
    holder = holder_of(worker)
    assert holder.attached and worker.attached and not worker.follows_derived_files
    assert holder.attached_generation == progress.get(Slot.GENERATION)
    assert progress.get(Slot.REPUT_GENERATION) == progress.get(Slot.GENERATION)
    assert progress.get(Slot.REPUT_HOLDER_PID) == os.getpid()
    assert progress.get(Slot.ATTACH_COUNT) == count + 1
    assert worker.views.queues is not old_queues  # reloaded for writing
    assert worker.reput_once() == 30
    assert worker.max_offset("Orders", 1) == 15


def test_detach_flushes_publishes_and_gives_the_files_up(
    broker: MessageStore, worker: MessageStore
) -> None:
    put_orders(broker, 20)
    assert worker.attach()
    worker.reput_once()
    progress = holder_of(worker).progress
    worker.detach()
    assert not worker.attached
    assert progress.get(Slot.REPUT_HOLDER_PID) == 0
    assert progress.get(Slot.REPUT_OFFSET) == broker.commit_log.max_offset
    assert broker.max_offset("Orders", 0) == 10  # the broker reads the flushed units


def test_the_last_holder_attaches_again_without_recovering(
    broker: MessageStore, worker: MessageStore
) -> None:
    put_orders(broker, 20)
    holder = holder_of(worker)
    assert holder.attach() is not None
    worker.reput_once()
    holder.detach(worker.reput_offset)
    count = holder.progress.get(Slot.ATTACH_COUNT)
    assert holder.attach() is None  # nobody attached since: its dispatch position holds
    assert holder.attached and holder.progress.get(Slot.ATTACH_COUNT) == count


def test_a_broker_restart_makes_the_holder_attach_again(tmp_path: Path) -> None:
    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    worker = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        put_orders(broker, 20)
        assert worker.attach()
        worker.reput_once()
        first = holder_of(worker).attached_generation
        broker.close()
        broker = MessageStore(tmp_path, SMALL, role="broker").open()
        put_orders(broker, 10, start=20)
        end, start = holder_of(worker).before_reput(worker.reput_offset)
        assert holder_of(worker).attached_generation == first + 1
        assert end == broker.commit_log.max_offset
        assert start <= end
        worker.reput_once()
        assert worker.max_offset("Orders", 0) == 15
    finally:
        worker.close()
        broker.close()
