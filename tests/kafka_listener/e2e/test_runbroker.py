"""``manage.py runbroker`` with the Kafka listener on: Kafka clients and the REST API share
one store (a Kafka-produced message is found over REST by its key, a REST-sent message is
consumed by a Kafka client), and the listener closes cleanly with the process."""

from __future__ import annotations

import http.cookiejar
import json
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port, wait_for_port
from tests.support.manage import broker_env, start_runbroker

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class Rest:
    """A logged-in REST session (session cookie + CSRF header, as the console does)."""

    def __init__(self, base: str, user: str, password: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.call("POST", "/api/v1/auth/login", {"username": user, "password": password})

    def call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Content-Type": "application/json"}
        csrf = next((c.value for c in self.jar if c.name == "csrftoken"), None)
        if csrf:
            headers["X-CSRFToken"] = csrf
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data, headers, method=method)
        with self.opener.open(request, timeout=10) as response:
            return json.load(response)


def test_kafka_and_rest_share_the_store(tmp_path: Path) -> None:
    http_port, kafka_port = free_port(), free_port()
    proc = start_runbroker(broker_env(tmp_path, http_port, kafka_port))
    bootstrap = f"127.0.0.1:{kafka_port}"
    early = ""
    try:
        wait_for_port(http_port, 60, proc)
        wait_for_port(kafka_port, 30, proc)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic("shop.orders", 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        producer.send(
            "shop.orders", key=b"order-42", value=b"from kafka", headers=[("origin", b"kafka")]
        ).get(10)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        tp = TopicPartition("shop.orders", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got += records
        assert [(r.key, r.value) for r in got] == [(b"order-42", b"from kafka")]
        early = _read_until_kafka_line(proc)
        # The first start's admin password is in the data dir (never printed).
        password = (tmp_path / "first-admin-password").read_text().strip()
        _rest_cross_check(f"http://127.0.0.1:{http_port}", password, consumer, tp)
        consumer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    text = early + out.decode()
    assert proc.returncode == 0, text
    assert f"Kafka clients: 127.0.0.1:{kafka_port}" in text
    assert "Cairn broker stopped." in text


def _read_until_kafka_line(proc: subprocess.Popen[bytes]) -> str:
    """stdout up to the "Kafka clients:" line."""
    assert proc.stdout is not None
    seen = b""
    while b"Kafka clients:" not in seen:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    return seen.decode()


def _rest_cross_check(base: str, password: str, consumer: KafkaConsumer, tp: Any) -> None:
    rest = Rest(base, "admin", password)
    topic = urllib.parse.quote("shop|orders", safe="")
    by_key = rest.call("GET", f"/api/v1/topics/{topic}/messages?key=order-42")
    (found,) = by_key["messages"]
    assert found["keys"] == ["order-42"] and found["properties"]["origin"] == "kafka"
    rest.call(
        "POST",
        f"/api/v1/topics/{topic}/messages",
        {"messages": [{"body": "from rest", "keys": ["rest-1"], "queue_id": 0}]},
    )
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got += records
    assert [(r.offset, r.key, r.value) for r in got] == [(1, b"rest-1", b"from rest")]


def test_busy_kafka_port_is_reported_and_http_keeps_serving(tmp_path: Path) -> None:
    import socket

    http_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        kafka_port = taken.getsockname()[1]
        proc = start_runbroker(broker_env(tmp_path, http_port, kafka_port))
        try:
            wait_for_port(http_port, 60, proc)
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=10) as r:
                assert json.load(r)["status"] == "ok"
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
    text = out.decode()
    assert proc.returncode == 0, text
    assert f"Kafka listener NOT started: cannot listen on 127.0.0.1:{kafka_port}" in text


def test_advertised_address_comes_from_the_environment(tmp_path: Path) -> None:
    import socket
    import struct

    from kafka_listener.messages import decode_response_frame, encode_request_frame
    from kafka_listener.schemas import ApiKey

    http_port, kafka_port = free_port(), free_port()
    env = broker_env(
        tmp_path,
        http_port,
        kafka_port,
        CAIRN_KAFKA_ADVERTISED_HOST="kafka.example.test",
        CAIRN_KAFKA_ADVERTISED_PORT="19092",
    )
    proc = start_runbroker(env)

    def ask(sock: socket.socket, key: int, version: int, body: dict[str, Any]) -> Any:
        sock.sendall(encode_request_frame(key, version, 7, body))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "connection closed"
            data += chunk
        return decode_response_frame(key, version, data)[1]

    try:
        wait_for_port(kafka_port, 60, proc)
        with socket.create_connection(("127.0.0.1", kafka_port), timeout=10) as sock:
            metadata = ask(sock, ApiKey.METADATA, 1, {"topics": None})
            coordinator = ask(sock, ApiKey.FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert [(b["host"], b["port"]) for b in metadata["brokers"]] == [("kafka.example.test", 19092)]
    assert (coordinator["host"], coordinator["port"]) == ("kafka.example.test", 19092)
    text = out.decode()
    assert proc.returncode == 0, text
    assert (
        f"127.0.0.1:{kafka_port} (plaintext, auth optional), advertised as kafka.example.test:19092"
        in text
    )


def test_a_public_kafka_listener_without_auth_is_refused(tmp_path: Path) -> None:
    # Refused before anything binds: nothing is ever sent to the wildcard address.
    env = broker_env(
        tmp_path, free_port(), free_port(), CAIRN_KAFKA_HOST="0.0.0.0", CAIRN_KAFKA_AUTH="optional"
    )
    proc = start_runbroker(env)
    out, _ = proc.communicate(timeout=60)
    text = out.decode()
    assert proc.returncode != 0
    assert "CAIRN_KAFKA_AUTH=optional would let anyone reaching 0.0.0.0" in text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1


def test_kafka_over_tls_from_the_certificate_settings(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException, Producer

    from tests.support.certificates import TestCA

    ca = TestCA(tmp_path / "ca")
    files = ca.server("127.0.0.1")
    http_port, kafka_port = free_port(), free_port()
    env = broker_env(
        tmp_path / "data",
        http_port,
        kafka_port,
        CAIRN_TLS_CERT=str(files.cert),
        CAIRN_TLS_KEY=str(files.key),
        CAIRN_TLS_CA=str(ca.path),
        CAIRN_KAFKA_AUTH="required",
    )
    proc = start_runbroker(env)
    try:
        wait_for_port(kafka_port, 60, proc)
        text = _read_until_kafka_line(proc)
        password = (tmp_path / "data" / "first-admin-password").read_text().strip()
        secure = {"bootstrap.servers": f"127.0.0.1:{kafka_port}", "ssl.ca.location": str(ca.path)}
        # The first admin logs in with SCRAM over TLS against the accounts database.
        for mechanism in ("SCRAM-SHA-512", "PLAIN"):
            admin = Producer({**secure, "security.protocol": "sasl_ssl", "sasl.mechanism": mechanism,
                              "sasl.username": "admin", "sasl.password": password})  # fmt: skip
            assert admin.list_topics(timeout=20).brokers
            del admin
        wrong = Producer({**secure, "security.protocol": "sasl_ssl",
                          "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "admin",
                          "sasl.password": "not it"})  # fmt: skip
        with pytest.raises(KafkaException):
            wrong.list_topics(timeout=2)
        anonymous = Producer({**secure, "security.protocol": "ssl"})
        with pytest.raises(KafkaException):  # required: TLS alone is not a login
            anonymous.list_topics(timeout=2)
        plain = Producer({"bootstrap.servers": f"127.0.0.1:{kafka_port}"})
        with pytest.raises(KafkaException):
            plain.list_topics(timeout=2)
        del wrong, anonymous, plain
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert f"Kafka clients: 127.0.0.1:{kafka_port} (TLS, auth required)" in text
