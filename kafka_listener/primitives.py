"""Kafka's primitive wire types: pure encode/decode, no I/O (modelled on aiokafka ``types.py``).

Classic encoding (every non-flexible version; all integers big-endian two's complement):

============================  ==================================================
type                          bytes
============================  ==================================================
int8 / int16 / int32 / int64  1 / 2 / 4 / 8
uint32                        4, unsigned (only the record-batch CRC)
bool                          1 (0 = false, anything else reads as true)
string                        int16 N ≥ 0, then N bytes of UTF-8
nullable string               int16 N, N = -1 means null
bytes / nullable bytes        int32 N, then N bytes (-1 = null when nullable)
array                         int32 N, then N elements (-1 = null when nullable)
uuid                          16 bytes
============================  ==================================================

Flexible encoding (KIP-482, versions at or above an API's "flex from"):

* unsigned varint: 7 bits per byte, least significant group first, high bit set = more
  bytes follow; at most 5 bytes for the 32-bit values Kafka puts there.
* compact string / bytes / array: ``uvarint(N + 1)`` then the payload; 0 = null.
* tagged-field section: ``uvarint count``, then per field ``uvarint tag, uvarint size,
  size bytes`` with tags strictly ascending. One ``0x00`` byte = no tagged fields.

Record batches use *signed* zigzag varints (``zigzag(n) = (n << 1) ^ (n >> 63)``) with the
same 7-bit groups: :meth:`Reader.varint` / :meth:`Reader.varlong` here, and an inlined copy
in ``records.py`` where speed matters.

Invariants: a :class:`Reader` never reads past the end of its buffer; every short read,
over-long varint, negative length other than the null marker or invalid UTF-8 raises
:class:`~mqcore.errors.RemoteProtocolError` (the peer sent it). A :class:`Writer` raises
:class:`~mqcore.errors.LocalProtocolError` for a value its type cannot hold (we were asked
to send it). Nothing here logs, sleeps or touches a socket.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .errors import ErrorCode

# One struct.Struct per fixed-size type; unpack_from raises struct.error on a short buffer,
# which Reader turns into RemoteProtocolError (cheaper than an explicit bounds check on the
# happy path: try costs nothing in CPython 3.11+ until it fires).
INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
UUID_SIZE = 16

INT16_MAX = 0x7FFF
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UVARINT_MAX_BYTES = 5  # uint32
VARLONG_MAX_BYTES = 10  # int64 after zigzag

_INVALID = ErrorCode.INVALID_REQUEST


def zigzag(n: int) -> int:
    """Map a signed int64 onto an unsigned one so small magnitudes stay small."""
    return (n << 1) ^ (n >> 63)


def unzigzag(n: int) -> int:
    """Inverse of :func:`zigzag`."""
    return (n >> 1) ^ -(n & 1)


def encode_uvarint(n: int) -> bytes:
    """Encode a non-negative integer as an unsigned varint.

    Raises:
        LocalProtocolError: ``n`` is negative.
    """
    if n < 0:
        raise LocalProtocolError(f"unsigned varint cannot hold {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Encode a signed int32 as a zigzag varint (record fields).

    Raises:
        LocalProtocolError: ``n`` is outside int32.
    """
    if not INT32_MIN <= n <= INT32_MAX:
        raise LocalProtocolError(f"varint cannot hold {n}")
    return encode_uvarint(zigzag(n))


def encode_varlong(n: int) -> bytes:
    """Encode a signed int64 as a zigzag varlong (record timestamp deltas).

    Raises:
        LocalProtocolError: ``n`` is outside int64.
    """
    if not INT64_MIN <= n <= INT64_MAX:
        raise LocalProtocolError(f"varlong cannot hold {n}")
    return encode_uvarint(zigzag(n))


