"""Schemas: the advertised table, and generated round trips at every version."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_listener.messages import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kafka_listener.schemas import (
    API_VERSIONS_TABLE,
    OPTIONAL_APIS,
    SCHEMAS,
    advertised_versions,
)
from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .golden import h
from .strategies import expected_decoded, struct_strategy

# kafka-protocol.md section 2.1, copied by hand: (api key, min, max, flex from).
SPEC_TABLE = [
    (0, 3, 7, 9),
    (1, 4, 11, 12),
    (2, 1, 3, 6),
    (3, 0, 5, 9),
    (8, 2, 3, 8),
    (9, 1, 3, 6),
    (10, 0, 2, 3),
    (11, 0, 5, 6),
    (12, 0, 3, 4),
    (13, 0, 1, 4),
    (14, 0, 3, 4),
    (15, 0, 4, 5),
    (16, 0, 2, 3),
    (17, 0, 1, None),  # issue 18 widens SASL: v0 handshakes (bare tokens)
    (18, 0, 2, 3),
    (19, 0, 4, 5),
    (20, 0, 3, 4),
    (22, 0, 1, 2),
    (29, 0, 1, 2),
    (30, 0, 1, 2),
    (31, 0, 1, 2),
    (32, 0, 2, 4),
    (36, 0, 2, 2),  # and SaslAuthenticate v2 (flexible)
    (37, 0, 1, 2),
    (42, 0, 1, 2),  # issue 21: DeleteGroups
    (47, 0, 0, None),  # and OffsetDelete (never flexible)
]


def test_readme_lists_what_api_versions_advertises() -> None:
    """The README's "Supported APIs" paragraph names every API with the versions
    ApiVersions advertises (Produce from v0, issue 21), and no other."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    paragraph = readme.split("**Supported APIs**", 1)[1].split("\n\n", 1)[0]
    paragraph = " ".join(paragraph.split())
    listed = {
        name: (int(lo), int(hi or lo))
        for name, lo, hi in re.findall(r"\b([A-Z][A-Za-z]+) (\d+)(?:–(\d+))?(?![.\d])", paragraph)
    }
    advertised = {
        SCHEMAS[key].name: span for key, span in advertised_versions(API_VERSIONS_TABLE).items()
    }
    assert listed == advertised


def test_table_is_exactly_the_spec() -> None:
    assert {k: (lo, hi) for k, lo, hi, _ in SPEC_TABLE} == API_VERSIONS_TABLE
    for key, lo, hi, flex in SPEC_TABLE:
        schema = SCHEMAS[key]
        assert schema.flexible_from == flex
        assert schema.min_version <= lo <= hi <= schema.max_version
        if key != 36:  # SaslAuthenticate v2 is the one flexible version advertised
            assert not any(schema.is_flexible(v) for v in range(lo, hi + 1))
    assert OPTIONAL_APIS == {17, 36, 37}


CASES = [
    (key, version, response)
    for key, schema in sorted(SCHEMAS.items())
    for version in range(schema.min_version, schema.max_version + 1)
    for response in (False, True)
]


@pytest.mark.parametrize(
    ("api_key", "version", "response"),
    CASES,
    ids=[f"{SCHEMAS[k].name}-v{v}-{'resp' if r else 'req'}" for k, v, r in CASES],
)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_schema_roundtrip(api_key: int, version: int, response: bool, data: st.DataObject) -> None:
    schema = SCHEMAS[api_key]
    fields = schema.response if response else schema.request
    value = data.draw(struct_strategy(fields, version, schema.is_flexible(version)))
    encode = encode_response if response else encode_request
    decode = decode_response if response else decode_request
    wire = encode(api_key, version, value)
    decoded = decode(api_key, version, wire)
    assert decoded == expected_decoded(fields, version, value)
    assert encode(api_key, version, decoded) == wire


def test_missing_fields_take_defaults_and_absent_fields_are_filled() -> None:
    # JoinGroup v0 has no rebalance_timeout_ms / group_instance_id: decoding fills defaults.
    wire = encode_request(11, 0, {"group_id": "g", "session_timeout_ms": 10, "protocols": []})
    decoded = decode_request(11, 0, wire)
    assert decoded["rebalance_timeout_ms"] == -1
    assert decoded["group_instance_id"] is None
    assert decoded["member_id"] == "" and decoded["protocol_type"] == ""
    # Keys a version does not have are ignored when encoding.
    assert encode_request(11, 0, {**decoded, "group_instance_id": "x"}) == wire


def test_errors() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_request(99, 0, b"")
    assert info.value.error_code == 42
    with pytest.raises(RemoteProtocolError) as info:
        decode_request(0, 2, b"")
    assert info.value.error_code == 35
    with pytest.raises(RemoteProtocolError):
        decode_request(12, 0, h("0001 67 00000001"))  # truncated member_id
    with pytest.raises(RemoteProtocolError):
        decode_request(16, 0, b"\x00")  # trailing byte after an empty body
    assert decode_request(16, 0, b"\x00", strict=False) == {}
    with pytest.raises(LocalProtocolError):
        encode_response(12, 0, {"error_code": 1 << 20})
    with pytest.raises(LocalProtocolError):
        encode_response(16, 1, {"groups": [{"group_id": None}]})
    with pytest.raises(LocalProtocolError):
        encode_response(16, 1, {"groups": None})  # not nullable
    with pytest.raises(LocalProtocolError):
        encode_response(16, 1, {"groups": 5})
    with pytest.raises(LocalProtocolError):
        encode_response(16, 1, {"groups": [None]})
