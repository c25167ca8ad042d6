"""Long polling: woken by a dispatch on another thread, timing out, asyncio, several queues.

The only waits here are bounded waits on events (thread joins, an event's timeout) while a
consumer is parked; nothing sleeps for a fixed time to let something happen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mqcore.broker import Broker, OutgoingMessage, PullResult, PullStatus
from mqcore.services import reput
from mqcore.services.runner import ServiceLoop
from tests.mqcore.broker.conftest import BrokerFactory

WAKE_BUDGET_S = 0.05


def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait (bounded) until ``condition()``: an Event that is never set serves as the timer."""
    tick = threading.Event()
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        tick.wait(0.0005)


def _pull_in_thread(broker: Broker, wait_ms: int) -> tuple[threading.Thread, dict[str, object]]:
    box: dict[str, object] = {}

    def run() -> None:
        box["result"] = broker.pull("g", "Orders", 0, 0, wait_ms=wait_ms)
        box["done_at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _until(lambda: broker.waiting_pulls == 1)
    return thread, box


def test_pull_is_woken_by_a_send_on_another_thread(broker: Broker) -> None:
    thread, box = _pull_in_thread(broker, wait_ms=10_000)
    sent_at = time.monotonic()
    broker.send("Orders", [OutgoingMessage(b"wake", queue_id=0)])
    thread.join(5)
    result = box["result"]
    assert isinstance(result, PullResult) and result.status is PullStatus.FOUND
    assert [m.body for m in result.messages] == [b"wake"]
    assert float(box["done_at"]) - sent_at < WAKE_BUDGET_S  # type: ignore[arg-type]
    assert broker.waiting_pulls == 0


def test_pull_is_not_woken_by_other_queues(broker: Broker) -> None:
    thread, box = _pull_in_thread(broker, wait_ms=300)
    broker.send("Orders", [OutgoingMessage(b"other", queue_id=1)])
    thread.join(5)
    result = box["result"]
    assert isinstance(result, PullResult) and result.status is PullStatus.NO_NEW_MSG


def test_woken_through_the_reput_service(make_broker: BrokerFactory) -> None:
    broker = make_broker(dispatch_on_send=False)
    broker.admin.create_topic("Orders", read_queue_nums=1)
    store = broker.store
    loop = ServiceLoop("reput", lambda: reput.step(store), 5.0, wake=store.appended)
    loop.start()
    try:
        thread, box = _pull_in_thread(broker, wait_ms=10_000)
        sent_at = time.monotonic()
        broker.send("Orders", [OutgoingMessage(b"via reput")])
        thread.join(5)
    finally:
        loop.stop()
    result = box["result"]
    assert isinstance(result, PullResult) and result.status is PullStatus.FOUND
    assert float(box["done_at"]) - sent_at < WAKE_BUDGET_S  # type: ignore[arg-type]


def test_pull_times_out(broker: Broker) -> None:
    started = time.monotonic()
    result = broker.pull("g", "Orders", 0, 0, wait_ms=120)
    elapsed = time.monotonic() - started
    assert result.status is PullStatus.NO_NEW_MSG
    assert 0.12 <= elapsed < 1.0
    assert broker.waiting_pulls == 0


def test_wait_is_cut_to_the_maximum(make_broker: BrokerFactory) -> None:
    broker = make_broker(max_pull_wait_ms=50)
    broker.admin.create_topic("Orders", read_queue_nums=1)
    started = time.monotonic()
    broker.pull("g", "Orders", 0, 0, wait_ms=60_000)
    assert time.monotonic() - started < 1.0


def test_stop_releases_waiting_pulls(broker: Broker) -> None:
    thread, box = _pull_in_thread(broker, wait_ms=10_000)
    broker.stop()
    thread.join(5)
    assert not thread.is_alive()
    result = box["result"]
    assert isinstance(result, PullResult) and result.status is PullStatus.NO_NEW_MSG


def test_wait_for_any_of_several_queues(broker: Broker) -> None:
    broker.admin.create_topic("Other", read_queue_nums=1)
    queues = [("Orders", 0, 0), ("Orders", 1, 0), ("Other", 0, 0)]
    box: dict[str, object] = {}

    def run() -> None:
        box["ready"] = broker.wait_for_messages(queues, 10_000)
        box["done_at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _until(lambda: broker.waiting_pulls == 1)
    sent_at = time.monotonic()
    broker.send("Other", [OutgoingMessage(b"x")])
    thread.join(5)
    assert box["ready"] == [("Other", 0, 0)]
    assert float(box["done_at"]) - sent_at < WAKE_BUDGET_S  # type: ignore[arg-type]


def test_wait_for_messages_ready_at_once_and_timeout(broker: Broker) -> None:
    broker.send("Orders", [OutgoingMessage(b"x", queue_id=2)])
    assert broker.wait_for_messages([("Orders", 2, 0), ("Orders", 3, 0)], 10_000) == [
        ("Orders", 2, 0)
    ]
    started = time.monotonic()
    assert broker.wait_for_messages([("Orders", 2, 1)], 60) == []
    assert 0.06 <= time.monotonic() - started < 1.0
