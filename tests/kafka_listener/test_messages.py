"""Messages: headers, frames and golden bytes.

Golden frames are hand-built from the byte layouts of kafka-protocol.md (sections 1.2,
2.3-2.9, 3.4), field by field, and commented so each byte can be checked against it.
"""

from __future__ import annotations

from typing import Any

import pytest

from kafka_listener import records
from kafka_listener.messages import (
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    decode_response_frame,
    encode_request,
    encode_request_frame,
    encode_request_header,
    encode_response,
    encode_response_header,
)
from kafka_listener.primitives import Reader
from kafka_listener.schemas import (
    ApiKey,
    schema_for,
)
from mqcore.errors import RemoteProtocolError

from .golden import SPEC_BATCH, h, text


def test_header_versions() -> None:
    api_versions = schema_for(ApiKey.API_VERSIONS)
    assert api_versions.request_header_version(2) == 1
    assert api_versions.request_header_version(3) == 2
    assert api_versions.response_header_version(3) == 0  # always v0 for ApiVersions
    fetch = schema_for(ApiKey.FETCH)
    assert fetch.response_header_version(11) == 0
    assert fetch.response_header_version(12) == 1
    assert schema_for(ApiKey.SASL_HANDSHAKE).request_header_version(1) == 1
    assert encode_response_header(7, 0) == h("00000007")
    assert encode_response_header(7, 1) == h("00000007 00")


# -- golden request frames ---------------------------------------------------------------


def test_golden_api_versions_v0_request() -> None:
    # aiokafka's first request: size 18 | key 18 | v0 | corr 1 | client_id "aiokafka".
    frame = h("00000012 0012 0000 00000001 0008" + text("aiokafka"))
    r = Reader(frame)
    assert r.int32() == r.remaining()
    assert decode_request_header(r) == RequestHeader(18, 0, 1, "aiokafka")
    assert decode_request(18, 0, r) == {"client_software_name": "", "client_software_version": ""}
    assert encode_request_frame(18, 0, 1, {}, client_id="aiokafka") == frame


def test_golden_api_versions_v3_request_header_v2() -> None:
    # librdkafka's probe: header v2 = classic int16 client_id + empty tagged section;
    # body = compact strings + tagged section.
    frame = h(
        "00000025"  # size 37 = header 18 + body 19
        "0012 0003 00000002"  # ApiVersions v3, correlation 2
        "0007" + text("rdkafka") + "00"  # client_id (int16 length!), no tagged fields
        "0b" + text("librdkafka") + "07" + text("2.16.0") + "00"
    )
    r = Reader(frame)
    assert r.int32() == r.remaining()
    assert decode_request_header(r) == RequestHeader(18, 3, 2, "rdkafka")
    body = {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}
    assert decode_request(18, 3, r) == body
    assert encode_request_frame(18, 3, 2, body, client_id="rdkafka") == frame


def test_golden_metadata_requests() -> None:
    # v5: topics null (= all), allow_auto_topic_creation true.
    assert decode_request(3, 5, h("ffffffff 01")) == {
        "topics": None,
        "allow_auto_topic_creation": True,
    }
    # v0: one topic "t"; no auto-create flag on the wire (default true).
    assert decode_request(3, 0, h("00000001 0001 74")) == {
        "topics": [{"name": "t"}],
        "allow_auto_topic_creation": True,
    }
    with pytest.raises(RemoteProtocolError):
        decode_request(3, 0, h("ffffffff"))  # null array is not allowed in v0


