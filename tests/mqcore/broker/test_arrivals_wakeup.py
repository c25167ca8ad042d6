"""The broker's long polls are woken through the store's arrivals listener (one call per
dispatch batch), so a broker registers no per-record listener and reput keeps its fast rows
path; the wake-up itself still comes from the notification, not from the periodic re-check."""

from __future__ import annotations

import threading
import time

from mqcore.broker import Broker, OutgoingMessage, PullResult, PullStatus
from tests.mqcore.broker.conftest import BrokerFactory

# Far below the pulls' 10 s wait and the 600 s re-check, so only the notification can meet
# it; loose enough for a loaded machine (test_long_poll.py holds the 50 ms latency budget).
WAKE_BUDGET_S = 2.0


def test_broker_listens_per_batch_not_per_record(broker: Broker) -> None:
    assert broker.store.listeners == []
    assert len(broker.store.arrivals_listeners) == 1
    broker.stop()
    assert broker.store.arrivals_listeners == []
    broker.start()
    assert len(broker.store.arrivals_listeners) == 1


def test_a_batch_wakes_each_waiting_queue_once(make_broker: BrokerFactory) -> None:
    # A re-check far beyond the test's budget: only the arrivals notification can wake.
    broker = make_broker(long_poll_recheck_ms=600_000)
    broker.admin.create_topic("Orders", read_queue_nums=4)
    results: dict[int, tuple[PullResult, float]] = {}

    def pull(queue_id: int) -> None:
        result = broker.pull("g", "Orders", queue_id, 0, wait_ms=10_000)
        results[queue_id] = (result, time.monotonic())

    threads = [threading.Thread(target=pull, args=(q,), daemon=True) for q in (1, 3)]
    for thread in threads:
        thread.start()
    tick = threading.Event()
    deadline = time.monotonic() + 5
    while broker.waiting_pulls < 2:
        assert time.monotonic() < deadline, "pulls did not park"
        tick.wait(0.0005)
    sent_at = time.monotonic()
    broker.send("Orders", [OutgoingMessage(b"a", queue_id=1), OutgoingMessage(b"b", queue_id=3)])
    broker.send("Orders", [OutgoingMessage(b"c", queue_id=2)])  # nobody waits there
    for thread in threads:
        thread.join(5)
    assert sorted(results) == [1, 3]
    for queue_id, body in ((1, b"a"), (3, b"b")):
        result, done_at = results[queue_id]
        assert result.status is PullStatus.FOUND
        assert [m.body for m in result.messages] == [body]
        assert done_at - sent_at < WAKE_BUDGET_S
    assert broker.waiting_pulls == 0
