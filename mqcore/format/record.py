"""The CommitLog record codec: encoder, validator and decoders (spec 1, 3.1, 5.5, 6.1, 7.3).

The byte layout, magic codes, SYSFLAG bits and Structs live in ``layout`` (its
docstring has the full table) and delay levels in ``delay_levels``; both are re-exported here,
so ``mqcore.format.record`` is the one import for record work. In short::

    TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
    BORNHOST(8|20) STORETIMESTAMP STOREHOST(8|20) RECONSUMETIMES PREPARED_TX_OFFSET
    BODYLENGTH BODY TOPICLENGTH(1|2) TOPIC PROPERTIESLENGTH PROPERTIES       (big-endian)

Reading a record (``check_record``, ``decode_dispatch``, ``decode_record``) follows RocketMQ's
``checkMessageAndReturnSize`` but answers with an explicit kind instead of a size sentinel:

* :class:`NeedMore`: the record (or its 8-byte head) runs past ``limit``. ``needed`` is how
  many bytes from ``pos`` it claims, so a caller that knows where the *file* ends can tell a
  torn or garbage tail (``pos + needed`` beyond the file) from bytes not yet written.
* :class:`Blank`: the end-of-file filler; continue at the next file.
* :class:`Corrupt`: ``size > 0`` means the record's TOTALSIZE still frames it (its fields do
  not add up to it: reput skips ``size`` bytes); ``size == 0`` means nothing can be trusted from
  here: a bad magic (which is how a zero-filled tail shows), a TOTALSIZE below the smallest
  record, a negative topic length, or a body CRC mismatch. RocketMQ returns -1 for all of these.
* success: :class:`Valid`, :class:`DispatchRequest` or a ``MessageExt``.

Checks, in RocketMQ's order: magic; TOTALSIZE; body CRC (recovery only, ``check_crc``);
the length formula. A field that runs past TOTALSIZE is a formula mismatch. Malformed UTF-8 in
the topic or properties is replaced with U+FFFD, as Java's ``new String(bytes, UTF_8)`` does.

The decoders are pure functions over ``bytes``, ``bytearray``, ``memoryview`` or ``mmap``
(anything ``struct.unpack_from`` and slicing accept), so they can be shipped to Spark
executors. Results never reference ``buf``: bodies are copied into ``bytes``.

Speed, measured on the shared CI box (CPython 3.12.1 built without PGO/LTO, ~60 M empty
loop iterations/s), 100-byte body with KEYS + UNIQ_KEY + TAGS (a 282-byte record):
``encode_record_parts`` (the writer's path) ~1.0 us, half of what ``encode_record`` took
before hosts and topics were cached (``encode_record`` adds its keyword call and a join);
``decode_dispatch`` 2.5 us, about 400,000 records/s on one core, for bytes, memoryview and
mmap alike; ``check_record`` with CRC 2.6 us; ``decode_record`` 4.8 us. Of
``decode_dispatch``'s time about 40% is building the properties dict (one Python-level step
per pair; regex, ``dict(zip(...))`` over a pre-validated split and ``map``-based splitting
were all measured slower), so it grows by ~0.2 us per extra property.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

from mqcore.errors import CorruptRecordError, MessageIllegalError
from mqcore.format.body_crc import BODY_CRC_MASK, crc32
from mqcore.format.delay_levels import (
    DEFAULT_DELAY_LEVELS,
    DEFAULT_DELAY_LEVELS_MS,
    SCHEDULE_TOPIC,
    parse_delay_levels,
    schedule_deliver_ms,
)
from mqcore.format.hashing import tag_code
from mqcore.format.layout import (
    BLANK,
    BLANK_MAGIC_CODE,
    BODY_CRC_POSITION,
    BORN_HOST_POSITION,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    COMPRESSION_LZ4,
    COMPRESSION_TYPE_MASK,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    CRC32_RESERVED_LEN,
    DECODE_HEADERS,
    DISPATCH_HEADERS,
    ENCODE_HEADERS,
    END_FILE_MIN_BLANK_LENGTH,
    HEADER_SIZES,
    HOST_BYTES,
    HOST_V4,
    HOST_V6,
    HOST_V6_FLAGS,
    INNER_BATCH_FLAG,
    INT32,
    INT64,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    MULTI_TAGS_FLAG,
    NEED_UNWRAP_FLAG,
    PHYS_OFFSET_POSITION,
    PROPERTIES_LENGTH,
    REPUT_HEADER_V1_IPV4,
    SIZE_MAGIC,
    STOREHOSTADDRESS_V6_FLAG,
    SYSFLAG_POSITION,
    TOPIC_FIELDS,
    TOPIC_LENGTH_V1,
    TOPIC_LENGTH_V2,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    V1_MAX_TOPIC_BYTES,
    born_host_is_v6,
    cache_host_bytes,
    cache_topic_field,
    compression_type,
    record_size,
    reset_transaction_type,
    store_host_is_v6,
    store_timestamp_position,
    transaction_type,
)
from mqcore.format.msgid import IPV6_HOST_SIZE, HostAddress, ReadableBuffer
from mqcore.format.properties import (
    MAX_PROPERTIES_BYTES,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from mqcore.message import MessageExt

__all__ = [
    # layout (layout.py)
    "BLANK_MAGIC_CODE",
    "BORNHOST_V6_FLAG",
    "COMPRESSED_FLAG",
    "COMPRESSION_LZ4",
    "COMPRESSION_TYPE_MASK",
    "COMPRESSION_ZLIB",
    "COMPRESSION_ZSTD",
    "CRC32_RESERVED_LEN",
    "END_FILE_MIN_BLANK_LENGTH",
    "HOST_V6_FLAGS",
    "INNER_BATCH_FLAG",
    "MESSAGE_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V1",
    "MESSAGE_MAGIC_CODE_V2",
    "MIN_RECORD_SIZE",
    "MULTI_TAGS_FLAG",
    "NEED_UNWRAP_FLAG",
    "PHYS_OFFSET_POSITION",
    "STOREHOSTADDRESS_V6_FLAG",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "TRANSACTION_TYPE_MASK",
    "born_host_is_v6",
    "compression_type",
    "record_size",
    "reset_transaction_type",
    "store_host_is_v6",
    "store_timestamp_position",
    "transaction_type",
    # delay levels (delay_levels.py)
    "DEFAULT_DELAY_LEVELS",
    "DEFAULT_DELAY_LEVELS_MS",
    "SCHEDULE_TOPIC",
    "parse_delay_levels",
    # this module
    "Blank",
    "Corrupt",
    "DispatchRequest",
    "DispatchResult",
    "NeedMore",
    "ReadableBuffer",
    "RecordCheck",
    "Valid",
    "check_record",
    "decode_dispatch",
    "decode_record",
    "encode_blank",
    "encode_record",
    "encode_record_parts",
]

_PROPERTIES_LENGTH = PROPERTIES_LENGTH
_PROPERTIES_LENGTH_SIZE = PROPERTIES_LENGTH.size


# --- encoding ----------------------------------------------------------------------------------


def encode_record(
    *,
    topic: str,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phys_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: HostAddress,
    store_timestamp: int,
    store_host: HostAddress,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    properties: bytes,
) -> bytes:
    """Encode one CommitLog record.

    The IPv6 host bits of ``sys_flag`` are set from the hosts (given values are replaced),
    V2 is used only for a topic over 127 UTF-8 bytes, and BODYCRC is computed here. Sizes are
    not policed beyond what the layout can hold (see ``mqcore.validation``).

    Args:
        topic, queue_id, flag, queue_offset, phys_offset, sys_flag, born_timestamp, born_host,
        store_timestamp, store_host, reconsume_times, prepared_transaction_offset: the record
            fields of the same names (``layout`` has the table).
        body: the body as stored (already compressed if ``sys_flag`` says so).
        properties: the encoded PROPERTIES (``properties.encode_properties``).

    Returns:
        The record, ``record_size(...)`` bytes long.

    Raises:
        MessageIllegalError: properties over 32767 bytes, a topic over 32767 UTF-8 bytes or
            not encodable (lone surrogate), or an integer field outside its width.
        ValidationError: a host that is not an IP address and port.
    """
    parts: list[bytes] = []
    encode_record_parts(
        parts, topic, queue_id, flag, queue_offset, phys_offset, sys_flag, born_timestamp,
        born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset,
        body, properties,
    )  # fmt: skip
    return b"".join(parts)


def encode_record_parts(
    parts: list[bytes],
    topic: str,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phys_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: HostAddress,
    store_timestamp: int,
    store_host: HostAddress,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    properties: bytes,
) -> int:
    """:func:`encode_record` as pieces appended to ``parts`` (positional arguments, in record
    order): ``b"".join(parts)`` is the record. The CommitLog writer's hot path: a whole batch
    goes into one list and is joined once, so a body is copied once before the mapping.

    The checks and errors are :func:`encode_record`'s, in the same order; on an error nothing
    is appended. Encodings of hosts and topics are cached (a broker sees few of each). One
    record costs ~1.0 us on the CI box, about half of the former ``encode_record`` (its
    keyword call, two host encodings and the topic encoding every time); ``pack_into`` into
    a reused buffer measured slower, because each slice copy into a ``bytearray`` (~170 ns)
    costs more than its share of one ``join``.

    Returns:
        The record's size (its TOTALSIZE).

    Raises:
        As :func:`encode_record`.
    """
    born = HOST_BYTES.get(born_host) or cache_host_bytes(born_host)
    store = HOST_BYTES.get(store_host) or cache_host_bytes(store_host)
    variant = (len(born) == IPV6_HOST_SIZE) | ((len(store) == IPV6_HOST_SIZE) << 1)
    properties_length = len(properties)
    cached = TOPIC_FIELDS.get(topic)
    if cached is None or properties_length > MAX_PROPERTIES_BYTES:
        cached = cache_topic_field(topic, properties_length)
    topic_field, magic, fixed_sizes = cached
    body_length = len(body)
    total = fixed_sizes[variant] + body_length + len(topic_field) + properties_length
    try:
        header = ENCODE_HEADERS[variant].pack(
            total,
            magic,
            crc32(body) & BODY_CRC_MASK,  # body_crc.body_crc, inlined
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            (sys_flag & ~HOST_V6_FLAGS) | (variant << 4),
            born_timestamp,
            born,
            store_timestamp,
            store,
            reconsume_times,
            prepared_transaction_offset,
            body_length,
        )
    except struct.error as exc:
        raise MessageIllegalError(
            "record", "field_range", f"record: an integer field does not fit its width ({exc})"
        ) from None
    parts += (header, body, topic_field, _PROPERTIES_LENGTH.pack(properties_length), properties)
    return total


def encode_blank(max_blank: int) -> bytes:
    """The 8-byte end-of-file blank record: ``max_blank`` (bytes left in the file), BLANK magic.

    Raises:
        ValueError: ``max_blank`` is below 8 (the blank itself must fit).
    """
    if max_blank < END_FILE_MIN_BLANK_LENGTH:
        raise ValueError(f"a blank record needs 8 bytes, only {max_blank} left")
    return BLANK.pack(max_blank, BLANK_MAGIC_CODE)


# --- read results ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Valid:
    """A well-formed record of ``size`` bytes (its PHYSICALOFFSET and STORETIMESTAMP too)."""

    size: int
    phys_offset: int
    store_timestamp: int


@dataclass(frozen=True, slots=True)
class Blank:
    """The end-of-file blank record: continue at the next file's start."""


