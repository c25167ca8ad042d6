"""BODYCRC through ISA-L (``body_crc.py``) is zlib's CRC-32, masked as RocketMQ masks it."""

from __future__ import annotations

import zlib

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mqcore.format.body_crc import (
    BODY_CRC_MASK,
    body_crc,
    body_crc_array,
    body_crcs,
    crc32,
)


@given(st.binary(max_size=5000), st.integers(0, 0xFFFFFFFF))
def test_crc32_is_zlibs(data: bytes, start: int) -> None:
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data, start) == zlib.crc32(data, start)
    assert crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])
    assert crc32(bytearray(data)) == zlib.crc32(data)


def test_body_crc_is_masked_to_31_bits() -> None:
    negative = next(bytes([i]) * 3 for i in range(256) if zlib.crc32(bytes([i]) * 3) >> 31)
    assert body_crc(negative) == zlib.crc32(negative) & BODY_CRC_MASK < zlib.crc32(negative)
    assert body_crc(b"") == 0
    assert body_crc(b"123456789") == 0xCBF43926 & BODY_CRC_MASK  # the CRC-32 check value


def test_body_crc_vectors() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926
    assert body_crc(b"123456789") == 1274296614 == 0x4BF43926
    assert body_crc(b"Hello RocketMQ") == 1774740973
    assert body_crc(b"") == 0
    assert body_crc(memoryview(b"123456789")) == 1274296614
    assert body_crc(bytearray(b"123456789")) == 1274296614


@given(st.lists(st.binary(max_size=300), max_size=40))
def test_many_bodies_at_once_equal_one_at_a_time(bodies: list[bytes]) -> None:
    one_by_one = [zlib.crc32(body) & BODY_CRC_MASK for body in bodies]
    assert body_crcs(bodies) == one_by_one
    array = body_crc_array(map(memoryview, bodies), len(bodies))
    assert array.dtype == np.int64 and array.tolist() == one_by_one