def decode_uvarint(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int
) -> tuple[int, int]:
    """Decode an unsigned varint at ``buf[pos]``.

    Args:
        buf: the bytes.
        pos: where the varint starts.
        max_bytes: 5 for 32-bit values, 10 for 64-bit ones.

    Returns:
        ``(value, position after the varint)``.

    Raises:
        RemoteProtocolError: the buffer ends inside the varint, or it is longer than
            ``max_bytes``.
    """
    value = 0
    shift = 0
    end = len(buf)
    for i in range(pos, pos + max_bytes):
        if i >= end:
            raise RemoteProtocolError("truncated varint", _INVALID)
        b = buf[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
    raise RemoteProtocolError(f"varint longer than {max_bytes} bytes", _INVALID)


class Reader:
    """Sequential decoder over a buffer; ``pos`` is the next byte to read.

    The reader keeps a ``memoryview`` so slicing never copies until a value is produced.
    Every method raises :class:`RemoteProtocolError` (``error_code`` INVALID_REQUEST) when
    the data is truncated or malformed.
    """

    __slots__ = ("_buf", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        view = memoryview(data)
        self._buf = view if view.format == "B" else view.cast("B")
        self.pos = pos

    def remaining(self) -> int:
        """Number of unread bytes."""
        return len(self._buf) - self.pos

    def _short(self, what: str) -> RemoteProtocolError:
        return RemoteProtocolError(f"truncated {what} at byte {self.pos}", _INVALID)

    # -- fixed-size -------------------------------------------------------------------
    def int8(self) -> int:
        try:
            (v,) = INT8.unpack_from(self._buf, self.pos)
        except struct.error:
            raise self._short("int8") from None
        self.pos += 1
        return int(v)

    def int16(self) -> int:
        try:
            (v,) = INT16.unpack_from(self._buf, self.pos)
        except struct.error:
            raise self._short("int16") from None
        self.pos += 2
        return int(v)

    def int32(self) -> int:
        try:
            (v,) = INT32.unpack_from(self._buf, self.pos)
        except struct.error:
            raise self._short("int32") from None
        self.pos += 4
        return int(v)

    def int64(self) -> int:
        try:
            (v,) = INT64.unpack_from(self._buf, self.pos)
        except struct.error:
            raise self._short("int64") from None
        self.pos += 8
        return int(v)

    def uint32(self) -> int:
        try:
            (v,) = UINT32.unpack_from(self._buf, self.pos)
        except struct.error:
            raise self._short("uint32") from None
        self.pos += 4
        return int(v)

    def float64(self) -> float:
        try:
            (v,) = FLOAT64.unpack_from(self._buf, self.pos)
        except struct.error:
            raise self._short("float64") from None
        self.pos += 8
        return float(v)

    def boolean(self) -> bool:
        return self.int8() != 0

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.raw(UUID_SIZE))

    def raw(self, n: int) -> bytes:
        """Read exactly ``n`` bytes."""
        end = self.pos + n
        if n < 0 or end > len(self._buf):
            raise self._short(f"{n}-byte field")
        data = self._buf[self.pos : end].tobytes()
        self.pos = end
        return data

    def skip(self, n: int) -> None:
        """Skip ``n`` bytes (unknown tagged fields)."""
        if n < 0 or self.pos + n > len(self._buf):
            raise self._short(f"{n}-byte skip")
        self.pos += n

    def sub_reader(self, n: int) -> Reader:
        """A reader over the next ``n`` bytes, which this reader then skips."""
        start = self.pos
        self.skip(n)
        return Reader(self._buf[start : start + n])

    # -- varints ----------------------------------------------------------------------
    def uvarint(self) -> int:
        value, self.pos = decode_uvarint(self._buf, self.pos, UVARINT_MAX_BYTES)
        if value > 0xFFFFFFFF:
            raise RemoteProtocolError("unsigned varint exceeds 32 bits", _INVALID)
        return value

    def varint(self) -> int:
        value = self.uvarint()
        return unzigzag(value)

    def varlong(self) -> int:
        value, self.pos = decode_uvarint(self._buf, self.pos, VARLONG_MAX_BYTES)
        if value >> 64:
            raise RemoteProtocolError("varlong exceeds 64 bits", _INVALID)
        return unzigzag(value)

    # -- strings and bytes ------------------------------------------------------------
    def _text(self, n: int) -> str:
        end = self.pos + n
        if end > len(self._buf):
            raise self._short(f"{n}-byte string")
        try:
            text = str(self._buf[self.pos : end], "utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"invalid UTF-8 in string: {exc}", _INVALID) from None
        self.pos = end
        return text

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise RemoteProtocolError(f"null or negative length {n} for a string", _INVALID)
        return self._text(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            if n == -1:
                return None
            raise RemoteProtocolError(f"negative string length {n}", _INVALID)
        return self._text(n)

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise RemoteProtocolError("null compact string where none is allowed", _INVALID)
        return self._text(n)

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._text(n)

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0:
            raise RemoteProtocolError(f"null or negative length {n} for bytes", _INVALID)
        return self.raw(n)

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            if n == -1:
                return None
            raise RemoteProtocolError(f"negative bytes length {n}", _INVALID)
        return self.raw(n)

    def compact_bytes(self) -> bytes:
        n = self.uvarint() - 1
        if n < 0:
            raise RemoteProtocolError("null compact bytes where none is allowed", _INVALID)
        return self.raw(n)

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.raw(n)

    # -- arrays -----------------------------------------------------------------------
    def _check_count(self, n: int) -> int:
        # Every element type Kafka has takes at least one byte, so a count larger than the
        # bytes left is malformed; refusing it here stops a 2**31 count from looping.
        if n > len(self._buf) - self.pos:
            raise RemoteProtocolError(f"array count {n} exceeds the bytes left", _INVALID)
        return n

    def array_length(self, nullable: bool) -> int:
        """Read a classic array count; returns -1 for null (only when ``nullable``)."""
        n = self.int32()
        if n < 0:
            if n == -1 and nullable:
                return -1
            raise RemoteProtocolError(f"invalid array count {n}", _INVALID)
        return self._check_count(n)

    def compact_array_length(self, nullable: bool) -> int:
        """Read a compact array count; returns -1 for null (only when ``nullable``)."""
        n = self.uvarint() - 1
        if n < 0:
            if nullable:
                return -1
            raise RemoteProtocolError("null compact array where none is allowed", _INVALID)
        return self._check_count(n)

    def array(self, item: Callable[[Reader], object]) -> list[object]:
        """Read a non-nullable classic array of ``item`` elements."""
        return [item(self) for _ in range(self.array_length(False))]

    def compact_array(self, item: Callable[[Reader], object]) -> list[object]:
        """Read a non-nullable compact array of ``item`` elements."""
        return [item(self) for _ in range(self.compact_array_length(False))]

    # -- tagged fields ----------------------------------------------------------------
    def tagged_fields(self) -> dict[int, bytes]:
        """Read a tagged-field section as ``{tag: raw bytes}`` (tags must ascend)."""
        fields: dict[int, bytes] = {}
        last = -1
        for _ in range(self._check_count(self.uvarint())):
            tag = self.uvarint()
            if tag <= last:
                raise RemoteProtocolError(f"tagged field {tag} out of order", _INVALID)
            last = tag
            fields[tag] = self.raw(self.uvarint())
        return fields


class Writer:
    """Sequential encoder into a ``bytearray``; :meth:`getvalue` returns ``bytes``.

    Methods raise :class:`LocalProtocolError` when a value does not fit its wire type.
    """

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def _pack(self, s: struct.Struct, v: object, name: str) -> None:
        try:
            self.buf += s.pack(v)
        except struct.error as exc:
            raise LocalProtocolError(f"{name} cannot hold {v!r}: {exc}") from None

    def int8(self, v: int) -> None:
        self._pack(INT8, v, "int8")

    def int16(self, v: int) -> None:
        self._pack(INT16, v, "int16")

    def int32(self, v: int) -> None:
        self._pack(INT32, v, "int32")

    def int64(self, v: int) -> None:
        self._pack(INT64, v, "int64")

    def uint32(self, v: int) -> None:
        self._pack(UINT32, v, "uint32")

    def float64(self, v: float) -> None:
        self._pack(FLOAT64, v, "float64")

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def uvarint(self, n: int) -> None:
        if 0 <= n < 0x80:
            self.buf.append(n)
        elif n > 0xFFFFFFFF:
            raise LocalProtocolError(f"unsigned varint cannot hold {n}")
        else:
            self.buf += encode_uvarint(n)

    def varint(self, n: int) -> None:
        self.buf += encode_varint(n)

    def varlong(self, n: int) -> None:
        self.buf += encode_varlong(n)

    @staticmethod
    def _utf8(s: str) -> bytes:
        try:
            return s.encode("utf-8")
        except (AttributeError, UnicodeEncodeError) as exc:
            raise LocalProtocolError(f"cannot encode {s!r} as a string: {exc}") from None

    def string(self, s: str) -> None:
        if s is None:
            raise LocalProtocolError("null for a non-nullable string")
        data = self._utf8(s)
        if len(data) > INT16_MAX:
            raise LocalProtocolError(f"string of {len(data)} bytes exceeds int16")
        self.buf += INT16.pack(len(data))
        self.buf += data

    def nullable_string(self, s: str | None) -> None:
        if s is None:
            self.buf += b"\xff\xff"
        else:
            self.string(s)

    def compact_string(self, s: str) -> None:
        if s is None:
            raise LocalProtocolError("null for a non-nullable compact string")
        data = self._utf8(s)
        self.uvarint(len(data) + 1)
        self.buf += data

    def compact_nullable_string(self, s: str | None) -> None:
        if s is None:
            self.buf.append(0)
        else:
            self.compact_string(s)

    def bytes_(self, b: bytes | bytearray | memoryview) -> None:
        if b is None:
            raise LocalProtocolError("null for non-nullable bytes")
        self.int32(len(b))
        self.buf += b

    def nullable_bytes(self, b: bytes | bytearray | memoryview | None) -> None:
        if b is None:
            self.buf += b"\xff\xff\xff\xff"
        else:
            self.bytes_(b)

    def compact_bytes(self, b: bytes | bytearray | memoryview) -> None:
        if b is None:
            raise LocalProtocolError("null for non-nullable compact bytes")
        self.uvarint(len(b) + 1)
        self.buf += b

    def compact_nullable_bytes(self, b: bytes | bytearray | memoryview | None) -> None:
        if b is None:
            self.buf.append(0)
        else:
            self.compact_bytes(b)

    def array_length(self, n: int | None) -> None:
        """Write a classic array count; ``None`` writes the null marker -1."""
        self.int32(-1 if n is None else n)

    def compact_array_length(self, n: int | None) -> None:
        """Write a compact array count; ``None`` writes the null marker 0."""
        self.uvarint(0 if n is None else n + 1)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        """Write a tagged-field section from ``{tag: raw bytes}`` (sorted by tag)."""
        if not fields:
            self.buf.append(0)
            return
        self.uvarint(len(fields))
        for tag in sorted(fields):
            data = fields[tag]
            self.uvarint(tag)
            self.uvarint(len(data))
            self.buf += data