@dataclass(frozen=True, slots=True)
class NeedMore:
    """The record runs past ``limit``; it claims ``needed`` bytes from ``pos``."""

    needed: int


@dataclass(frozen=True, slots=True)
class Corrupt:
    """Not a valid record. ``size > 0``: skip that many bytes; ``size == 0``: stop here."""

    size: int
    detail: str


@dataclass(frozen=True, slots=True)
class DispatchRequest:
    """What reput hands the dispatchers for one record (spec 6.1).

    Attributes:
        phys_offset: the record's PHYSICALOFFSET field; ``size`` its TOTALSIZE.
        tags_code: the consume-queue tag code (spec 3.1): the TAGS hash, or the deliver
            time for a delayed record in SCHEDULE_TOPIC_XXXX.
        keys: the raw ``KEYS`` value (space-separated; ``properties.split_keys``), or None.
        uniq_key: the ``UNIQ_KEY`` property, or None.
        properties: all properties; treat as read-only.
    """

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str]

    @property
    def transaction_type(self) -> int:
        """One of the ``TRANSACTION_*_TYPE`` values."""
        return self.sys_flag & TRANSACTION_TYPE_MASK


RecordCheck = Valid | Blank | NeedMore | Corrupt
DispatchResult = DispatchRequest | Blank | NeedMore | Corrupt

