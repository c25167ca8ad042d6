"""A real ``manage.py runbroker`` process to restart, kill -9 and measure, and a raw Kafka
client over the project's own codec (so a test controls producer ids, epochs and sequences
exactly, and can send the same batch twice)."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from kafka_listener.messages import decode_response_frame, encode_request_frame
from kafka_listener.records import decode_batches, encode_batch
from kafka_listener.schemas import ApiKey
from tests.support.manage import broker_env, start_runbroker
from tests.support.redis_server import free_port, wait_for_port

PRODUCE_V, FETCH_V, INIT_V, CREATE_V = 7, 11, 1, 4


class BrokerProcess:
    """``runbroker`` over ``data_dir`` on fixed ports (the same across restarts), its
    output appended to ``<data_dir>/broker.log``."""

    def __init__(self, data_dir: Path, **settings: str) -> None:
        self.data_dir = data_dir
        self.kafka_port = free_port()
        self.env = broker_env(data_dir, free_port(), self.kafka_port, **settings)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        data_dir.mkdir(parents=True, exist_ok=True)

    @property
    def store(self) -> Path:
        return self.data_dir / "store"

    @property
    def log_text(self) -> str:
        return (self.data_dir / "broker.log").read_text(errors="replace")

    def start(self) -> BrokerProcess:
        self._log = open(self.data_dir / "broker.log", "ab")  # noqa: SIM115 (closed in _reap)
        self.proc = start_runbroker(self.env, output=self._log)
        wait_for_port(self.kafka_port, 120, self.proc)
        return self

    def kill(self) -> None:
        """SIGKILL: no flush, no clean close."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def stop(self) -> int:
        """SIGTERM: a clean stop. Returns the exit code."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        return self._reap()

    def _reap(self) -> int:
        assert self.proc is not None
        code = self.proc.wait(60)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def status_kib(self, field: str) -> int:
        """A ``/proc/<pid>/status`` figure in KiB (``VmRSS``, ``VmHWM``: peak RSS)."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)


class RawClient:
    """A blocking Kafka client speaking through ``kafka_listener.messages``."""

    def __init__(self, port: int, timeout_s: float = 30) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.next_id = 1

    def send(self, key: int, version: int, body: dict[str, Any]) -> int:
        cid = self.next_id
        self.next_id += 1
        self.sock.sendall(encode_request_frame(key, version, cid, body))
        return cid

    def receive(self, key: int, version: int, cid: int) -> dict[str, Any]:
        size = struct.unpack(">i", self._exactly(4))[0]
        got, reply = decode_response_frame(
            key, version, struct.pack(">i", size) + self._exactly(size)
        )
        assert got == cid
        return reply

    def request(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.receive(key, version, self.send(key, version, body))

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()

    # -- the calls the tests make ----------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> None:
        topic = {
            "name": name,
            "num_partitions": partitions,
            "replication_factor": 1,
            "assignments": [],
            "configs": [],
        }
        body = {"topics": [topic], "timeout_ms": 10_000, "validate_only": False}
        reply = self.request(ApiKey.CREATE_TOPICS, CREATE_V, body)
        assert reply["topics"][0]["error_code"] == 0, reply

    def init_producer_id(self) -> tuple[int, int]:
        body = {"transactional_id": None, "transaction_timeout_ms": 60_000}
        reply = self.request(ApiKey.INIT_PRODUCER_ID, INIT_V, body)
        assert reply["error_code"] == 0
        return reply["producer_id"], reply["producer_epoch"]

    def send_produce(self, topic: str, partition: int, records: bytes) -> int:
        return self.send(ApiKey.PRODUCE, PRODUCE_V, produce_body(topic, partition, records))

    def produce_reply(self, cid: int) -> dict[str, Any]:
        reply = self.receive(ApiKey.PRODUCE, PRODUCE_V, cid)
        return dict(reply["responses"][0]["partition_responses"][0])

    def produce(self, topic: str, partition: int, records: bytes) -> dict[str, Any]:
        return self.produce_reply(self.send_produce(topic, partition, records))

    def fetch_all(self, topic: str, partition: int = 0) -> list[tuple[int, bytes | None]]:
        """``(offset, value)`` of every record of the partition."""
        out: list[tuple[int, bytes | None]] = []
        offset = 0
        while True:
            body = fetch_body(topic, partition, offset)
            reply = self.request(ApiKey.FETCH, FETCH_V, body)
            part = reply["responses"][0]["partitions"][0]
            assert part["error_code"] == 0, part
            got = [
                (b.header.base_offset + r.offset_delta, r.value)
                for b in decode_batches(part["records"] or b"")
                for r in b.records
            ]
            got = [(o, v) for o, v in got if o >= offset]
            if not got:
                return out
            out += got
            offset = got[-1][0] + 1


def produce_body(topic: str, partition: int, records: bytes) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 10_000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def fetch_body(topic: str, partition: int, offset: int) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 24,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 24,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


class LargeProduce:
    """A Produce request whose records are ``records_bytes`` zeros, sent in pieces without
    ever being built whole (the test process must not hold hundreds of MiB: other tests
    in it measure its peak RSS). Records are the request's last field, so the frame is a
    head (size, header, fields, records length) followed by the records."""

    CHUNK = bytes(1 << 20)

    def __init__(self, topic: str, correlation_id: int, records_bytes: int) -> None:
        empty = encode_request_frame(
            ApiKey.PRODUCE, PRODUCE_V, correlation_id, produce_body(topic, 0, b"")
        )
        assert empty.endswith(struct.pack(">i", 0))
        size = len(empty) - 4 + records_bytes
        self.head = struct.pack(">i", size) + empty[4:-4] + struct.pack(">i", records_bytes)
        self.length = 4 + size

    def send(self, sock: socket.socket, start: int, stop: int) -> None:
        """Send the frame's bytes ``start`` .. ``stop`` (blocks while the broker does not
        read)."""
        head = self.head
        if start < len(head):
            sock.sendall(head[start:stop])
            start = len(head)
        while start < stop:
            n = min(len(self.CHUNK), stop - start)
            sock.sendall(self.CHUNK[:n])
            start += n


def idempotent_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    now = int(time.time() * 1000)
    records = [(i, now, None, v, ()) for i, v in enumerate(values)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def connect(broker: BrokerProcess, timeout_s: float = 120) -> RawClient:
    """A client of the (re)started broker, once it accepts connections."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return RawClient(broker.kafka_port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


__all__ = [
    "BrokerProcess",
    "LargeProduce",
    "RawClient",
    "connect",
    "idempotent_batch",
]
