"""KafkaServerConnection: ordering, acks=0, ApiVersions probes, guards, fuzzing.

``Client`` plays the h11 ``ConnectionPair`` role: it encodes requests with the same
schemas a client would use and decodes what the server connection sends back.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_listener.connection import ConnectionClosed, KafkaServerConnection, RequestReceived
from kafka_listener.messages import (
    RequestHeader,
    decode_response,
    decode_response_frame,
    encode_request,
    encode_request_frame,
    encode_request_header,
)
from kafka_listener.messages import (
    frame as size_prefixed,
)
from kafka_listener.primitives import Reader
from kafka_listener.records import encode_batch
from kafka_listener.schemas import API_VERSIONS_TABLE, SCHEMAS
from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .golden import h, text
from .strategies import struct_strategy

PRODUCE_BATCH = encode_batch([(0, 1, b"k", b"v", ())])


def produce(acks: int) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": PRODUCE_BATCH}]}],
    }


def heartbeat_reply(error_code: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": error_code}


def split_frames(data: bytes) -> list[bytes]:
    frames = []
    pos = 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        frames.append(data[pos : pos + 4 + size])
        pos += 4 + size
    return frames


def correlation_ids(data: bytes) -> list[int]:
    return [struct.unpack_from(">i", f, 4)[0] for f in split_frames(data)]


def heartbeat(correlation_id: int) -> bytes:
    return encode_request_frame(
        12, 3, correlation_id, {"group_id": "g", "generation_id": 1, "member_id": "m"}
    )


def test_request_event_fields() -> None:
    conn = KafkaServerConnection()
    frame = encode_request_frame(3, 5, 7, {"topics": None}, client_id="me")
    [event] = conn.receive_data(frame)
    assert event == RequestReceived(
        7, 3, 5, "me", {"topics": None, "allow_auto_topic_creation": True}, True, len(frame) - 4
    )


def test_buffered_bytes_count_the_incomplete_frame_only() -> None:
    conn = KafkaServerConnection()
    second = heartbeat(2)
    assert len(conn.receive_data(heartbeat(1) + second[:10])) == 1
    assert conn.buffered_bytes == 10
    assert len(conn.receive_data(second[10:])) == 1
    assert conn.buffered_bytes == 0


def test_responses_leave_in_request_order() -> None:
    conn = KafkaServerConnection()
    events = conn.receive_data(heartbeat(1) + heartbeat(2) + heartbeat(3))
    assert [e.correlation_id for e in events if isinstance(e, RequestReceived)] == [1, 2, 3]
    conn.send_response(3, heartbeat_reply(3))
    conn.send_response(2, heartbeat_reply(2))
    assert conn.data_to_send() == b""  # 1 is still pending: nothing may leave
    assert conn.in_flight == 3
    conn.send_response(1, heartbeat_reply(1))
    out = conn.data_to_send()
    assert correlation_ids(out) == [1, 2, 3]
    for frame, expected in zip(split_frames(out), (1, 2, 3), strict=True):
        assert decode_response_frame(12, 3, frame) == (expected, heartbeat_reply(expected))
    assert conn.in_flight == 0 and conn.data_to_send() == b""


def test_acks_zero_produce_gets_no_response_but_keeps_order() -> None:
    conn = KafkaServerConnection()
    events = conn.receive_data(
        heartbeat(1) + encode_request_frame(0, 7, 2, produce(0)) + heartbeat(3)
    )
    assert [e.expects_response for e in events if isinstance(e, RequestReceived)] == [
        True,
        False,
        True,
    ]
    with pytest.raises(LocalProtocolError):
        conn.send_response(2, {"responses": []})
    conn.send_response(3, heartbeat_reply(0))
    conn.send_response(1, heartbeat_reply(0))
    assert correlation_ids(conn.data_to_send()) == [1]  # 3 waits for the acks=0 slot
    conn.no_response(2)
    assert correlation_ids(conn.data_to_send()) == [3]
    with pytest.raises(LocalProtocolError):
        conn.no_response(2)


def test_acks_one_produce_response_uses_request_version() -> None:
    conn = KafkaServerConnection()
    [event] = conn.receive_data(encode_request_frame(0, 5, 9, produce(1)))
    assert isinstance(event, RequestReceived) and event.expects_response
    partition = event.request["topic_data"][0]["partition_data"][0]
    assert partition["records"] == PRODUCE_BATCH
    reply = {"responses": [{"name": "t", "partition_responses": [{"index": 0}]}]}
    conn.send_response(9, reply)
    _, body = decode_response_frame(0, 5, conn.data_to_send())
    assert body["responses"][0]["partition_responses"][0]["log_start_offset"] == -1


def expected_v0_error_reply(correlation_id: int) -> bytes:
    """Hand-built: header v0 | error 35 | api_keys array of the whole table as advertised
    (Produce from v0, issue 21; v0 layout: no throttle_time_ms)."""
    entries = "".join(
        f"{key:04x}{lo if key else 0:04x}{hi:04x}"
        for key, (lo, hi) in sorted(API_VERSIONS_TABLE.items())
    )
    body = f"{correlation_id:08x} 0023 {len(API_VERSIONS_TABLE):08x} {entries}"
    payload = h(body)
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("version", [3, 4, 200])
def test_api_versions_probe_above_table_gets_v0_error_reply(version: int) -> None:
    conn = KafkaServerConnection()
    # Body is whatever the client sends; it must not be parsed (here: garbage).
    header = h(f"0012 {version:04x} 0000002a 0007" + text("rdkafka") + "00")
    payload = header + b"\xff\xfe\xfd"
    events = conn.receive_data(struct.pack(">i", len(payload)) + payload)
    assert events == []
    out = conn.data_to_send()
    assert out == expected_v0_error_reply(42)
    _, body = decode_response_frame(18, 0, out)
    assert body["error_code"] == 35
    assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]} == (
        API_VERSIONS_TABLE | {0: (0, API_VERSIONS_TABLE[0][1])}
    )
    # The client then retries on the same connection with v2 (kafka-python) or v0.
    [event] = conn.receive_data(encode_request_frame(18, 2, 43, {}))
    assert isinstance(event, RequestReceived) and event.api_version == 2
    conn.send_response(43, conn.api_versions_response())
    _, body = decode_response_frame(18, 2, conn.data_to_send())
    assert body["error_code"] == 0 and body["throttle_time_ms"] == 0


def test_probe_reply_waits_for_earlier_responses() -> None:
    conn = KafkaServerConnection()
    conn.receive_data(heartbeat(1) + encode_request_frame(18, 3, 2, {}))
    assert conn.data_to_send() == b""
    conn.send_response(1, heartbeat_reply(0))
    assert correlation_ids(conn.data_to_send()) == [1, 2]


@pytest.mark.parametrize(
    ("api_key", "version", "code"),
    [(0, 2, 35), (0, 8, 35), (1, 12, 35), (23, 0, 42), (-1, 0, 42), (7, 0, 42)],
)
def test_unsupported_version_or_key_closes(api_key: int, version: int, code: int) -> None:
    conn = KafkaServerConnection()
    payload = struct.pack(">hhi", api_key, version, 5) + b"\xff\xff"
    with pytest.raises(RemoteProtocolError) as info:
        conn.receive_data(struct.pack(">i", len(payload)) + payload)
    assert info.value.error_code == code
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(heartbeat(6))  # dead afterwards


def test_restricted_table() -> None:
    table = {k: v for k, v in API_VERSIONS_TABLE.items() if k != 37}
    conn = KafkaServerConnection(supported=table)
    assert 37 not in {k["api_key"] for k in conn.api_versions_response()["api_keys"]}
    frame = encode_request_frame(37, 0, 1, {"topics": []})
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(frame)
    with pytest.raises(ValueError):
        KafkaServerConnection(supported={0: (0, 7)})  # no schema for Produce v0-2
    with pytest.raises(ValueError):
        KafkaServerConnection(supported={99: (0, 0)})


def test_oversized_frame_raises_before_buffering() -> None:
    conn = KafkaServerConnection(max_frame_bytes=1024)
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(struct.pack(">i", 1025))


def test_garbage_frames_raise_remote_protocol_error() -> None:
    for garbage in (
        b"\x00\x00\x00\x03abc",  # shorter than a request header
        b"\x00\x00\x00\x08\x00\x0c\x00\x03\x00\x00\x00\x01",  # heartbeat without a body
        b"GET / HTTP/1.1\r\n\r\n",  # size 0x47455420: over the limit
    ):
        conn = KafkaServerConnection(max_frame_bytes=1 << 20)
        with pytest.raises(RemoteProtocolError):
            conn.receive_data(garbage)


def test_eof_and_misuse() -> None:
    conn = KafkaServerConnection()
    assert conn.receive_data(heartbeat(1)[:5]) == []
    assert conn.receive_data(b"") == [ConnectionClosed(buffered_bytes=5)]
    assert conn.receive_data(b"") == []
    with pytest.raises(LocalProtocolError):
        conn.receive_data(b"x")
    with pytest.raises(LocalProtocolError):
        conn.send_response(1, heartbeat_reply(0))
    conn = KafkaServerConnection()
    conn.receive_data(heartbeat(1))
    with pytest.raises(LocalProtocolError):
        conn.send_response(1, {"error_code": "nope"})
    conn.send_response(1, heartbeat_reply(0))
    with pytest.raises(LocalProtocolError):
        conn.send_response(1, heartbeat_reply(0))  # already answered


def test_duplicate_in_flight_correlation_id_is_rejected() -> None:
    conn = KafkaServerConnection()
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(heartbeat(1) + heartbeat(1))
    conn = KafkaServerConnection()
    conn.receive_data(heartbeat(1))
    conn.send_response(1, heartbeat_reply(0))
    assert len(conn.receive_data(heartbeat(1))) == 1  # reuse after completion is fine


def test_byte_at_a_time() -> None:
    conn = KafkaServerConnection()
    stream = heartbeat(1) + encode_request_frame(18, 0, 2, {})
    events = []
    for i in range(len(stream)):
        events += conn.receive_data(stream[i : i + 1])
    assert [e.api_key for e in events if isinstance(e, RequestReceived)] == [12, 18]


def test_flexible_api_versions_v3_within_a_wider_table() -> None:
    conn = KafkaServerConnection(supported={18: (0, 3)})
    frame = encode_request_frame(18, 3, 1, {"client_software_name": "x"})
    [event] = conn.receive_data(frame)
    assert isinstance(event, RequestReceived)
    assert event.request["client_software_name"] == "x"
    conn.send_response(1, conn.api_versions_response())
    out = conn.data_to_send()
    r = Reader(out)
    assert r.int32() == r.remaining() and r.int32() == 1  # response header v0: no tags
    body = decode_response(18, 3, r)
    assert body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 3}]


# -- fuzzing -----------------------------------------------------------------------------

VERSIONED_KEYS = sorted(API_VERSIONS_TABLE)


@st.composite
def plausible_frames(draw: st.DrawFn) -> bytes:
    """Correctly sized frames with a real API key and version and a random body."""
    key = draw(st.sampled_from(VERSIONED_KEYS))
    lo, hi = API_VERSIONS_TABLE[key]
    version = draw(st.integers(lo - 1, hi + 2))
    payload = struct.pack(">hhi", key, version, draw(st.integers(0, 3)))
    payload += draw(st.binary(max_size=80))
    return struct.pack(">i", len(payload)) + payload


def feed_all(chunks: list[bytes]) -> None:
    conn = KafkaServerConnection(max_frame_bytes=4096)
    try:
        for chunk in chunks:
            for event in conn.receive_data(chunk):
                if isinstance(event, RequestReceived) and not event.expects_response:
                    conn.no_response(event.correlation_id)
            conn.data_to_send()
        conn.receive_data(b"")
    except RemoteProtocolError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=64), max_size=8))
def test_fuzz_random_bytes(chunks: list[bytes]) -> None:
    feed_all(chunks)


@settings(max_examples=600, deadline=None)
@given(st.lists(plausible_frames(), min_size=1, max_size=4))
def test_fuzz_plausible_frames(frames: list[bytes]) -> None:
    feed_all(frames)


@st.composite
def mutated_valid_frames(draw: st.DrawFn) -> bytes:
    """A valid request frame for an advertised API/version with one byte changed
    (outside the size prefix), so decoding runs deep into the body before failing."""
    key = draw(st.sampled_from(VERSIONED_KEYS))
    lo, hi = API_VERSIONS_TABLE[key]
    version = draw(st.integers(lo, hi))
    schema = SCHEMAS[key]
    value = draw(struct_strategy(schema.request, version, schema.is_flexible(version)))
    frame = bytearray(encode_request_frame(key, version, 1, value))
    position = draw(st.integers(4, len(frame) - 1))
    frame[position] ^= draw(st.integers(1, 255))
    return bytes(frame)


@settings(max_examples=600, deadline=None)
@given(mutated_valid_frames())
def test_fuzz_mutated_valid_frames(frame: bytes) -> None:
    feed_all([frame])


def test_produce_v0_to_v2_advertised_but_refused() -> None:
    """Produce is advertised from v0, so older librdkafka compresses (its check wants
    Produce v0 supported), and refused below v3 as Kafka 4 refuses it: the connection
    closes, as for any version outside the accepted table (issue 21)."""
    conn = KafkaServerConnection()
    [probe] = conn.receive_data(encode_request_frame(18, 2, 1, {}))
    conn.send_response(probe.correlation_id, conn.api_versions_response())
    _, body = decode_response_frame(18, 2, conn.data_to_send())
    table = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert table[0] == (0, 7)
    request = {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": []}
    [event] = conn.receive_data(encode_request_frame(0, 3, 2, request))
    assert isinstance(event, RequestReceived) and event.api_version == 3
    for version in (0, 1, 2):
        fresh = KafkaServerConnection()
        with pytest.raises(RemoteProtocolError) as info:
            header = encode_request_header(RequestHeader(0, version, 3, "rdkafka"))
            fresh.receive_data(size_prefixed(header + encode_request(0, 3, request)))
        assert info.value.error_code == 35
        assert f"Produce v{version} outside v3-v7" in str(info.value)