_BLANK = Blank()
_NEED_HEAD = NeedMore(SIZE_MAGIC.size)


# --- framing shared by the readers --------------------------------------------------------------


def _frame(
    buf: ReadableBuffer, pos: int, limit: int, check_crc: bool
) -> tuple[int, int, int, int, int] | Blank | NeedMore | Corrupt:
    """Validate the record at ``pos`` (module docstring: order of checks and result kinds).

    Returns:
        On success ``(total, variant, body_length, topic_length_size, topic_length)``; the
        topic starts at ``pos + HEADER_SIZES[variant] + body_length + topic_length_size``.
    """
    available = limit - pos
    if available < SIZE_MAGIC.size:
        return _NEED_HEAD
    total, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic == MESSAGE_MAGIC_CODE:
        topic_length_size = TOPIC_LENGTH_V1.size
    elif magic == MESSAGE_MAGIC_CODE_V2:
        topic_length_size = TOPIC_LENGTH_V2.size
    elif magic == BLANK_MAGIC_CODE:
        return _BLANK
    else:
        return Corrupt(0, f"illegal magic code 0x{magic & 0xFFFFFFFF:08X}")
    if total < MIN_RECORD_SIZE:
        return Corrupt(0, f"TOTALSIZE {total} is below the smallest record ({MIN_RECORD_SIZE})")
    if available < total:
        return NeedMore(total)
    end = pos + total
    # Low byte of SYSFLAG; bits 4 and 5 pick the host widths.
    variant = (buf[pos + SYSFLAG_POSITION + INT32.size - 1] >> 4) & 3
    body_pos = pos + HEADER_SIZES[variant]
    if body_pos + topic_length_size + _PROPERTIES_LENGTH_SIZE > end:
        return Corrupt(total, f"length mismatch: TOTALSIZE {total} cannot hold the header")
    (body_length,) = INT32.unpack_from(buf, body_pos - INT32.size)
    topic_length_pos = body_pos + body_length
    if body_length < 0 or topic_length_pos + topic_length_size + _PROPERTIES_LENGTH_SIZE > end:
        return Corrupt(total, f"length mismatch: body length {body_length}, TOTALSIZE {total}")
    if check_crc and body_length > 0:
        (stored_crc,) = INT32.unpack_from(buf, pos + BODY_CRC_POSITION)
        crc = crc32(buf[body_pos:topic_length_pos]) & BODY_CRC_MASK
        if crc != stored_crc:
            return Corrupt(0, f"body CRC mismatch: stored {stored_crc}, computed {crc}")
    if topic_length_size == 1:
        topic_length = buf[topic_length_pos]
        if topic_length > V1_MAX_TOPIC_BYTES:  # negative as a signed byte: Java throws
            return Corrupt(0, f"negative V1 topic length {topic_length - 256}")
    else:
        (topic_length,) = TOPIC_LENGTH_V2.unpack_from(buf, topic_length_pos)
        if topic_length < 0:
            return Corrupt(0, f"negative V2 topic length {topic_length}")
    properties_length_pos = topic_length_pos + topic_length_size + topic_length
    if properties_length_pos + _PROPERTIES_LENGTH_SIZE > end:
        return Corrupt(total, f"length mismatch: topic length {topic_length}, TOTALSIZE {total}")
    (properties_length,) = PROPERTIES_LENGTH.unpack_from(buf, properties_length_pos)
    expected = properties_length_pos + _PROPERTIES_LENGTH_SIZE + properties_length - pos
    if properties_length < 0 or expected != total:
        return Corrupt(
            total,
            f"length mismatch: TOTALSIZE {total}, fields add up to {expected} (body"
            f" {body_length}, topic {topic_length}, properties {properties_length})",
        )
    return total, variant, body_length, topic_length_size, topic_length


