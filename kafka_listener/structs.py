"""Declarative message structs with per-field version ranges, compiled per version.

This is the machinery behind ``schemas.py``, shaped like Kafka's
``clients/src/main/resources/common/message/*.json``: a message is a tuple of
:class:`Field`, each with the versions it exists in (``"0+"``, ``"3-4"``, ``"0"``), the
versions in which it may be null, an optional default, and optionally a tag (a field
that lives in the tagged-field section of flexible versions). Arrays of structs nest
their own fields.

Values are plain Python (the documented decode format of the whole codec):

=====================  ========================================================
wire type              Python value
=====================  ========================================================
int8/16/32/64          ``int``
bool                   ``bool``
float64                ``float``
string                 ``str`` (``None`` where nullable)
bytes, records         ``bytes`` (``None`` where nullable); records stay raw,
                       ``records.py`` parses them
uuid                   ``uuid.UUID``
``[]T``                ``list`` (``None`` where nullable)
struct                 ``dict[str, Any]`` keyed by snake_case field name
=====================  ========================================================

Decoding returns every field the schema knows: fields absent at the decoded version get
their default, so a handler can read ``request["rebalance_timeout_ms"]`` at any version.
Encoding reads only the fields of the target version; a missing key takes its default
and keys the version does not have are ignored (Kafka would refuse non-default values of
non-ignorable fields; we leave that judgement to the handler). Unknown tags in a tagged
section are skipped, as KIP-482 requires.

:func:`compile_struct` turns ``(fields, version, flexible)`` into one decoder and one
encoder closure, built once and cached by ``schemas.py`` so that the per-message cost is
a loop over prepared ``(name, function)`` pairs, not a walk over version ranges.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .errors import ErrorCode
from .primitives import Reader, Writer

Decoder = Callable[[Reader], Any]
Encoder = Callable[[Writer, Any], None]
Factory = Callable[[], Any]

MAX_VERSION = 0x7FFF
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive version range; ``lo > hi`` is the empty range ("none")."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        """Parse Kafka's notation: ``"none"``, ``"3"``, ``"3+"`` or ``"1-4"``."""
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        lo, _, hi = text.partition("-")
        return cls(int(lo), int(hi or lo))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi


NONE = VersionRange(1, 0)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message or of a struct inside an array.

    ``type`` is a primitive name (``int8 int16 int32 int64 float64 bool string bytes
    records uuid``), ``"[]<primitive>"`` for an array of primitives, or ``"[]"`` for an
    array of structs whose members are ``fields``.
    """

    name: str
    type: str
    versions: VersionRange
    nullable: VersionRange = NONE
    default: Any = _MISSING
    fields: tuple[Field, ...] = ()
    tag: int | None = None
    tagged: VersionRange = NONE

    def default_factory(self) -> Factory:
        """A callable returning a fresh default value for this field."""
        if self.default is not _MISSING:
            value = self.default
            if isinstance(value, list):
                return lambda: list(value)
            return lambda: value
        if self.type.startswith("[]"):
            return list
        return _TYPE_DEFAULTS[self.type]


_TYPE_DEFAULTS: dict[str, Factory] = {
    "int8": int,
    "int16": int,
    "int32": int,
    "int64": int,
    "float64": float,
    "bool": bool,
    "string": str,
    "bytes": bytes,
    "records": lambda: None,
    "uuid": lambda: uuid.UUID(int=0),
}


def field(
    name: str,
    type_: str,
    versions: str = "0+",
    *,
    nullable: str = "none",
    default: Any = _MISSING,
    tag: int | None = None,
    tagged: str = "none",
) -> Field:
    """Declare a primitive (or primitive-array) field, in Kafka's JSON vocabulary."""
    if type_.removeprefix("[]") not in _TYPE_DEFAULTS:
        raise ValueError(f"unknown field type {type_!r}")
    return Field(
        name,
        type_,
        VersionRange.parse(versions),
        VersionRange.parse(nullable),
        default,
        (),
        tag,
        VersionRange.parse(tagged),
    )


def array(
    name: str,
    fields: Sequence[Field],
    versions: str = "0+",
    *,
    nullable: str = "none",
    tag: int | None = None,
    tagged: str = "none",
) -> Field:
    """Declare an array-of-structs field whose elements have ``fields``."""
    return Field(
        name,
        "[]",
        VersionRange.parse(versions),
        VersionRange.parse(nullable),
        _MISSING,
        tuple(fields),
        tag,
        VersionRange.parse(tagged),
    )


# (classic, classic nullable, compact, compact nullable) codecs of each primitive type.
_Pair = tuple[Decoder, Encoder]
_STRING: tuple[_Pair, _Pair, _Pair, _Pair] = (
    (Reader.string, Writer.string),
    (Reader.nullable_string, Writer.nullable_string),
    (Reader.compact_string, Writer.compact_string),
    (Reader.compact_nullable_string, Writer.compact_nullable_string),
)
_BYTES: tuple[_Pair, _Pair, _Pair, _Pair] = (
    (Reader.bytes_, Writer.bytes_),
    (Reader.nullable_bytes, Writer.nullable_bytes),
    (Reader.compact_bytes, Writer.compact_bytes),
    (Reader.compact_nullable_bytes, Writer.compact_nullable_bytes),
)
_FIXED: dict[str, _Pair] = {
    "int8": (Reader.int8, Writer.int8),
    "int16": (Reader.int16, Writer.int16),
    "int32": (Reader.int32, Writer.int32),
    "int64": (Reader.int64, Writer.int64),
    "float64": (Reader.float64, Writer.float64),
    "bool": (Reader.boolean, Writer.boolean),
    "uuid": (Reader.uuid, Writer.uuid),
}


