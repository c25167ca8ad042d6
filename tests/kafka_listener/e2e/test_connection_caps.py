"""The Kafka listener's caps in a real broker process: buffered request bytes
(``CAIRN_KAFKA_MAX_BUFFERED_BYTES``: the broker's RSS stays bounded while several clients
send large frames slowly, and every client is served in the end) and idle connections
(``CAIRN_KAFKA_IDLE_MS``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kafka_listener.errors import ErrorCode
from kafka_listener.schemas import ApiKey

from .broker_process import BrokerProcess, LargeProduce, RawClient, connect

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MIB = 1024 * 1024
KIB_PER_MIB = 1024
CAP_MIB, FRAME_MIB, CONNECTIONS = 32, 40, 8
METADATA = {"topics": None, "allow_auto_topic_creation": False}


def test_large_partial_frames_stay_under_the_cap_and_are_all_served(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data", CAIRN_KAFKA_MAX_BUFFERED_BYTES=str(CAP_MIB * MIB)
    ).start()
    clients: list[RawClient] = []
    try:
        admin = connect(broker)
        admin.create_topic("big")
        admin.request(ApiKey.METADATA, 1, METADATA)
        baseline = broker.status_kib("VmRSS")
        clients += [connect(broker) for _ in range(CONNECTIONS)]
        # Produce requests of 40 MiB each (a batch over the 4 MiB limit: answered with
        # MESSAGE_TOO_LARGE once it has all arrived); all but the last MiB, slowly.
        frame = LargeProduce("big", 1, FRAME_MIB * MIB)
        head = frame.length - MIB
        senders = [
            threading.Thread(target=frame.send, args=(c.sock, 0, head), daemon=True)
            for c in clients
        ]
        for sender in senders:
            sender.start()
        time.sleep(4)  # everyone sent what it could: over the cap, the adders are paused
        stalled = sum(sender.is_alive() for sender in senders)
        peak_mib = (broker.status_kib("VmHWM") - baseline) / KIB_PER_MIB
        # 8 x 39 MiB wanted in (457 MiB of RSS without the cap). Held with it: the cap,
        # the frame let through (its buffer grown by reallocations, then its copy and its
        # decoded records when it completes) and each connection's stream buffer
        # (measured: 128 MiB while stalled, 170 MiB at the end).
        bound_mib = CAP_MIB + 4 * FRAME_MIB + 2 * CONNECTIONS + 16
        assert peak_mib < bound_mib, (peak_mib, bound_mib)
        assert stalled >= CONNECTIONS // 2, "the paused connections' sends did not block"

        for client in clients:
            rest = (client.sock, head, frame.length)
            threading.Thread(target=frame.send, args=rest, daemon=True).start()
        for client in clients:  # every connection resumed, was read whole and answered
            reply = client.produce_reply(1)
            assert reply["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        peak_mib = (broker.status_kib("VmHWM") - baseline) / KIB_PER_MIB
        assert peak_mib < bound_mib, (peak_mib, bound_mib)
        assert admin.request(ApiKey.METADATA, 1, METADATA)["brokers"]
        admin.close()
    finally:
        for client in clients:
            client.close()
        assert broker.stop() == 0
    assert "closing Kafka connection" not in broker.log_text  # paused, never closed


def test_an_idle_connection_is_closed_after_the_idle_time(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", CAIRN_KAFKA_IDLE_MS="1000").start()
    try:
        idle, busy = connect(broker), connect(broker)
        idle.request(ApiKey.METADATA, 1, METADATA)
        started = time.monotonic()
        for _ in range(10):  # a request every 300 ms: never idle
            busy.request(ApiKey.METADATA, 1, METADATA)
            time.sleep(0.3)
        idle.sock.settimeout(10)
        assert idle.sock.recv(1) == b""  # closed by the broker
        assert 1.0 <= time.monotonic() - started
        assert busy.request(ApiKey.METADATA, 1, METADATA)["brokers"]
        idle.close()
        busy.close()
    finally:
        assert broker.stop() == 0
    assert "closing idle Kafka connection" in broker.log_text
    assert "no request for 1000 ms" in broker.log_text
