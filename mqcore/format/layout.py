"""CommitLog record layout: magic codes, SYSFLAG bits, Structs and the length formula (spec 1.1-1.4).

``mqcore.format.record`` re-exports everything public here; import from there. The end of the
module keeps the writer's cached encodings of hosts and topics (``TOPIC_FIELDS``, ``HOST_BYTES``).

Record layout, all integers big-endian and signed (offsets for V1 with IPv4 born and store
hosts; an IPv6 born host adds 12 to every offset from STORETIMESTAMP on, an IPv6 store host
adds 12 from RECONSUMETIMES on)::

    offset  width    field                         notes
    0       4        TOTALSIZE                     whole record, this field included
    4       4        MAGICCODE                     V1 0xDAA320A7 / V2 0xDAA320AB
    8       4        BODYCRC                       masked CRC-32 of BODY
    12      4        QUEUEID
    16      4        FLAG                          opaque, from the producer
    20      8        QUEUEOFFSET                   index in the consume queue
    28      8        PHYSICALOFFSET                this record's own commit-log offset
    36      4        SYSFLAG                       bits below
    40      8        BORNTIMESTAMP                 producer ms
    48      8|20     BORNHOST                      ip 4|16 bytes + port int32 (SYSFLAG 0x10)
    56      8        STORETIMESTAMP                broker ms, taken inside the put lock
    64      8|20     STOREHOSTADDRESS              ip 4|16 bytes + port int32 (SYSFLAG 0x20)
    72      4        RECONSUMETIMES
    76      8        PREPARED_TRANSACTION_OFFSET   half message offset for commit/rollback
    84      4        BODYLENGTH                    n >= 0
    88      n        BODY                          as stored (maybe compressed)
    88+n    1|2      TOPICLENGTH                   signed byte (V1) or int16 (V2)
    ..      t        TOPIC                         UTF-8
    ..      2        PROPERTIESLENGTH              int16, 0..32767
    ..      p        PROPERTIES                    ``name\\x01value\\x02...`` (see properties)

    TOTALSIZE = 91 + n + t + p   (V1, IPv4/IPv4; +1 for V2, +12 per IPv6 host)

Writers choose V2 only for topics over 127 UTF-8 bytes; readers accept both.

End-of-file blank record (spec 1.4)::

    | TOTALSIZE int32 = bytes left in the file | MAGICCODE int32 = BLANK_MAGIC_CODE |

followed by whatever the file held (zeros). Readers ignore the size and go on at the next file.

SYSFLAG bits (``MessageSysFlag``)::

    0x001 compressed body          0x010 IPv6 born host        0x080 inner batch
    0x002 multi-tags               0x020 IPv6 store host       0x700 compression type
    0x00C transaction type         0x040 need-unwrap                 (1 LZ4, 2 ZSTD, 3 ZLIB)
          (0 none, 4 prepared, 8 commit, C rollback)

Every fixed run of fields has one ``struct.Struct``; positions are derived from them, never
typed in. The three header families (encode, full decode, dispatch decode) are the same
TOTALSIZE..BODYLENGTH run for each IPv4/IPv6 host combination, indexed by
``(sys_flag >> 4) & 3``.
"""

from __future__ import annotations

import struct

from mqcore.errors import MessageIllegalError
from mqcore.format.msgid import IPV4_HOST_SIZE, IPV6_HOST_SIZE, HostAddress, encode_host
from mqcore.format.properties import MAX_PROPERTIES_BYTES

# --- magic codes and constants (spec 1.1) ------------------------------------------------------

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7, V1: topic length is 1 byte
MESSAGE_MAGIC_CODE_V1 = MESSAGE_MAGIC_CODE
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB: topic length is 2 bytes
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194: end-of-file filler
CRC32_RESERVED_LEN = 20  # len("__CRC32#") + 1 + 10 digits + 1, when the property CRC is on
V1_MAX_TOPIC_BYTES = 127  # the V1 topic length byte is signed
V2_MAX_TOPIC_BYTES = 32767

