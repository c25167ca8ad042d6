"""Record batch v2: spec vector, round trips with every codec, xerial snappy, CRC, errors."""

from __future__ import annotations

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_listener.compression import Compression
from kafka_listener.errors import ErrorCode
from kafka_listener.records import (
    CRC_START,
    HEADER_SIZE,
    Record,
    crc_of,
    decode_batch,
    decode_batches,
    encode_batch,
    patch_base_offset,
    set_log_append_time,
    split_batches,
    verify_crc,
)
from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .golden import SPEC_BATCH
from .strategies import record_lists

SPEC_RECORDS = [
    Record(0, 1700000000000, b"k", b"v", (("h", b"x"),)),
    Record(1, 1700000000005, None, b"hello", ()),
]


def test_crc32c_check_value() -> None:
    assert google_crc32c.value(b"123456789") == 0xE3069283
    assert crc_of(SPEC_BATCH) == 0x35B75E8C


def test_spec_vector_decodes_and_reencodes_byte_exact() -> None:
    batch = decode_batch(SPEC_BATCH)
    h = batch.header
    assert (h.base_offset, h.batch_length, h.magic, h.crc) == (0, 0x4A, 2, 0x35B75E8C)
    assert (h.last_offset_delta, h.records_count, h.next_offset) == (1, 2, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
    assert h.compression == 0 and not h.is_transactional and not h.is_control
    assert batch.records == SPEC_RECORDS
    assert batch.encode() == SPEC_BATCH
    assert encode_batch(SPEC_RECORDS, partition_leader_epoch=0) == SPEC_BATCH


@pytest.mark.parametrize("codec", list(Compression))
@settings(max_examples=40, deadline=None)
@given(records=record_lists(), base_offset=st.integers(0, 2**40))
def test_roundtrip_every_codec(codec: Compression, records: list[Record], base_offset: int) -> None:
    data = encode_batch(
        records,
        base_offset=base_offset,
        producer_id=7,
        producer_epoch=1,
        base_sequence=100,
        compression=codec,
    )
    batch = decode_batch(data)
    assert batch.records == records
    h = batch.header
    assert h.compression == codec and h.base_offset == base_offset
    assert h.base_timestamp == records[0].timestamp
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 100)
    assert h.size == len(data)
    assert batch.encode() == data or codec != Compression.NONE


@given(st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=4))
def test_headers_roundtrip_including_invalid_utf8(headers: list[tuple[str, bytes | None]]) -> None:
    headers.append(("\udcff-raw", b""))  # surrogateescape form of the byte 0xff
    data = encode_batch([Record(0, 1, None, None, tuple(headers))])
    assert decode_batch(data).records[0].headers == tuple(headers)


def test_multiple_batches_and_truncated_tail() -> None:
    first = encode_batch(SPEC_RECORDS, base_offset=0)
    second = encode_batch([Record(0, 5, b"a", b"b")], base_offset=2, compression=Compression.GZIP)
    both = first + second
    assert [b.header.base_offset for b in decode_batches(both)] == [0, 2]
    for cut in (1, 12, HEADER_SIZE, len(second) - 1):
        fetched = decode_batches(both[: len(first) + cut], allow_truncated=True)
        assert [b.header.base_offset for b in fetched] == [0]
        with pytest.raises(RemoteProtocolError) as info:
            decode_batches(both[: len(first) + cut])
        assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE
    assert decode_batches(b"") == []
    with pytest.raises(RemoteProtocolError) as info:
        decode_batch(both)
    assert info.value.error_code == ErrorCode.INVALID_RECORD


def test_bad_crc_is_corrupt_message() -> None:
    data = bytearray(SPEC_BATCH)
    data[-2] ^= 0x01  # flip a bit inside "hello"
    with pytest.raises(RemoteProtocolError) as info:
        decode_batch(bytes(data))
    assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE
    # Without the check the (corrupted) records still parse.
    assert decode_batch(bytes(data), check_crc=False).records[1].value == b"helln"  # o ^ 1
    with pytest.raises(RemoteProtocolError):
        verify_crc(split_batches(bytes(data))[0])


def test_legacy_magic_is_invalid_record() -> None:
    data = bytearray(SPEC_BATCH)
    data[16] = 1
    with pytest.raises(RemoteProtocolError) as info:
        split_batches(bytes(data))
    assert info.value.error_code == ErrorCode.INVALID_RECORD


def test_header_only_fields_can_be_patched_without_new_crc() -> None:
    patched = patch_base_offset(SPEC_BATCH, 1000, partition_leader_epoch=3)
    batch = decode_batch(patched)  # CRC still valid
    assert (batch.header.base_offset, batch.header.partition_leader_epoch) == (1000, 3)
    assert patched[CRC_START:] == SPEC_BATCH[CRC_START:]
    assert decode_batch(patch_base_offset(SPEC_BATCH, 5)).header.partition_leader_epoch == 0


def test_set_log_append_time() -> None:
    stamped = decode_batch(set_log_append_time(SPEC_BATCH, 1800000000000))
    assert stamped.header.is_log_append_time
    assert stamped.header.max_timestamp == 1800000000000
    assert stamped.records == SPEC_RECORDS


def test_control_and_transactional_bits_and_empty_batch() -> None:
    data = encode_batch([], last_offset_delta=4, transactional=True, control=True)
    batch = decode_batch(data)
    assert batch.records == [] and batch.header.is_control and batch.header.is_transactional
    assert batch.header.next_offset == 5
    with pytest.raises(LocalProtocolError):
        encode_batch([])


def test_large_values_and_deltas_use_long_varints() -> None:
    records = [
        Record(0, -(2**40), b"k" * 20000, b"v" * 70000, (("h" * 9000, b"x" * 9000),)),
        Record(70000, 2**40, None, None, ()),
    ]
    assert decode_batch(encode_batch(records)).records == records
    with pytest.raises(LocalProtocolError):
        encode_batch([Record(2**31, 0, None, None, ())])
    with pytest.raises(LocalProtocolError):
        encode_batch([Record(0, 0, "not bytes", None, ())])  # type: ignore[arg-type]


# -- robustness --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_protocol_errors(data: bytes) -> None:
    try:
        decode_batches(data, allow_truncated=True)
    except RemoteProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from(list(Compression)),
    position=st.integers(HEADER_SIZE - 4, 10**6),
    xor=st.integers(1, 255),
)
def test_mutated_batches_only_raise_protocol_errors(codec: int, position: int, xor: int) -> None:
    data = bytearray(encode_batch(SPEC_RECORDS * 3, compression=codec))
    data[position % len(data)] ^= xor
    try:
        decode_batches(bytes(data), check_crc=False)
    except RemoteProtocolError:
        pass