def _properties_at(buf: ReadableBuffer, start: int, end: int) -> dict[str, str]:
    """Decode PROPERTIES in ``buf[start:end]`` (``properties.decode_properties``, inlined)."""
    props: dict[str, str] = {}
    if start < end:
        for segment in str(buf[start:end], "utf-8", "replace").split("\x02"):
            name, _, value = segment.partition("\x01")
            if name and value:  # Java: first \x01 neither first nor last in the segment
                props[name] = value
    return props


# --- check_record ------------------------------------------------------------------------------


def check_record(
    buf: ReadableBuffer, pos: int, limit: int, *, check_crc: bool = True
) -> RecordCheck:
    """Check the record at ``buf[pos:limit]`` as recovery does (spec 5.5).

    Args:
        buf: bytes, bytearray, memoryview or mmap holding the record.
        pos: where the record starts in ``buf``.
        limit: end of the readable bytes in ``buf`` (exclusive, at most ``len(buf)``); pass
            the file's end, not a larger one, so a record can never straddle files.
        check_crc: recompute the body CRC (``checkCRCOnRecover``, default on).

    Returns:
        :class:`Valid`, :class:`Blank`, :class:`NeedMore` or :class:`Corrupt` (the module
        docstring says what their sizes mean).
    """
    framed = _frame(buf, pos, limit, check_crc)
    if not isinstance(framed, tuple):
        return framed
    total, variant, _, _, _ = framed
    (phys_offset,) = INT64.unpack_from(buf, pos + PHYS_OFFSET_POSITION)
    store_timestamp_pos = BORN_HOST_POSITION + (HOST_V6.size if variant & 1 else HOST_V4.size)
    (store_timestamp,) = INT64.unpack_from(buf, pos + store_timestamp_pos)
    return Valid(total, phys_offset, store_timestamp)