# --- SYSFLAG bits (spec 1.3) -------------------------------------------------------------------

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
HOST_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
COMPRESSION_ZLIB = 3


def transaction_type(sys_flag: int) -> int:
    """The transaction type bits: one of the ``TRANSACTION_*_TYPE`` values."""
    return sys_flag & TRANSACTION_TYPE_MASK


def reset_transaction_type(sys_flag: int, tx_type: int) -> int:
    """``sys_flag`` with its transaction type replaced by ``tx_type``."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | (tx_type & TRANSACTION_TYPE_MASK)


def born_host_is_v6(sys_flag: int) -> bool:
    """Whether BORNHOST is 20 bytes (IPv6)."""
    return bool(sys_flag & BORNHOST_V6_FLAG)


def store_host_is_v6(sys_flag: int) -> bool:
    """Whether STOREHOSTADDRESS is 20 bytes (IPv6)."""
    return bool(sys_flag & STOREHOSTADDRESS_V6_FLAG)


def compression_type(sys_flag: int) -> int:
    """``COMPRESSION_*`` of a compressed body; legacy records (type bits 0) mean zlib."""
    return ((sys_flag & COMPRESSION_TYPE_MASK) >> 8) or COMPRESSION_ZLIB


# --- fixed runs of fields ----------------------------------------------------------------------

PREFIX = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE
    "i"  # BODYCRC
    "i"  # QUEUEID
    "i"  # FLAG
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "q"  # BORNTIMESTAMP
)
HOST_V4 = struct.Struct(
    ">"
    "4s"  # IPv4 address
    "i"  # port
)
HOST_V6 = struct.Struct(
    ">"
    "16s"  # IPv6 address
    "i"  # port
)
STORE_TIMESTAMP = struct.Struct(">q")  # STORETIMESTAMP, between the two hosts
MIDDLE = struct.Struct(
    ">"
    "i"  # RECONSUMETIMES
    "q"  # PREPARED_TRANSACTION_OFFSET
    "i"  # BODYLENGTH
)
TOPIC_LENGTH_V1 = struct.Struct(">b")  # TOPICLENGTH, V1: signed byte
TOPIC_LENGTH_V2 = struct.Struct(">h")  # TOPICLENGTH, V2
PROPERTIES_LENGTH = struct.Struct(">h")  # PROPERTIESLENGTH: signed, 0..32767
BLANK = struct.Struct(
    ">"
    "i"  # TOTALSIZE: the rest of the file (max_blank); ignored by readers
    "i"  # MAGICCODE: BLANK_MAGIC_CODE
)
SIZE_MAGIC = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE: the two fields every reader looks at first
)
INT32 = struct.Struct(">i")  # a lone BODYCRC or BODYLENGTH
INT64 = struct.Struct(">q")  # a lone PHYSICALOFFSET or STORETIMESTAMP
END_FILE_MIN_BLANK_LENGTH = BLANK.size  # 8

assert HOST_V4.size == IPV4_HOST_SIZE and HOST_V6.size == IPV6_HOST_SIZE

# Positions inside the prefix, the same in every variant (MessageDecoder's constants).
MAGIC_POSITION = struct.calcsize(">i")  # 4
BODY_CRC_POSITION = struct.calcsize(">ii")  # 8
QUEUE_ID_POSITION = struct.calcsize(">iii")  # 12
FLAG_POSITION = struct.calcsize(">iiii")  # 16
QUEUE_OFFSET_POSITION = struct.calcsize(">iiiii")  # 20
PHYS_OFFSET_POSITION = struct.calcsize(">iiiiiq")  # 28
SYSFLAG_POSITION = struct.calcsize(">iiiiiqq")  # 36
BORN_TIMESTAMP_POSITION = struct.calcsize(">iiiiiqqi")  # 40
BORN_HOST_POSITION = PREFIX.size  # 48
assert PREFIX.size == BORN_TIMESTAMP_POSITION + INT64.size


def store_timestamp_position(sys_flag: int) -> int:
    """Offset of STORETIMESTAMP in a record with this SYSFLAG (56; 68 with an IPv6 born host)."""
    return BORN_HOST_POSITION + (HOST_V6.size if sys_flag & BORNHOST_V6_FLAG else HOST_V4.size)


# --- whole headers, TOTALSIZE..BODYLENGTH, per host variant --------------------------------------

HOST_VARIANTS = ((False, False), (True, False), (False, True), (True, True))
"""(born host is IPv6, store host is IPv6) for variant index ``(sys_flag >> 4) & 3``."""


def _header(born: str, store: str) -> struct.Struct:
    fixed = PREFIX.format[1:], STORE_TIMESTAMP.format[1:], MIDDLE.format[1:]
    return struct.Struct(">" + fixed[0] + born + fixed[1] + store + fixed[2])


def _host_codes(v6: bool, pad: str) -> str:
    """A host as one field: ``Ns`` (bytes, for the encoder) or ``Nx`` (skipped)."""
    return f"{HOST_V6.size if v6 else HOST_V4.size}{pad}"


def _host_fields(v6: bool) -> str:
    return (HOST_V6 if v6 else HOST_V4).format[1:]


ENCODE_HEADERS = tuple(_header(_host_codes(b, "s"), _host_codes(s, "s")) for b, s in HOST_VARIANTS)
"""Hosts as whole 8/20-byte strings, as ``msgid.encode_host`` returns them."""
DECODE_HEADERS = tuple(_header(_host_fields(b), _host_fields(s)) for b, s in HOST_VARIANTS)
"""Every field, each host as (address bytes, port): 17 values."""
DISPATCH_HEADERS = tuple(
    _header(_host_codes(b, "x"), _host_codes(s, "x")) for b, s in HOST_VARIANTS
)
"""Hosts skipped: 13 values."""
HEADER_SIZES = tuple(h.size for h in ENCODE_HEADERS)  # 88, 100, 100, 112
assert HEADER_SIZES == tuple(h.size for h in DECODE_HEADERS)
assert HEADER_SIZES == tuple(h.size for h in DISPATCH_HEADERS)

REPUT_HEADER_V1_IPV4 = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE
    "4x"  # BODYCRC
    "i"  # QUEUEID
    "4x"  # FLAG
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "8x"  # BORNTIMESTAMP
    "8x"  # BORNHOST (IPv4)
    "q"  # STORETIMESTAMP
    "8x"  # STOREHOSTADDRESS (IPv4)
    "4x"  # RECONSUMETIMES
    "q"  # PREPARED_TRANSACTION_OFFSET
    "i"  # BODYLENGTH
)
"""The fields reput needs from a V1 record with IPv4 hosts (the common case), the rest skipped
with pad bytes: TOTALSIZE, MAGICCODE, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG,
STORETIMESTAMP, PREPARED_TRANSACTION_OFFSET, BODYLENGTH."""
assert REPUT_HEADER_V1_IPV4.size == HEADER_SIZES[0]

MIN_RECORD_SIZE = HEADER_SIZES[0] + TOPIC_LENGTH_V1.size + PROPERTIES_LENGTH.size
assert MIN_RECORD_SIZE == 91  # spec 1.2: the fixed overhead of V1 with IPv4 hosts
FIXED_SIZES_V1 = tuple(h + TOPIC_LENGTH_V1.size + PROPERTIES_LENGTH.size for h in HEADER_SIZES)
FIXED_SIZES_V2 = tuple(h + TOPIC_LENGTH_V2.size + PROPERTIES_LENGTH.size for h in HEADER_SIZES)


def record_size(
    body_length: int,
    topic_length: int,
    properties_length: int,
    *,
    sys_flag: int = 0,
    v2: bool = False,
) -> int:
    """The length formula (``calMsgLength``): TOTALSIZE of a record with these parts.

    Args:
        body_length: BODY bytes.
        topic_length: TOPIC bytes (UTF-8).
        properties_length: PROPERTIES bytes.
        sys_flag: only the IPv6 host bits (0x10, 0x20) matter.
        v2: the topic length takes 2 bytes (magic V2) instead of 1.

    Returns:
        ``91 + body + topic + properties`` for V1 and IPv4 hosts; +1 for V2, +12 per IPv6 host.
    """
    fixed = (FIXED_SIZES_V2 if v2 else FIXED_SIZES_V1)[(sys_flag >> 4) & 3]
    return fixed + body_length + topic_length + properties_length


# --- the writer's cached encodings of hosts and topics -------------------------------------------
#
# encode_record_parts (record.py) looks hosts and topics up here before encoding them: a broker
# sees a handful of each. Bounded: past the limit, new ones are encoded on every call instead.
# Only successful encodings are cached, so errors are raised every time, as before.

_CACHE_LIMIT = 4096
HOST_BYTES: dict[HostAddress, bytes] = {}
"""``msgid.encode_host(host)`` by host."""
TOPIC_FIELDS: dict[str, tuple[bytes, int, tuple[int, ...]]] = {}
"""topic -> (TOPICLENGTH + TOPIC bytes, MAGICCODE, fixed sizes by host variant without the
TOPICLENGTH width): ``total = fixed[variant] + body + len(field) + properties``."""
_V1_TOPIC_LENGTH_BYTES = tuple(bytes((n,)) for n in range(V1_MAX_TOPIC_BYTES + 1))


def cache_host_bytes(host: HostAddress) -> bytes:
    """``encode_host(host)``, remembered in :data:`HOST_BYTES`.

    Raises:
        ValidationError: as ``encode_host``.
    """
    encoded = encode_host(host)
    if len(HOST_BYTES) < _CACHE_LIMIT:
        HOST_BYTES[host] = encoded
    return encoded


def cache_topic_field(topic: str, properties_length: int) -> tuple[bytes, int, tuple[int, ...]]:
    """The :data:`TOPIC_FIELDS` entry of ``topic``, remembered, after ``encode_record``'s
    checks of the topic and of the properties length, in its order (encode the topic, check
    the properties length, check the topic length).

    Raises:
        MessageIllegalError: topic not encodable or over 32767 bytes, properties over 32767.
    """
    try:
        topic_bytes = topic.encode("utf-8")
    except UnicodeEncodeError:
        raise MessageIllegalError("topic", "utf8", "topic: must be valid Unicode text") from None
    if properties_length > MAX_PROPERTIES_BYTES:
        raise MessageIllegalError(
            "properties",
            "max_size",
            f"properties: must be at most {MAX_PROPERTIES_BYTES} bytes encoded"
            f" (got {properties_length})",
        )
    topic_length = len(topic_bytes)
    if topic_length <= V1_MAX_TOPIC_BYTES:
        field = (
            _V1_TOPIC_LENGTH_BYTES[topic_length] + topic_bytes,
            MESSAGE_MAGIC_CODE,
            tuple(size - TOPIC_LENGTH_V1.size for size in FIXED_SIZES_V1),
        )
    elif topic_length <= V2_MAX_TOPIC_BYTES:
        field = (
            TOPIC_LENGTH_V2.pack(topic_length) + topic_bytes,
            MESSAGE_MAGIC_CODE_V2,
            tuple(size - TOPIC_LENGTH_V2.size for size in FIXED_SIZES_V2),
        )
    else:
        raise MessageIllegalError(
            "topic",
            "max_length",
            f"topic: must be at most {V2_MAX_TOPIC_BYTES} bytes as UTF-8 (got {topic_length})",
        )
    if len(TOPIC_FIELDS) < _CACHE_LIMIT:
        TOPIC_FIELDS[topic] = field
    return field
