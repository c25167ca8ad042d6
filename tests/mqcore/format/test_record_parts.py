"""encode_record_parts, the CommitLog writer's batch encoder: same bytes and errors as
encode_record (split from test_record.py, which holds the layout and decoder tests)."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.errors import MessageIllegalError, ValidationError
from mqcore.format import record as F
from mqcore.format.msgid import HostAddress, encode_host
from mqcore.format.properties import encode_properties
from mqcore.format.record import (
    encode_record,
)
from tests.mqcore.format.test_record import _records, fields

# --- encode_record_parts: the CommitLog writer's batch encoder ----------------------------------


def _reference_record(values: dict[str, Any]) -> bytes:
    """An independent encoder, field by field from spec 1.2 (no caches, no shared Structs)."""
    born, store = encode_host(values["born_host"]), encode_host(values["store_host"])
    topic = values["topic"].encode()
    body, props = values["body"], values["properties"]
    v6 = (0x10 if len(born) == 20 else 0) | (0x20 if len(store) == 20 else 0)
    v2 = len(topic) > 127
    head = struct.pack(
        ">iiqqiq", values["queue_id"], values["flag"], values["queue_offset"],
        values["phys_offset"], (values["sys_flag"] & ~0x30) | v6, values["born_timestamp"],
    )  # fmt: skip
    rest = (
        born
        + struct.pack(">q", values["store_timestamp"])
        + store
        + struct.pack(
            ">iqi", values["reconsume_times"], values["prepared_transaction_offset"], len(body)
        )
        + body
        + struct.pack(">h" if v2 else ">b", len(topic))
        + topic
        + struct.pack(">h", len(props))
        + props
    )
    total = 12 + len(head) + len(rest)
    magic = F.MESSAGE_MAGIC_CODE_V2 if v2 else F.MESSAGE_MAGIC_CODE
    return struct.pack(">iii", total, magic, zlib.crc32(body) & 0x7FFFFFFF) + head + rest


def _parts_args(values: dict[str, Any]) -> list[Any]:
    names = [
        "topic", "queue_id", "flag", "queue_offset", "phys_offset", "sys_flag",
        "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
        "prepared_transaction_offset", "body", "properties",
    ]  # fmt: skip
    return [values[name] for name in names]


@given(st.lists(_records, min_size=1, max_size=4))
def test_record_parts_match_an_independent_encoder(batch: list[dict[str, Any]]) -> None:
    parts: list[bytes] = []
    expected = b""
    for values in batch:
        values = dict(values, properties=encode_properties(values["properties"]))
        try:
            reference = _reference_record(values)
        except struct.error:
            continue  # out-of-range fields: the error tests below cover them
        size = F.encode_record_parts(parts, *_parts_args(values))
        assert size == len(reference)
        assert encode_record(**values) == reference
        expected += reference
    assert b"".join(parts) == expected


def _error_of(values: dict[str, Any]) -> tuple[type[Exception], str, str]:
    parts: list[bytes] = []
    with pytest.raises((MessageIllegalError, ValidationError)) as info:
        F.encode_record_parts(parts, *_parts_args(values))
    assert parts == []  # nothing appended on an error
    err = info.value
    return type(err), getattr(err, "field", ""), getattr(err, "rule", "")


def test_record_parts_errors_and_their_order_with_warm_caches() -> None:
    big = b"x" * 32768
    cases = [
        (dict(topic="a\ud800", properties=big), ("topic", "utf8")),  # topic checked first
        (dict(topic="t" * 32768, properties=big), ("properties", "max_size")),  # then props
        (dict(topic="t" * 32768), ("topic", "max_length")),
        (dict(properties=big), ("properties", "max_size")),  # a cached topic, big props
        (dict(queue_id=2**31), ("record", "field_range")),
        (dict(born_host=HostAddress("nope", 1), properties=big), ("host", "ip_address")),
        (dict(store_host=HostAddress("10.0.0.1", 70000)), ("host", "port")),
    ]
    for _round in range(2):  # cold, then with the topic and host caches filled
        F.encode_record_parts([], *_parts_args(fields()))
        for overrides, (field, rule) in cases:
            _, got_field, got_rule = _error_of(fields(**overrides))
            assert (got_field, got_rule) == (field, rule), overrides