# --- decode_record -----------------------------------------------------------------------------


class _MessageExtBuilder:
    """Same slots as :class:`MessageExt`; see ``_DispatchBuilder`` for why this exists."""

    __slots__ = tuple(f.name for f in fields(MessageExt))


assert _MessageExtBuilder.__slots__ == MessageExt.__slots__


def decode_record(
    buf: ReadableBuffer,
    pos: int,
    *,
    read_body: bool = True,
    limit: int | None = None,
    file: str = "<buffer>",
) -> MessageExt:
    """Decode the whole record at ``pos`` (``lookMessageByOffset``, spec 7.3).

    Framing is checked as in :func:`check_record`; the body CRC is not (the record is expected
    to have passed recovery already).

    Args:
        buf: bytes, bytearray, memoryview or mmap.
        pos: where the record starts.
        read_body: copy the body; False leaves ``body`` empty.
        limit: end of the readable bytes; default ``len(buf)``.
        file: names the source in errors.

    Raises:
        CorruptRecordError: no complete, well-framed record at ``pos`` (blank, bad magic,
            truncated, length mismatch).
    """
    framed = _frame(buf, pos, len(buf) if limit is None else limit, False)
    if not isinstance(framed, tuple):
        raise CorruptRecordError(file, pos, _describe_failure(framed))
    total, variant, body_length, topic_length_size, topic_length = framed
    values = DECODE_HEADERS[variant].unpack_from(buf, pos)
    body_pos = pos + HEADER_SIZES[variant]
    topic_pos = body_pos + body_length + topic_length_size
    properties_pos = topic_pos + topic_length + _PROPERTIES_LENGTH_SIZE
    m: Any = _MessageExtBuilder()  # filled in, then turned into the frozen class
    (
        _,
        m.magic_code,
        m.body_crc,
        m.queue_id,
        m.flag,
        m.queue_offset,
        m.phys_offset,
        m.sys_flag,
        m.born_timestamp,
        born_ip,
        born_port,
        m.store_timestamp,
        store_ip,
        store_port,
        m.reconsume_times,
        m.prepared_transaction_offset,
        _,
    ) = values
    m.store_size = total
    m.born_host = HostAddress(_ip_text(born_ip), born_port)
    m.store_host = HostAddress(_ip_text(store_ip), store_port)
    m.body = bytes(buf[body_pos : body_pos + body_length]) if read_body else b""
    m.topic = str(buf[topic_pos : topic_pos + topic_length], "utf-8", "replace")
    m.properties = _properties_at(buf, properties_pos, pos + total)
    m.__class__ = MessageExt
    return cast(MessageExt, m)


