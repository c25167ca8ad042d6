"""Follower: a broker catching up with its worker's derived files, a worker with the log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.format.record import DispatchRequest
from mqcore.services import reput
from mqcore.store import MessageStore
from mqcore.store.sharing.follower import dispatch_limit
from mqcore.store.sharing.progress import Progress, Slot
from tests.mqcore.store.sharing.conftest import put_orders


@pytest.fixture
def progress(tmp_path: Path) -> Iterator[Progress]:
    shared = Progress(tmp_path)
    try:
        yield shared
    finally:
        shared.close()


def dispatched_by_worker(worker: MessageStore) -> int:
    total = 0
    while (step := reput.step(worker)).progressed:
        total += step.detail["dispatched"]
    assert step.status == "ok", step
    reput.release(worker)  # flushed and published, lock let go
    return total


def test_the_limit_stops_at_the_recovered_end_until_the_holder_attached(
    progress: Progress,
) -> None:
    progress.set(Slot.REPUT_OFFSET, 100)
    progress.set(Slot.RECOVERED_END, 50)
    progress.set(Slot.GENERATION, 2)
    progress.set(Slot.REPUT_GENERATION, 1)
    assert dispatch_limit(progress) == 50
    progress.set(Slot.REPUT_GENERATION, 2)
    assert dispatch_limit(progress) == 100


def test_a_broker_reads_what_its_worker_dispatched(
    broker: MessageStore, worker: MessageStore
) -> None:
    put_orders(broker, 40)
    assert broker.follower.refresh_queue("Orders", 0) is None  # nothing dispatched yet
    assert dispatched_by_worker(worker) == 40
    queue = broker.follower.refresh_queue("Orders", 0)
    assert queue is not None and queue.max_offset == 20
    assert broker.follower.limit() == broker.commit_log.max_offset
    broker.follower.refresh_index()
    assert [m.body for m in broker.query_by_key("Orders", "K7", 0, 2**62)] == [b"order 7"]


def test_follow_dispatch_walks_what_was_dispatched_and_tells_the_listeners(
    broker: MessageStore, worker: MessageStore
) -> None:
    seen: list[DispatchRequest] = []
    arrivals: list[object] = []
    broker.add_listener(seen.append)
    broker.add_arrivals_listener(arrivals.append)
    put_orders(broker, 30)
    start = broker.reput_offset
    assert broker.follower.follow_dispatch(start, 1 << 20, broker.delay_levels_ms) == (0, start)
    dispatched_by_worker(worker)
    count, reached = broker.follower.follow_dispatch(start, 1 << 20, broker.delay_levels_ms)
    assert (count, reached) == (30, broker.commit_log.max_offset)
    assert [(r.queue_id, r.queue_offset) for r in seen] == [(i % 2, i // 2) for i in range(30)]
    assert arrivals == [{("Orders", 0): 14, ("Orders", 1): 14}]
    assert broker.follower.follow_dispatch(reached, 1 << 20, broker.delay_levels_ms) == (0, reached)


def test_housekeeping_reloads_the_views_when_a_holder_attached(
    broker: MessageStore, worker: MessageStore
) -> None:
    put_orders(broker, 10)
    old_queues, old_index = broker.views.queues, broker.views.index
    broker.follower.housekeeping()
    assert broker.views.queues is old_queues  # nothing changed: nothing reloaded
    dispatched_by_worker(worker)  # the worker attached: ATTACH_COUNT rose
    broker.follower.housekeeping()
    assert broker.views.queues is not old_queues and broker.views.index is not old_index
    assert broker.follower.seen[Slot.ATTACH_COUNT] == broker.follower.progress.get(
        Slot.ATTACH_COUNT
    )


def test_a_cleanup_elsewhere_is_taken_once(broker: MessageStore) -> None:
    follower = broker.follower
    assert not follower.take_cleanup()
    follower.progress.increment(Slot.CLEANUP_GENERATION)
    assert follower.take_cleanup()
    assert not follower.take_cleanup()


def test_note_keeps_what_was_seen_when_asked(broker: MessageStore) -> None:
    follower = broker.follower
    follower.seen[Slot.INDEX_GENERATION] = -5
    follower.note(Slot.INDEX_GENERATION, keep=True)
    assert follower.seen[Slot.INDEX_GENERATION] == -5
    follower.note(Slot.INDEX_GENERATION)
    assert follower.seen[Slot.INDEX_GENERATION] == follower.progress.get(Slot.INDEX_GENERATION)


def test_a_worker_follows_the_log_to_the_published_end(
    broker: MessageStore, worker: MessageStore
) -> None:
    put_orders(broker, 200)  # several 16 KiB segments: the worker maps the new ones
    assert len(broker.commit_log.segments.files) >= 2
    end = worker.follower.follow_commit_log()
    assert end == broker.commit_log.max_offset
    assert worker.commit_log.max_offset == end
    assert len(worker.commit_log.segments.files) == len(broker.commit_log.segments.files)
    assert worker.follower.confirm_offset() == end  # async flush: confirmed at once
