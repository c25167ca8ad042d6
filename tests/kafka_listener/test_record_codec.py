"""Records section encode/decode: layouts and the checks that guard the hot loop."""

from __future__ import annotations

import pytest

from kafka_listener.errors import ErrorCode
from kafka_listener.record_codec import Record, decode_records_section, encode_records
from mqcore.errors import RemoteProtocolError

from .golden import h

# The two records of kafka-protocol.md section 3.4, base timestamp 1700000000000.
SECTION = h("18 00 00 00 02 6b 02 76 02 02 68 02 78  16 00 0a 02 01 0a 68656c6c6f 00")
RECORDS = [
    Record(0, 1700000000000, b"k", b"v", (("h", b"x"),)),
    Record(1, 1700000000005, None, b"hello", ()),
]


def test_spec_records_section() -> None:
    assert encode_records(RECORDS, 1700000000000) == SECTION
    assert decode_records_section(SECTION, 2, 1700000000000) == RECORDS


def test_plain_tuples_encode_like_records() -> None:
    plain = [tuple(r) for r in RECORDS]
    assert encode_records(plain, 1700000000000) == SECTION  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("section", "count"),
    [
        (SECTION, 3),  # fewer records than records_count
        (SECTION, 1),  # bytes left after the last record
        (SECTION, -1),
        (SECTION[:-1], 2),  # truncated
        (h("0c 00 00 00 03 00 00 00"), 1),  # key length -2
        (h("0c 00 00 00 01 03 00 00"), 1),  # value length -2
        (h("0c 00 00 00 01 01 03 00"), 1),  # header count -2
        (h("08 00 00 00 01 01 00"), 1),  # length says 4, fields take 6
        (h("02 00"), 1),  # length 1: shorter than any record
        (h("0e 00 00 00 01 01 02 03 00"), 1),  # header key length -2
        (h("0e 00 00 00 01 01 02 00 03"), 1),  # header value length -2
        (h("0c 00 ff ff ff ff ff ff ff ff ff ff 01"), 1),  # varlong longer than 10 bytes
        (h("10 00 00 00 01 01 00 ff"), 1),  # record runs past the section
    ],
)
def test_malformed_sections_are_corrupt(section: bytes, count: int) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_records_section(section, count, 0)
    assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_null_key_value_and_null_header_value() -> None:
    records = [Record(0, 0, None, None, (("a", None),))]
    section = encode_records(records, 0)
    assert section == h("12 00 00 00 01 01 02 02 61 01")  # length 9
    assert decode_records_section(section, 1, 0) == records
