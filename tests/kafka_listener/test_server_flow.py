"""The listener's caps over real sockets: buffered request bytes (connections paused, then
resumed, never closed for it) and idle connections (closed after ``idle_ms``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import ListenerConfig
from kafka_listener.messages import decode_response_frame
from kafka_listener.schemas import ApiKey

from .e2e.broker_process import LargeProduce
from .harness import RunningListener
from .test_server import METADATA_ALL, Client, fetch_body

MIB = 1024 * 1024
CAP = 8 * MIB
FRAME_RECORDS = 6 * MIB


def listener(root: Path, config: ListenerConfig) -> Iterator[RunningListener]:
    with RunningListener(root, config) as r:
        assert r.broker is not None
        r.broker.admin.create_topic("t", read_queue_nums=1, write_queue_nums=1)
        yield r


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[RunningListener]:
    yield from listener(tmp_path, ListenerConfig(port=0, max_buffered_bytes=CAP))


@pytest.fixture
def idle_400ms(tmp_path: Path) -> Iterator[RunningListener]:
    yield from listener(tmp_path, ListenerConfig(port=0, idle_ms=400))


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    made: list[Client] = []
    yield made
    for client in made:
        client.close()


def budget_state(running: RunningListener) -> tuple[int, int]:
    assert running.listener is not None
    budget = running.listener.budget

    async def read() -> tuple[int, int]:
        return budget.total, budget.paused_count

    return running.call(read)


def wait_until(check, timeout_s: float = 20) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.02)


def test_connections_over_the_cap_are_paused_then_resumed(
    capped: RunningListener, clients: list[Client]
) -> None:
    running = capped
    clients += [Client(running.port) for _ in range(5)]
    # Produce requests of ~6 MiB (a batch over the 4 MiB limit: answered with
    # MESSAGE_TOO_LARGE once the whole frame has arrived): all but the last MiB
    frames = [LargeProduce("t", i + 1, FRAME_RECORDS) for i in range(5)]
    head = frames[0].length - MIB
    senders = [
        threading.Thread(target=f.send, args=(c.sock, 0, head), daemon=True)
        for c, f in zip(clients, frames, strict=True)
    ]
    for sender in senders:
        sender.start()
    # 5 x 5 MiB of partial frames wanted in; over the cap, all but one adder pause
    wait_until(lambda: budget_state(running)[1] >= 3)
    time.sleep(0.5)  # what would come in if the paused ones were still read
    total, paused = budget_state(running)
    assert paused >= 3
    assert total <= CAP + frames[0].length + 5 * MIB, total  # cap + one frame + a read each
    for client, frame in zip(clients, frames, strict=True):
        client.sock.settimeout(30)
        rest = (client.sock, head, frame.length)
        threading.Thread(target=frame.send, args=rest, daemon=True).start()
    for i, client in enumerate(clients):  # every one resumed and was answered
        cid, reply = decode_response_frame(ApiKey.PRODUCE, 7, client.read_frame())
        partition = reply["responses"][0]["partition_responses"][0]
        assert (cid, partition["error_code"]) == (i + 1, ErrorCode.MESSAGE_TOO_LARGE)
    assert budget_state(running) == (0, 0)


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(
    idle_400ms: RunningListener, clients: list[Client], caplog: pytest.LogCaptureFixture
) -> None:
    running = idle_400ms
    caplog.set_level(logging.INFO, logger="kafka_listener.server")
    clients += [Client(running.port) for _ in range(3)]
    idle, chatty, waiting = clients
    for client in (idle, chatty, waiting):
        client.request(ApiKey.METADATA, 1, METADATA_ALL)
    cid = waiting.send(ApiKey.FETCH, 11, fetch_body(0, 0, wait_ms=1_500))  # longer than idle
    started = time.monotonic()
    for _ in range(12):  # a request every 100 ms for 1.2 s
        chatty.request(ApiKey.METADATA, 1, METADATA_ALL)
        time.sleep(0.1)
    got, _reply = decode_response_frame(ApiKey.FETCH, 11, waiting.read_frame())
    assert got == cid and time.monotonic() - started >= 1.4  # answered after its long poll
    assert idle.closed_by_server(timeout_s=5)
    assert chatty.request(ApiKey.METADATA, 1, METADATA_ALL)["brokers"]
    assert "closing idle Kafka connection" in caplog.text and "400 ms" in caplog.text
