"""Arrivals listeners (``mqcore/store/reput/arrivals.py``): one mapping per dispatch batch naming the
queues that grew and their highest dispatched offset, after the units are written, on both
reput paths (rows when no per-record listener is registered, requests otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.format.record import DispatchRequest
from mqcore.message import Message
from mqcore.services import follow, reput
from mqcore.store import MessageStore
from mqcore.store.reput.arrivals import Arrivals
from tests.mqcore.store.test_store_fast_paths import SMALL, T0, messages


def _expected(store: MessageStore) -> dict[tuple[str, int], int]:
    """The last queue offset of every non-empty queue, from the ConsumeQueues themselves."""
    return {
        (topic, queue_id): queue.max_offset - 1
        for topic in store.queues.topics()
        for queue_id, queue in store.queues.queues(topic).items()
        if queue.max_offset > 0
    }


@pytest.mark.parametrize("per_record_listener", [False, True], ids=["rows", "requests"])
def test_arrivals_name_every_queue_that_grew_after_its_units_are_written(
    tmp_path: Path, per_record_listener: bool
) -> None:
    clock = FakeClock(T0)
    store = MessageStore(tmp_path, SMALL, clock=clock).open()
    batches: list[dict[tuple[str, int], int]] = []
    unreadable: list[tuple[str, int, int]] = []

    def on_arrivals(arrivals: Arrivals) -> None:
        batches.append(dict(arrivals))
        for (topic, queue_id), offset in arrivals.items():
            if store.max_offset(topic, queue_id) <= offset:  # not in the ConsumeQueue yet
                unreadable.append((topic, queue_id, offset))

    requests: list[DispatchRequest] = []
    store.add_arrivals_listener(on_arrivals)
    if per_record_listener:
        store.add_listener(requests.append)
    try:
        for step, (queue_id, batch) in enumerate(messages(11, 3000)):  # every tx type
            store.put_messages(batch, queue_id)
            if step % 50 == 0:
                store.reput_once(max_bytes=20_000)  # several runs, each several batches
        store.dispatch_until_caught_up()
        assert store.listeners == ([requests.append] if per_record_listener else [])
        assert unreadable == []
        assert len(batches) > 3
        merged: dict[tuple[str, int], int] = {}
        for arrivals in batches:
            assert arrivals  # a batch of only prepared records is no arrival
            for key, offset in arrivals.items():
                assert offset > merged.get(key, -1)  # offsets only grow, batch by batch
                merged[key] = offset
        assert merged == _expected(store)
    finally:
        store.remove_arrivals_listener(on_arrivals)
        store.close()


def test_prepared_records_are_not_arrivals(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, SMALL, clock=FakeClock(T0)).open()
    seen: list[dict[tuple[str, int], int]] = []
    store.add_arrivals_listener(lambda a: seen.append(dict(a)))
    try:
        store.put_messages([Message("orders", b"half", sys_flag=0x4)], 1)  # PREPARED
        store.dispatch_until_caught_up()
        assert seen == []
        store.put_messages([Message("orders", b"x"), Message("orders", b"y")], 2)
        store.put_messages([Message("orders", b"rolled back", sys_flag=0xC)], 0)
        store.dispatch_until_caught_up()
        assert seen == [{("orders", 2): 1}]
    finally:
        store.close()


def test_a_broker_role_store_hears_arrivals_when_it_follows_the_worker(tmp_path: Path) -> None:
    """Celery mode: the worker dispatches, the broker-role store's follow step names the
    queues that grew, after they are readable (``Follower.follow_dispatch``)."""
    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    worker = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        seen: list[dict[tuple[str, int], int]] = []
        late: list[tuple[str, int]] = []

        def on_arrivals(arrivals: Arrivals) -> None:
            seen.append(dict(arrivals))
            late.extend(k for k, off in arrivals.items() if broker.max_offset(*k) <= off)

        broker.add_arrivals_listener(on_arrivals)
        for i in range(30):
            broker.put_messages([Message("Orders", b"x%d" % i)], i % 3)
        broker.put_messages([Message("Orders", b"half", sys_flag=0x4)], 0)  # no arrival
        while reput.step(worker).progressed:
            pass
        assert seen == []  # nothing until the broker follows
        while follow.step(broker).progressed:
            pass
        assert late == []
        merged: dict[tuple[str, int], int] = {}
        for arrivals in seen:
            merged.update(arrivals)
        assert merged == {("Orders", 0): 9, ("Orders", 1): 9, ("Orders", 2): 9}
    finally:
        reput.release(worker)
        worker.close()
        broker.close()
