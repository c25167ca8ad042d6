"""The asyncio server over real sockets: framing rules, ordering, bad input, fuzzing.

Bad input closes only the offending connection; a second client keeps being served and
what is stored stays as it was.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_listener.errors import ErrorCode
from kafka_listener.messages import decode_response_frame, encode_request_frame
from kafka_listener.records import decode_batches, encode_batch
from kafka_listener.schemas import ApiKey
from mqcore.broker.types import OutgoingMessage

from .harness import RunningListener

METADATA_ALL = {"topics": None, "allow_auto_topic_creation": False}


class Client:
    """A blocking raw-socket Kafka client: frames out, frames in."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.next_id = 1

    def send(self, key: int, version: int, body: dict[str, Any]) -> int:
        cid = self.next_id
        self.next_id += 1
        self.sock.sendall(encode_request_frame(key, version, cid, body))
        return cid

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return struct.pack(">i", size) + self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def request(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        cid = self.send(key, version, body)
        got, reply = decode_response_frame(key, version, self.read_frame())
        assert got == cid
        return reply

    def closed_by_server(self, timeout_s: float = 10) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            return True
        return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningListener]:
    with RunningListener(Path(tmp_path_factory.mktemp("server"))) as r:
        assert r.broker is not None
        r.broker.admin.create_topic("t", read_queue_nums=2, write_queue_nums=2)
        r.broker.send("t", [OutgoingMessage(b"keep-%d" % i, queue_id=0) for i in range(5)])
        yield r


@pytest.fixture
def client(running: RunningListener) -> Iterator[Client]:
    c = Client(running.port)
    yield c
    c.close()


