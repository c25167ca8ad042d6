"""Compression codecs: xerial and raw snappy, lz4 frame flags, errors."""

from __future__ import annotations

import os
import struct

import cramjam
import pytest

from kafka_listener import compression
from kafka_listener.compression import XERIAL_MAGIC, Compression
from kafka_listener.errors import ErrorCode
from kafka_listener.records import CRC_START, HEADER_SIZE, crc_of, decode_batch, encode_records
from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .golden import SPEC_BATCH
from .test_records import SPEC_RECORDS


def xerial(*blocks: bytes) -> bytes:
    """Xerial framing built by hand from the spec: magic, version 1, compat 1, then
    int32 length + raw snappy block per block."""
    out = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        out += struct.pack(">i", len(raw)) + raw
    return out


def test_xerial_snappy_decoding() -> None:
    assert compression.decompress(2, xerial(b"hello ", b"world")) == b"hello world"
    assert compression.decompress(2, xerial()) == b""
    # kafka-python / aiokafka style batch: snappy codec, xerial-framed records section.
    body = xerial(encode_records(SPEC_RECORDS, 1700000000000))
    records_section = bytearray(SPEC_BATCH[:HEADER_SIZE]) + body
    struct.pack_into(">i", records_section, 8, len(records_section) - 12)
    struct.pack_into(">h", records_section, CRC_START, Compression.SNAPPY)
    struct.pack_into(">I", records_section, 17, crc_of(bytes(records_section)))
    assert decode_batch(bytes(records_section)).records == SPEC_RECORDS


def test_raw_snappy_decoding_and_xerial_encoding() -> None:
    data = os.urandom(100) * 1000  # 100 kB: several 32 KiB xerial blocks
    assert compression.decompress(2, bytes(cramjam.snappy.compress_raw(data))) == data
    framed = compression.compress(2, data)
    assert framed.startswith(XERIAL_MAGIC) and compression.decompress(2, framed) == data


@pytest.mark.parametrize(
    "bad",
    [
        XERIAL_MAGIC + b"\x00",  # header cut short
        xerial(b"abc")[:-1],  # block cut short
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, -5),  # negative block size
        XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00",  # partial size
        b"\xff\xff\xff\xff\x0f",  # raw block claiming a huge length
    ],
)
def test_bad_snappy_is_corrupt(bad: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        compression.decompress(2, bad)
    assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_bad_compressed_data_is_corrupt(codec: int) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        compression.decompress(codec, b"definitely not compressed")
    assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_unknown_codec() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        compression.decompress(5, b"")
    assert info.value.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(LocalProtocolError):
        compression.compress(6, b"")


def test_lz4_frames_have_independent_blocks() -> None:
    frame = compression.compress(Compression.LZ4, b"x" * 1000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20  # FLG bit 5: block independence (Kafka's reader needs it)