def _ip_text(raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def _describe_failure(result: Blank | NeedMore | Corrupt) -> str:
    if isinstance(result, Blank):
        return "blank (end-of-file) record, not a message"
    if isinstance(result, NeedMore):
        return f"record truncated: it needs {result.needed} bytes"
    return result.detail


# --- decode_dispatch ---------------------------------------------------------------------------

_FAST_DISPATCH_HEADER = REPUT_HEADER_V1_IPV4
_FAST_HEADER_SIZE = _FAST_DISPATCH_HEADER.size
assert _FAST_HEADER_SIZE == HEADER_SIZES[0]


class _DispatchBuilder:
    """Same slots, same order, as :class:`DispatchRequest`, but assignable.

    A frozen dataclass sets each field through ``object.__setattr__`` (about 140 ns a field on
    the CI box, 1.7 us for DispatchRequest's twelve); a plain slot store costs ~20 ns. The
    decoders fill one of these and then set ``__class__`` to the frozen class, which CPython
    allows because the layouts are identical (asserted below). The result is an ordinary,
    frozen DispatchRequest.
    """

    __slots__ = tuple(f.name for f in fields(DispatchRequest))


assert _DispatchBuilder.__slots__ == DispatchRequest.__slots__


def decode_dispatch(
    buf: ReadableBuffer,
    pos: int,
    limit: int,
    *,
    delay_levels_ms: Sequence[int] = DEFAULT_DELAY_LEVELS_MS,
) -> DispatchResult:
    """Decode what reput needs from the record at ``pos``: no body copy, no CRC check.

    Framing is checked exactly as :func:`check_record` does with ``check_crc=False``.

    Args:
        buf: bytes, bytearray, memoryview or mmap.
        pos: where the record starts.
        limit: end of the readable bytes (exclusive), e.g. the confirm offset.
        delay_levels_ms: ms per delay level (level 1 first), for SCHEDULE_TOPIC_XXXX tag codes.

    Returns:
        :class:`DispatchRequest`, :class:`Blank`, :class:`NeedMore` or :class:`Corrupt`.
    """
    # Fast path: a complete, well-framed V1 record with IPv4 hosts, the shape of nearly every
    # record. One unpack, _frame's checks inlined, no helper calls (each costs ~80 ns on the CI
    # box). Anything else, including every failure, takes the general path, which alone
    # decides what kind of failure it is.
    if limit - pos < MIN_RECORD_SIZE:
        return _decode_dispatch_general(buf, pos, limit, delay_levels_ms)
    (
        total,
        magic,
        queue_id,
        queue_offset,
        phys_offset,
        sys_flag,
        store_timestamp,
        prepared_transaction_offset,
        body_length,
    ) = _FAST_DISPATCH_HEADER.unpack_from(buf, pos)
    end = pos + total
    topic_pos = pos + _FAST_HEADER_SIZE + body_length + 1
    if (
        magic != MESSAGE_MAGIC_CODE
        or sys_flag & HOST_V6_FLAGS
        or not MIN_RECORD_SIZE <= total <= limit - pos
        or body_length < 0
        or topic_pos + _PROPERTIES_LENGTH_SIZE > end
    ):
        return _decode_dispatch_general(buf, pos, limit, delay_levels_ms)
    topic_length = buf[topic_pos - 1]
    properties_pos = topic_pos + topic_length + _PROPERTIES_LENGTH_SIZE
    if (
        topic_length > V1_MAX_TOPIC_BYTES
        or properties_pos > end
        or properties_pos + _PROPERTIES_LENGTH.unpack_from(buf, properties_pos - 2)[0] != end
    ):
        return _decode_dispatch_general(buf, pos, limit, delay_levels_ms)

    props: dict[str, str] = {}  # _properties_at, inlined
    if properties_pos < end:
        for segment in str(buf[properties_pos:end], "utf-8", "replace").split("\x02"):
            name, _, value = segment.partition("\x01")
            if name and value:
                props[name] = value
    get = props.get
    tags = get(PROPERTY_TAGS)
    tags_code = tag_code(tags)
    topic = str(buf[topic_pos : topic_pos + topic_length], "utf-8", "replace")
    if topic == SCHEDULE_TOPIC:
        deliver_ms = schedule_deliver_ms(props, store_timestamp, delay_levels_ms)
        if deliver_ms is not None:
            tags_code = deliver_ms
    r: Any = _DispatchBuilder()
    r.topic = topic
    r.queue_id = queue_id
    r.queue_offset = queue_offset
    r.phys_offset = phys_offset
    r.size = total
    r.tags_code = tags_code
    r.store_timestamp = store_timestamp
    r.keys = get(PROPERTY_KEYS)
    r.uniq_key = get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    r.sys_flag = sys_flag
    r.prepared_transaction_offset = prepared_transaction_offset
    r.properties = props
    r.__class__ = DispatchRequest
    request: DispatchRequest = r  # no cast(): a call costs ~60 ns here
    return request


def _decode_dispatch_general(
    buf: ReadableBuffer, pos: int, limit: int, delay_levels_ms: Sequence[int]
) -> DispatchResult:
    framed = _frame(buf, pos, limit, False)
    if not isinstance(framed, tuple):
        return framed
    total, variant, body_length, topic_length_size, topic_length = framed
    values = DISPATCH_HEADERS[variant].unpack_from(buf, pos)
    topic_pos = pos + HEADER_SIZES[variant] + body_length + topic_length_size
    properties_pos = topic_pos + topic_length + _PROPERTIES_LENGTH_SIZE
    r: Any = _DispatchBuilder()
    (
        _,
        _,
        _,
        r.queue_id,
        _,
        r.queue_offset,
        r.phys_offset,
        r.sys_flag,
        _,
        r.store_timestamp,
        _,
        r.prepared_transaction_offset,
        _,
    ) = values
    r.topic = str(buf[topic_pos : topic_pos + topic_length], "utf-8", "replace")
    r.size = total
    r.properties = _properties_at(buf, properties_pos, pos + total)
    _fill_from_properties(r, delay_levels_ms)
    r.__class__ = DispatchRequest
    return cast(DispatchRequest, r)


def _fill_from_properties(r: Any, delay_levels_ms: Sequence[int]) -> None:
    """Set keys, uniq_key and tags_code (spec 6.1, 3.1) on a request still being built."""
    props = r.properties
    get = props.get
    r.keys = get(PROPERTY_KEYS)
    r.uniq_key = get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    tags = get(PROPERTY_TAGS)
    tags_code = tag_code(tags)
    if r.topic == SCHEDULE_TOPIC:
        deliver_ms = schedule_deliver_ms(props, r.store_timestamp, delay_levels_ms)
        if deliver_ms is not None:
            tags_code = deliver_ms
    r.tags_code = tags_code
