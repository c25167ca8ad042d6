"""``GET /metrics`` of a real ``manage.py runbroker`` process over real sockets: the address
list from ``CAIRN_METRICS_ALLOW`` (a scrape from an allowed loopback address needs no token,
one from another is refused), a token scrape, the Kafka listener instrumented by
``runbroker`` (its requests and connections appear after a real client's produce), and the
live-trace WebSockets counted by the ASGI application ``runbroker`` serves."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import time
import warnings
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, wait_for_port
from tests.support.manage import broker_env, create_token, start_runbroker

with warnings.catch_warnings():  # kafka-python loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def get(port: int, source: str, token: str | None = None) -> tuple[int, str, str]:
    """``GET /metrics`` from the loopback address ``source``: status, content type, body."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=20, source_address=(source, 0)
    )
    headers = {"Authorization": f"Token {token}"} if token else {}
    try:
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        connection.close()


def open_websocket(port: int, token: str) -> socket.socket:
    """A live-trace WebSocket, opened with the handshake alone (RFC 6455 4.1): enough for
    the server to accept it, which is what the gauge counts."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /ws/trace/?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_runbroker_serves_metrics_to_allowed_addresses_and_tokens(tmp_path: Path) -> None:
    http_port, kafka_port = free_port(), free_port()
    env = broker_env(tmp_path, http_port, kafka_port, CAIRN_METRICS_ALLOW="127.0.0.2")
    proc = start_runbroker(env)
    try:
        wait_for_port(http_port, 60, proc)
        wait_for_port(kafka_port, 30, proc)

        status, kind, body = get(http_port, "127.0.0.1")
        assert (status, kind) == (401, "application/problem+json"), body
        assert json.loads(body)["status"] == 401 and "cairn_" not in body

        status, kind, body = get(http_port, "127.0.0.2")  # allowed: no token needed
        assert status == 200 and kind.startswith("text/plain"), body
        found = samples(body)
        assert found[("cairn_up", frozenset())] == 1
        assert found[("cairn_kafka_connections", frozenset())] == 0  # runbroker watches it

        bootstrap = f"127.0.0.1:{kafka_port}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic("metrics-e2e", 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        for _ in range(3):
            producer.send("metrics-e2e", b"x").get(20)
        producer.close()
    except Exception:
        proc.send_signal(signal.SIGTERM)
        print(proc.communicate(timeout=30)[0].decode())
        raise
    token = create_token(env, "prometheus", "viewer")
    try:
        deadline = time.monotonic() + 10
        while True:
            status, _, body = get(http_port, "127.0.0.1", token)
            assert status == 200, body
            found = samples(body)
            if found.get(("cairn_kafka_connections", frozenset()), -1) == 0:
                break
            assert time.monotonic() < deadline, "the producer's connections stay counted"
            time.sleep(0.05)
        produce = ("cairn_kafka_request_duration_seconds_count", frozenset({("api", "Produce")}))
        assert found[produce] == 3
        scrapes = frozenset({("handler", "metrics"), ("method", "GET"), ("code", "200")})
        assert found[("cairn_http_requests_total", scrapes)] >= 1
        refused = frozenset({("handler", "metrics"), ("method", "GET"), ("code", "401")})
        assert found[("cairn_http_requests_total", refused)] == 1

        websockets = ("cairn_websocket_connections", frozenset())
        assert found[websockets] == 0
        trace = open_websocket(http_port, token)
        assert samples(get(http_port, "127.0.0.2")[2])[websockets] == 1
        trace.close()
        deadline = time.monotonic() + 10
        while samples(get(http_port, "127.0.0.2")[2])[websockets] != 0:
            assert time.monotonic() < deadline, "a closed WebSocket stays counted"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()
