"""Declarative fields: version ranges, defaults, tagged fields, nullability."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kafka_listener.primitives import Reader, Writer
from kafka_listener.structs import VersionRange, array, compile_struct, field
from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .golden import h


def test_version_range_parsing() -> None:
    assert VersionRange.parse("3+") == VersionRange(3, 0x7FFF)
    assert VersionRange.parse("1-4") == VersionRange(1, 4)
    assert VersionRange.parse("0") == VersionRange(0, 0)
    none = VersionRange.parse("none")
    assert 0 not in none and 5 not in none
    assert 4 in VersionRange(1, 4) and 5 not in VersionRange(1, 4)
    assert "1" not in VersionRange(0, 5)


def test_unknown_type_rejected() -> None:
    with pytest.raises(ValueError):
        field("x", "int128")


FIELDS = [
    field("a", "int16"),
    field("b", "string", "1+", nullable="1+", default=None),
    array("c", [field("d", "int8"), field("e", "int8", "2+", tag=0, tagged="2+")], "0+"),
    field("f", "int32", "2+", default=7, tag=5, tagged="2+"),
]


def roundtrip(version: int, flexible: bool, value: Mapping[str, object]) -> tuple[bytes, object]:
    decode, encode = compile_struct(FIELDS, version, flexible)
    w = Writer()
    encode(w, value)
    r = Reader(w.getvalue())
    out = decode(r)
    assert r.remaining() == 0
    return w.getvalue(), out


def test_classic_and_flexible_layouts() -> None:
    value = {"a": 1, "b": None, "c": [{"d": 2, "e": 3}], "f": 9}
    wire, out = roundtrip(0, False, value)
    assert wire == h("0001 00000001 02")  # b, e and f absent at v0
    assert out == {"a": 1, "b": None, "c": [{"d": 2, "e": 0}], "f": 7}
    wire, out = roundtrip(2, True, value)
    # a | b compact null | c: 1 element (d, tagged e=3) | tagged f=9 (tag 5, 4 bytes)
    assert wire == h("0001 00 02 02 01 00 01 03 01 05 04 00000009")
    assert out == value
    wire, out = roundtrip(2, True, {"a": 1, "b": "x", "c": [], "f": 7})
    assert wire == h("0001 02 78 01 00")  # defaults are not written as tags
    assert out == {"a": 1, "b": "x", "c": [], "f": 7}


def test_tagged_field_with_trailing_bytes_is_rejected() -> None:
    decode, _ = compile_struct(FIELDS, 2, True)
    with pytest.raises(RemoteProtocolError):
        decode(Reader(h("0001 00 01 01 05 05 0000000900")))


def test_null_struct_and_missing_keys() -> None:
    _, encode = compile_struct(FIELDS, 1, False)
    with pytest.raises(LocalProtocolError):
        encode(Writer(), None)
    w = Writer()
    encode(w, {})  # everything defaults
    assert w.getvalue() == h("0000 ffff 00000000")
