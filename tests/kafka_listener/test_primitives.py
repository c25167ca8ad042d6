"""Round trips and edge cases of kafka_listener.primitives."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_listener.primitives import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    Reader,
    Writer,
    decode_uvarint,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    unzigzag,
    zigzag,
)
from mqcore.errors import LocalProtocolError, RemoteProtocolError

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (INT32_MIN, INT32_MAX),
    "int64": (INT64_MIN, INT64_MAX),
    "uint32": (0, 2**32 - 1),
}


def roundtrip(write: str, read: str, value: object) -> object:
    w = Writer()
    getattr(w, write)(value)
    r = Reader(w.getvalue())
    out = getattr(r, read)()
    assert r.remaining() == 0
    return out


@pytest.mark.parametrize("kind", sorted(INT_RANGES))
@given(data=st.data())
def test_fixed_ints_roundtrip(kind: str, data: st.DataObject) -> None:
    lo, hi = INT_RANGES[kind]
    value = data.draw(st.integers(lo, hi))
    assert roundtrip(kind, kind, value) == value


@pytest.mark.parametrize("kind", sorted(INT_RANGES))
def test_fixed_ints_out_of_range_is_local_error(kind: str) -> None:
    lo, hi = INT_RANGES[kind]
    for bad in (lo - 1, hi + 1):
        with pytest.raises(LocalProtocolError):
            getattr(Writer(), kind)(bad)


def test_big_endian_layout() -> None:
    w = Writer()
    w.int16(0x0102)
    w.int32(-2)
    w.int64(1)
    assert w.getvalue() == bytes.fromhex("0102 fffffffe 0000000000000001".replace(" ", ""))


@pytest.mark.parametrize(
    ("n", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2**32 - 1, "ffffffff0f"),
    ],
)
def test_uvarint_known_encodings(n: int, encoded: str) -> None:
    data = bytes.fromhex(encoded)
    assert encode_uvarint(n) == data
    assert Reader(data).uvarint() == n


@pytest.mark.parametrize(
    ("n", "z"),
    [(0, 0), (-1, 1), (1, 2), (-2, 3), (2, 4), (INT32_MAX, 2**32 - 2), (INT32_MIN, 2**32 - 1)],
)
def test_zigzag_known_values(n: int, z: int) -> None:
    assert zigzag(n) == z
    assert unzigzag(z) == n


@pytest.mark.parametrize(
    ("n", "encoded"),
    [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (63, "7e"), (64, "8001"), (-65, "8101")],
)
def test_varint_known_encodings(n: int, encoded: str) -> None:
    assert encode_varint(n) == bytes.fromhex(encoded)
    assert Reader(bytes.fromhex(encoded)).varint() == n


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_roundtrip(n: int) -> None:
    assert roundtrip("varint", "varint", n) == n
    assert len(encode_varint(n)) <= 5


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_roundtrip(n: int) -> None:
    assert roundtrip("varlong", "varlong", n) == n
    assert len(encode_varlong(n)) <= 10


@given(st.integers(0, 2**32 - 1))
def test_uvarint_roundtrip(n: int) -> None:
    assert roundtrip("uvarint", "uvarint", n) == n


def test_varint_limits() -> None:
    with pytest.raises(LocalProtocolError):
        encode_varint(INT32_MAX + 1)
    with pytest.raises(LocalProtocolError):
        encode_varlong(INT64_MIN - 1)
    with pytest.raises(LocalProtocolError):
        encode_uvarint(-1)
    with pytest.raises(LocalProtocolError):
        Writer().uvarint(2**32)
    # Six continuation bytes: longer than a 32-bit varint may be.
    with pytest.raises(RemoteProtocolError):
        Reader(b"\x80\x80\x80\x80\x80\x01").uvarint()
    # Five bytes whose value needs 35 bits.
    with pytest.raises(RemoteProtocolError):
        Reader(b"\xff\xff\xff\xff\x7f").uvarint()
    with pytest.raises(RemoteProtocolError):
        Reader(b"\x80").uvarint()
    with pytest.raises(RemoteProtocolError):
        decode_uvarint(b"\x80\x80", 0, 5)


@given(st.text(max_size=50))
def test_strings_roundtrip(s: str) -> None:
    assert roundtrip("string", "string", s) == s
    assert roundtrip("compact_string", "compact_string", s) == s
    assert roundtrip("nullable_string", "nullable_string", s) == s
    assert roundtrip("compact_nullable_string", "compact_nullable_string", s) == s


def test_string_layouts() -> None:
    w = Writer()
    w.string("ab")
    w.nullable_string(None)
    w.compact_string("ab")
    w.compact_nullable_string(None)
    w.compact_nullable_string("")
    assert w.getvalue() == bytes.fromhex("00026162 ffff 036162 00 01".replace(" ", ""))
    r = Reader(w.getvalue())
    assert [
        r.string(),
        r.nullable_string(),
        r.compact_string(),
        r.compact_nullable_string(),
        r.compact_nullable_string(),
    ] == ["ab", None, "ab", None, ""]


def test_null_where_not_allowed() -> None:
    with pytest.raises(RemoteProtocolError):
        Reader(b"\xff\xff").string()
    with pytest.raises(RemoteProtocolError):
        Reader(b"\x00").compact_string()
    with pytest.raises(RemoteProtocolError):
        Reader(b"\xff\xff\xff\xff").bytes_()
    with pytest.raises(RemoteProtocolError):
        Reader(b"\xff\xfe").nullable_string()  # -2 is not the null marker
    with pytest.raises(LocalProtocolError):
        Writer().string(None)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        Writer().compact_bytes(None)  # type: ignore[arg-type]


def test_string_errors() -> None:
    with pytest.raises(RemoteProtocolError):
        Reader(b"\x00\x02\xff\xfe").string()  # invalid UTF-8
    with pytest.raises(RemoteProtocolError):
        Reader(b"\x00\x05ab").string()  # truncated
    with pytest.raises(LocalProtocolError):
        Writer().string("x" * 40000)  # longer than int16
    with pytest.raises(LocalProtocolError):
        Writer().string("\ud800")  # lone surrogate cannot be UTF-8


@given(st.binary(max_size=100))
def test_bytes_roundtrip(b: bytes) -> None:
    assert roundtrip("bytes_", "bytes_", b) == b
    assert roundtrip("nullable_bytes", "nullable_bytes", b) == b
    assert roundtrip("compact_bytes", "compact_bytes", b) == b
    assert roundtrip("compact_nullable_bytes", "compact_nullable_bytes", b) == b


def test_nullable_bytes_null() -> None:
    assert roundtrip("nullable_bytes", "nullable_bytes", None) is None
    assert roundtrip("compact_nullable_bytes", "compact_nullable_bytes", None) is None


@given(st.one_of(st.none(), st.lists(st.integers(INT32_MIN, INT32_MAX), max_size=20)))
def test_arrays_roundtrip(items: list[int] | None) -> None:
    for compact in (False, True):
        w = Writer()
        length = w.compact_array_length if compact else w.array_length
        length(None if items is None else len(items))
        for i in items or ():
            w.int32(i)
        r = Reader(w.getvalue())
        n = (r.compact_array_length if compact else r.array_length)(True)
        got = None if n < 0 else [r.int32() for _ in range(n)]
        assert got == items
        assert r.remaining() == 0


def test_array_helpers_and_limits() -> None:
    w = Writer()
    w.array_length(2)
    w.int8(1)
    w.int8(2)
    assert Reader(w.getvalue()).array(Reader.int8) == [1, 2]
    assert Reader(b"\x03\x01\x02").compact_array(Reader.int8) == [1, 2]
    with pytest.raises(RemoteProtocolError):
        Reader(b"\xff\xff\xff\xff").array_length(False)  # null, not nullable
    with pytest.raises(RemoteProtocolError):
        Reader(b"\x7f\xff\xff\xff\x00").array_length(False)  # count > bytes left
    with pytest.raises(RemoteProtocolError):
        Reader(b"\x00").compact_array_length(False)


@given(
    st.dictionaries(st.integers(0, 2**31), st.binary(max_size=20), max_size=6),
)
def test_tagged_fields_roundtrip(fields: dict[int, bytes]) -> None:
    w = Writer()
    w.tagged_fields(fields)
    r = Reader(w.getvalue())
    assert r.tagged_fields() == fields
    assert r.remaining() == 0


def test_tagged_fields_layout_and_order() -> None:
    w = Writer()
    w.tagged_fields({})
    assert w.getvalue() == b"\x00"
    w = Writer()
    w.tagged_fields({3: b"\x01", 0: b""})
    assert w.getvalue() == bytes.fromhex("02 00 00 03 01 01".replace(" ", ""))
    with pytest.raises(RemoteProtocolError):
        Reader(bytes.fromhex("02 03 00 01 00".replace(" ", ""))).tagged_fields()  # 3 then 1
    with pytest.raises(RemoteProtocolError):
        Reader(bytes.fromhex("01 00 05 00".replace(" ", ""))).tagged_fields()  # short


@given(st.uuids())
def test_uuid_roundtrip(u: uuid.UUID) -> None:
    assert roundtrip("uuid", "uuid", u) == u


@given(st.booleans(), st.floats(allow_nan=False))
def test_bool_float(b: bool, x: float) -> None:
    assert roundtrip("boolean", "boolean", b) is b
    assert roundtrip("float64", "float64", x) == x
    assert Reader(b"\x07").boolean() is True  # any non-zero byte reads as true


@pytest.mark.parametrize(
    "method", ["int8", "int16", "int32", "int64", "uint32", "float64", "uuid", "string", "bytes_"]
)
def test_truncation_is_remote_error(method: str) -> None:
    with pytest.raises(RemoteProtocolError):
        getattr(Reader(b""), method)()


def test_reader_over_memoryview_slice_and_skip() -> None:
    data = memoryview(b"xx\x00\x01\x00\x02")[2:]
    r = Reader(data)
    sub = r.sub_reader(2)
    assert sub.int16() == 1
    assert r.int16() == 2
    with pytest.raises(RemoteProtocolError):
        r.skip(1)
    with pytest.raises(RemoteProtocolError):
        r.raw(-1)
