"""Java String.hashCode, index key hash, tag codes and the masked CRC (spec 0, 3.1, 4.4)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.store.hashing import index_key_hash, java_string_hash, masked_crc32, tag_code


def reference_hash(s: str) -> int:
    """The spec's own formula, verbatim (section 0)."""
    b = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + (b[i] << 8 | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),
        ("", 0),
        ("polygenelubricants", -2147483648),
        ("TopicTest#OrderID188", -1231271670),
        ("标签", 857175),
        ("😀", 1772899),
    ],
)
def test_spec_vectors(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_index_key_hash_vectors() -> None:
    assert index_key_hash("TopicTest#OrderID188") == 1231271670
    assert index_key_hash("TopicTest#OrderID188") % 5_000_000 == 1271670
    assert index_key_hash("polygenelubricants") == 0  # abs(Integer.MIN_VALUE) -> 0
    assert index_key_hash("TagA") == 2598919


def test_long_strings_use_the_same_polynomial() -> None:
    for length in (19, 20, 21, 64, 255, 256, 257, 5000):
        text = "k" * (length - 3) + "标签😀"[: min(3, length)]
        assert java_string_hash(text) == reference_hash(text)


def test_lone_surrogate_counts_as_one_unit() -> None:
    assert java_string_hash("\ud83d") == 0xD83D
    assert java_string_hash("a\udc00b") == reference_hash("a\udc00b")


@given(st.text(alphabet=st.characters(codec=None)))
def test_matches_reference(text: str) -> None:
    h = java_string_hash(text)
    assert h == reference_hash(text)
    assert -(2**31) <= h < 2**31


@given(st.text(min_size=21, max_size=300))
def test_matches_reference_long(text: str) -> None:
    assert java_string_hash(text) == reference_hash(text)


@given(st.text())
def test_index_key_hash_is_abs(text: str) -> None:
    h = java_string_hash(text)
    assert index_key_hash(text) == (0 if h == -(2**31) else abs(h))


def test_tag_code() -> None:
    assert tag_code(None) == 0
    assert tag_code("") == 0
    assert tag_code("TagA") == 2598919
    assert tag_code("标签") == 857175


def test_masked_crc32_vectors() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926
    assert masked_crc32(b"123456789") == 1274296614 == 0x4BF43926
    assert masked_crc32(b"Hello RocketMQ") == 1774740973
    assert masked_crc32(b"") == 0
    assert masked_crc32(memoryview(b"123456789")) == 1274296614
    assert masked_crc32(bytearray(b"123456789")) == 1274296614