def test_golden_produce_v7_request_with_spec_batch() -> None:
    body = (
        h(
            "ffff"  # transactional_id null
            "ffff"  # acks -1
            "00007530"  # timeout_ms 30000
            "00000001 0005" + text("topic") + "00000001"  # one topic, one partition
            "00000000"  # partition index 0
            "00000056"  # records: 86 bytes
        )
        + SPEC_BATCH
    )
    request = decode_request(0, 7, body)
    assert request["acks"] == -1 and request["transactional_id"] is None
    partition = request["topic_data"][0]["partition_data"][0]
    assert request["topic_data"][0]["name"] == "topic"
    batch = records.decode_batch(partition["records"])
    assert [(r.key, r.value, tuple(r.headers)) for r in batch.records] == [
        (b"k", b"v", (("h", b"x"),)),
        (None, b"hello", ()),
    ]
    assert encode_request(0, 7, request) == body


def test_golden_fetch_v11_request() -> None:
    body = h(
        "ffffffff 000001f4 00000001 03200000"  # replica -1, max_wait 500, min 1, max 50 MiB
        "00 00000000 ffffffff"  # isolation 0, session 0, epoch -1
        "00000001 0001 74 00000001"  # topic "t", one partition
        "00000000 ffffffff 0000000000000005 ffffffffffffffff 00100000"
        "00000000"  # forgotten_topics_data []
        "0000"  # rack_id ""
    )
    request = decode_request(1, 11, body)
    assert request["topics"] == [
        {
            "topic": "t",
            "partitions": [
                {
                    "partition": 0,
                    "current_leader_epoch": -1,
                    "fetch_offset": 5,
                    "log_start_offset": -1,
                    "partition_max_bytes": 1 << 20,
                }
            ],
        }
    ]
    assert (request["session_id"], request["session_epoch"], request["rack_id"]) == (0, -1, "")
    assert encode_request(1, 11, request) == body


# -- golden responses --------------------------------------------------------------------


def test_golden_produce_v7_response() -> None:
    response = {
        "responses": [
            {
                "name": "topic",
                "partition_responses": [
                    {"index": 0, "error_code": 0, "base_offset": 42, "log_start_offset": 0}
                ],
            }
        ],
        "throttle_time_ms": 0,
    }
    assert (
        encode_response(0, 7, response)
        == h(
            "00000001 0005" + text("topic") + "00000001"
            "00000000 0000 000000000000002a"  # index, error, base_offset 42
            "ffffffffffffffff 0000000000000000"  # log_append_time -1 (default), log_start 0
            "00000000"  # throttle_time_ms LAST
        )
    )


def test_golden_join_group_v5_member_id_required() -> None:
    response = {"error_code": 79, "member_id": "m-1"}
    assert encode_response(11, 5, response) == h(
        "00000000 004f ffffffff"  # throttle 0, error 79, generation -1 (default)
        "0000 0000 0003" + text("m-1") + "00000000"  # protocol "", leader "", member, []
    )


def test_golden_api_versions_v3_response_with_tagged_field() -> None:
    response: dict[str, Any] = {
        "error_code": 0,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
        "throttle_time_ms": 0,
    }
    plain = h("0000 02 0012 0000 0003 00 00000000 00")
    assert encode_response(18, 3, response) == plain
    tagged = encode_response(18, 3, {**response, "finalized_features_epoch": 5})
    assert tagged == h("0000 02 0012 0000 0003 00 00000000 01 01 08 0000000000000005")
    assert decode_response(18, 3, tagged)["finalized_features_epoch"] == 5
    # An unknown tag (9) is skipped.
    unknown = h("0000 02 0012 0000 0003 00 00000000 01 09 02 abcd")
    assert decode_response(18, 3, unknown)["finalized_features_epoch"] == -1


def test_response_frame_helpers() -> None:
    frame = encode_response_header(9, 0) + encode_response(12, 3, {"error_code": 27})
    full = len(frame).to_bytes(4, "big") + frame
    assert decode_response_frame(12, 3, full) == (9, {"throttle_time_ms": 0, "error_code": 27})
    with pytest.raises(RemoteProtocolError):
        decode_response_frame(12, 3, full[:-1])
    header = RequestHeader(3, 5, 1, None)
    assert encode_request_header(header) == h("0003 0005 00000001 ffff")
