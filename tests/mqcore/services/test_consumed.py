"""What consumers still need (``consumed.py``): committed offsets and the delay service's
progress, mapped to CommitLog offsets through real ConsumeQueues; read live from the
broker's tables or from the persisted files (a Celery worker)."""

from __future__ import annotations

from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.metadata import Metadata
from mqcore.metadata.topics import SCHEDULE_TOPIC
from mqcore.services import consumed
from mqcore.store import MessageStore
from tests.mqcore.services.conftest import SMALL, put_many, reput_all

T0 = 1_700_000_000_000


def _phys(store: MessageStore, topic: str, queue_id: int, offset: int) -> int:
    return store.get_messages("g", topic, queue_id, offset, 1).messages[0].phys_offset


def test_the_lowest_unconsumed_message_of_every_group_and_queue(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with MessageStore(tmp_path / "store", SMALL, clock=clock) as store:
        put_many(store, 200)  # Orders, queues 0 and 1
        reput_all(store)
        metadata = Metadata(tmp_path / "config", clock)
        assert consumed.lowest_needed(store, consumed.committed_of(store, metadata)) is None
        metadata.offsets.commit("billing", "Orders", 0, 60)
        metadata.offsets.commit("billing", "Orders", 1, 100)  # consumed all of queue 1
        metadata.offsets.commit("audit", "Orders", 1, 40)
        needed = consumed.lowest_needed(store, consumed.committed_of(store, metadata))
        assert needed is not None
        # queue 1 offset 40 was stored before queue 0 offset 60 (they alternate).
        assert (needed.owner, needed.queue_id, needed.queue_offset) == ("group audit", 1, 40)
        assert needed.phys_offset == _phys(store, "Orders", 1, 40)
        assert "group audit has not consumed Orders queue 1 from offset 40" in needed.describe()
        metadata.offsets.commit("audit", "Orders", 1, 100)
        needed = consumed.lowest_needed(store, consumed.committed_of(store, metadata))
        assert needed is not None and (needed.owner, needed.queue_offset) == ("group billing", 60)


def test_offsets_at_the_end_or_unknown_queues_need_nothing(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 20, queues=1)
        reput_all(store)
        assert consumed.lowest_needed(store, [("group g", "Orders", 0, 20)]) is None
        assert consumed.lowest_needed(store, [("group g", "Orders", 0, 99)]) is None
        assert consumed.lowest_needed(store, [("group g", "Nope", 0, 0)]) is None
        needed = consumed.lowest_needed(store, [("group g", "Orders", 0, 19)])
        assert needed is not None and needed.phys_offset == _phys(store, "Orders", 0, 19)


def test_a_delay_level_that_never_ran_needs_its_whole_queue(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with MessageStore(tmp_path / "store", SMALL, clock=clock) as store:
        for level in (1, 3):
            store.put_message(Message(SCHEDULE_TOPIC, b"later"), queue_id=level - 1)
        reput_all(store)
        metadata = Metadata(tmp_path / "config", clock)
        metadata.delay_offsets.update(1, 1)  # level 1 delivered its one message
        needed = consumed.lowest_needed(store, consumed.committed_of(store, metadata))
        assert needed is not None
        assert (needed.owner, needed.topic, needed.queue_id) == ("delay level 3", SCHEDULE_TOPIC, 2)


def test_a_worker_reads_the_persisted_offsets_on_every_call(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    config_dir = tmp_path / "store" / "config"
    with MessageStore(tmp_path / "store", SMALL, clock=clock) as store:
        put_many(store, 100)
        reput_all(store)
        needed = consumed.from_config_dir(store, config_dir, clock)
        assert needed() is None  # no file yet: nobody committed
        broker_side = Metadata(config_dir, clock)
        broker_side.offsets.commit("billing", "Orders", 0, 10)
        assert needed() is None  # committed in memory only, not persisted yet
        broker_side.offsets.persist()
        found = needed()
        assert found is not None and found.queue_offset == 10
        assert found.phys_offset == _phys(store, "Orders", 0, 10)