def eventually(check: Any, timeout_s: float = 10) -> bool:
    """Poll ``check()`` until it is true or the deadline passes (reput is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def fetch_body(partition: int, offset: int, wait_ms: int = 0) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def stored_values(client: Client) -> list[bytes | None]:
    reply = client.request(ApiKey.FETCH, 11, fetch_body(0, 0))
    records = reply["responses"][0]["partitions"][0]["records"]
    return [r.value for b in decode_batches(records) for r in b.records]


def test_api_versions_probe_above_table_gets_v0_error_then_works(client: Client) -> None:
    # kafka-python probes with v4 (flexible): header v2 with a tagged section, compact body.
    probe = struct.pack(">hhih", ApiKey.API_VERSIONS, 4, 77, 2) + b"kp" + b"\x00"
    body = b"\x03kp\x04v1\x00"
    client.sock.sendall(struct.pack(">i", len(probe + body)) + probe + body)
    cid, reply = decode_response_frame(ApiKey.API_VERSIONS, 0, client.read_frame())
    assert cid == 77 and reply["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    table = {k["api_key"]: (k["min_version"], k["max_version"]) for k in reply["api_keys"]}
    assert table[ApiKey.API_VERSIONS] == (0, 2) and table[ApiKey.FETCH] == (4, 11)
    assert table[ApiKey.SASL_HANDSHAKE] == (0, 1)  # offered: the default policy is optional
    assert client.request(ApiKey.API_VERSIONS, 2, {})["error_code"] == 0


def test_acks_zero_gets_no_reply_and_order_is_kept(client: Client, running) -> None:
    batch = encode_batch([(0, 1, None, b"zero", ())])
    produce = {
        "transactional_id": None,
        "acks": 0,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 1, "records": batch}]}],
    }
    ids = [
        client.send(ApiKey.METADATA, 5, METADATA_ALL),
        client.send(ApiKey.PRODUCE, 7, produce),
        client.send(ApiKey.METADATA, 5, METADATA_ALL),
    ]
    got = [decode_response_frame(ApiKey.METADATA, 5, client.read_frame())[0] for _ in range(2)]
    assert got == [ids[0], ids[2]]
    assert eventually(lambda: running.broker.store.max_offset("t", 1) >= 1)


def test_long_poll_does_not_block_other_connections(running: RunningListener) -> None:
    waiting, other = Client(running.port), Client(running.port)
    try:
        end = running.broker.store.max_offset("t", 1)
        waiting.send(ApiKey.FETCH, 11, fetch_body(1, end, wait_ms=5_000))
        started = time.monotonic()
        assert other.request(ApiKey.METADATA, 5, METADATA_ALL)["topics"]
        assert time.monotonic() - started < 2
        running.broker.send("t", [OutgoingMessage(b"wake", queue_id=1)])
        _, reply = decode_response_frame(ApiKey.FETCH, 11, waiting.read_frame())
        assert time.monotonic() - started < 2  # answered on arrival, not after max_wait_ms
        assert reply["responses"][0]["partitions"][0]["records"]
    finally:
        waiting.close()
        other.close()


def reframe(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


PRODUCE_EMPTY = {"transactional_id": None, "acks": 1, "timeout_ms": 1, "topic_data": []}


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 200 * 1024 * 1024),  # over socket.request.max.bytes
        struct.pack(">i", 3) + b"abc",  # shorter than a header
        struct.pack(">ihhi", 10, 99, 0, 1) + b"\x00\x00",  # unknown API key
        struct.pack(">ihhi", 10, ApiKey.FETCH, 3, 1) + b"\x00\x00",  # version below the table
        reframe(encode_request_frame(ApiKey.METADATA, 5, 1, METADATA_ALL)[4:] + b"\x01"),
        reframe(encode_request_frame(ApiKey.PRODUCE, 7, 1, PRODUCE_EMPTY)[4:-3]),  # truncated
    ],
)
def test_bad_frames_close_only_that_connection(data: bytes, running, client: Client) -> None:
    bad = Client(running.port)
    try:
        bad.sock.sendall(data)
        assert bad.closed_by_server()
    finally:
        bad.close()
    assert client.request(ApiKey.METADATA, 5, METADATA_ALL)["topics"]
    assert stored_values(client)[:5] == [b"keep-%d" % i for i in range(5)]


def _valid_frames() -> list[bytes]:
    batch = encode_batch([(0, 1, b"k", b"fuzz", (("h", b"v"),))])
    produce = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 1, "records": batch}]}],
    }
    return [
        encode_request_frame(ApiKey.METADATA, 5, 9, METADATA_ALL),
        encode_request_frame(ApiKey.PRODUCE, 7, 9, produce),
        encode_request_frame(ApiKey.FETCH, 11, 9, fetch_body(0, 0)),
        encode_request_frame(
            ApiKey.JOIN_GROUP,
            5,
            9,
            {
                "group_id": "fz",
                "session_timeout_ms": 6000,
                "rebalance_timeout_ms": 6000,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        ),
    ]


def _mutate(frame: bytes, flips: list[tuple[int, int]], cut: int) -> bytes:
    data = bytearray(frame)
    for pos, mask in flips:
        data[4 + pos % max(1, len(data) - 4)] ^= mask
    return bytes(data[: max(4, len(data) - cut)])


FRAMES = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda key, ver, body: struct.pack(">ihhih", 10 + len(body), key, ver, 1, -1) + body,
        st.integers(-2, 40),
        st.integers(-1, 12),
        st.binary(max_size=80),
    ),
    st.builds(
        _mutate,
        st.sampled_from(_valid_frames()),
        st.lists(st.tuples(st.integers(0, 500), st.integers(1, 255)), max_size=3),
        st.integers(0, 6),
    ),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(FRAMES)
def test_fuzzed_frames_never_disturb_other_clients(running, client: Client, data: bytes) -> None:
    bad = Client(running.port)
    try:
        bad.sock.sendall(data)
        bad.sock.shutdown(socket.SHUT_WR)  # EOF: the server finishes whatever it can, closes
        assert bad.closed_by_server(timeout_s=40)  # a mutated Fetch may wait up to 30 s
    finally:
        bad.close()
    reply = client.request(ApiKey.METADATA, 5, METADATA_ALL)
    assert [t["name"] for t in reply["topics"]] == ["t"]
    assert stored_values(client)[:5] == [b"keep-%d" % i for i in range(5)]