def _primitive(type_: str, flexible: bool, nullable: bool) -> _Pair:
    if type_ in _FIXED:
        return _FIXED[type_]
    table = _STRING if type_ == "string" else _BYTES
    return table[2 * flexible + nullable]


def _array(elem: _Pair, flexible: bool, nullable: bool, name: str) -> _Pair:
    elem_dec, elem_enc = elem
    read_len = Reader.compact_array_length if flexible else Reader.array_length
    write_len = Writer.compact_array_length if flexible else Writer.array_length

    def decode(r: Reader) -> list[Any] | None:
        n = read_len(r, nullable)
        if n < 0:
            return None
        return [elem_dec(r) for _ in range(n)]

    def encode(w: Writer, value: Sequence[Any] | None) -> None:
        if value is None:
            if not nullable:
                raise LocalProtocolError(f"{name}: null for a non-nullable array")
            write_len(w, None)
            return
        write_len(w, len(value))
        for item in value:
            elem_enc(w, item)

    return decode, encode


def _field_codec(f: Field, version: int, flexible: bool) -> _Pair:
    nullable = version in f.nullable
    if f.type == "[]":
        struct = compile_struct(f.fields, version, flexible, f.name)
        return _array(struct, flexible, nullable, f.name)
    if f.type.startswith("[]"):
        elem = _primitive(f.type[2:], flexible, False)
        return _array(elem, flexible, nullable, f.name)
    return _primitive(f.type, flexible, nullable)


def compile_struct(
    fields: Sequence[Field], version: int, flexible: bool, where: str = "message"
) -> _Pair:
    """Build the decoder and encoder of ``fields`` at ``version``.

    Args:
        fields: the struct's fields in wire order.
        version: the API version to compile for.
        flexible: whether ``version`` uses the KIP-482 encoding (compact types and a
            tagged-field section at the end of the struct).
        where: a name for error messages.

    Returns:
        ``(decode(reader) -> dict, encode(writer, mapping) -> None)``.
    """
    regular: list[tuple[str, Decoder, Encoder, Factory]] = []
    tagged: dict[int, tuple[str, Decoder, Encoder, Factory]] = {}
    absent: list[tuple[str, Factory]] = []
    for f in fields:
        if version not in f.versions:
            absent.append((f.name, f.default_factory()))
        elif flexible and f.tag is not None and version in f.tagged:
            dec, enc = _field_codec(f, version, True)
            tagged[f.tag] = (f.name, dec, enc, f.default_factory())
        else:
            dec, enc = _field_codec(f, version, flexible)
            regular.append((f.name, dec, enc, f.default_factory()))
    # Tagged fields that are not on the wire read as their defaults.
    tag_defaults = [(name, factory) for name, _, _, factory in tagged.values()]
    absent_all = absent + tag_defaults
    regular_dec = [(name, dec) for name, dec, _, _ in regular]
    tag_order = sorted(tagged)

    def decode(r: Reader) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, dec in regular_dec:
            out[name] = dec(r)
        for name, factory in absent_all:
            out[name] = factory()
        if flexible:
            _decode_tagged(r, tagged, out, where)
        return out

    def encode(w: Writer, value: Mapping[str, Any]) -> None:
        if value is None:
            raise LocalProtocolError(f"{where}: null struct")
        get = value.get
        for name, _, enc, factory in regular:
            item = get(name, _MISSING)
            enc(w, factory() if item is _MISSING else item)
        if flexible:
            _encode_tagged(w, tagged, tag_order, value)

    return decode, encode


def _decode_tagged(
    r: Reader,
    tagged: dict[int, tuple[str, Decoder, Encoder, Factory]],
    out: dict[str, Any],
    where: str,
) -> None:
    for tag, data in r.tagged_fields().items():
        known = tagged.get(tag)
        if known is None:
            continue  # unknown tags are skipped (KIP-482)
        name, dec = known[0], known[1]
        sub = Reader(data)
        out[name] = dec(sub)
        if sub.remaining():
            raise RemoteProtocolError(
                f"{where}.{name}: {sub.remaining()} trailing bytes in tagged field {tag}",
                ErrorCode.INVALID_REQUEST,
            )


def _encode_tagged(
    w: Writer,
    tagged: dict[int, tuple[str, Decoder, Encoder, Factory]],
    tag_order: list[int],
    value: Mapping[str, Any],
) -> None:
    present: dict[int, bytes] = {}
    for tag in tag_order:
        name, _, enc, factory = tagged[tag]
        item = value.get(name, _MISSING)
        if item is _MISSING or item == factory():
            continue  # defaults are not written
        sub = Writer()
        enc(sub, item)
        present[tag] = sub.getvalue()
    w.tagged_fields(present)
