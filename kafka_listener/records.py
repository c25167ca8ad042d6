"""Record batch v2 (magic 2): split, CRC-check, decode and build. The Produce/Fetch hot path.

Batch header, 61 bytes big-endian (kafka-protocol.md section 3.1)::

    offset size field                  notes
     0     8   base_offset int64       broker overwrites with the first assigned offset
     8     4   batch_length int32      bytes after this field (= batch size - 12)
    12     4   partition_leader_epoch  not covered by the CRC
    16     1   magic int8              2; 0/1 (legacy MessageSet) → INVALID_RECORD
    17     4   crc uint32              CRC-32C of bytes 21 .. end of batch
    21     2   attributes int16        bits 0-2 codec, 3 LogAppendTime, 4 txn, 5 control
    23     4   last_offset_delta int32
    27     8   base_timestamp int64
    35     8   max_timestamp int64
    43     8   producer_id int64       -1 unless idempotent
    51     2   producer_epoch int16
    53     4   base_sequence int32
    57     4   records_count int32
    61     …   records (compressed as one blob when bits 0-2 ≠ 0)

Records inside a batch are encoded and parsed by ``record_codec.py``; decoded records are
:class:`~kafka_listener.record_codec.Record` tuples.

Errors: every malformed batch raises :class:`~mqcore.errors.RemoteProtocolError` whose
``error_code`` is the partition error to answer with: CORRUPT_MESSAGE (2) for a bad CRC,
a length that disagrees with the bytes, or an unparsable record; INVALID_RECORD (87) for
magic 0/1; UNSUPPORTED_COMPRESSION_TYPE (76) for codecs 5-7.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import google_crc32c

from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .compression import MAX_DECOMPRESSED_BYTES, Compression, compress, decompress
from .errors import ErrorCode
from .record_codec import Header as Header
from .record_codec import Record as Record
from .record_codec import RecordLike as RecordLike
from .record_codec import decode_records_section
from .record_codec import encode_records as encode_records

HEADER = struct.Struct(
    ">"
    "q"  # base_offset
    "i"  # batch_length
    "i"  # partition_leader_epoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # last_offset_delta
    "q"  # base_timestamp
    "q"  # max_timestamp
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # base_sequence
    "i"  # records_count
)
HEADER_SIZE = HEADER.size  # 61
# Offsets inside the header, derived from the format string rather than typed in.
LOG_OVERHEAD = struct.calcsize(">qi")  # base_offset + batch_length, not in batch_length
MAGIC_OFFSET = struct.calcsize(">qii")  # 16
CRC_OFFSET = struct.calcsize(">qiib")  # 17
CRC_START = struct.calcsize(">qiibI")  # 21: the CRC covers attributes .. end
# Encoding packs the two halves around the CRC separately so the CRC can be computed
# over the second half + records without building the batch twice.
_HEAD = struct.Struct(HEADER.format[: 1 + len("qiibI")])
_TAIL = struct.Struct(">" + HEADER.format[1 + len("qiibI") :])
_PATCH = struct.Struct(">qii")  # base_offset, batch_length, partition_leader_epoch
_MAX_TIMESTAMP = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
MAX_TIMESTAMP_OFFSET = struct.calcsize(">qiibIhiq")  # 35
assert HEADER_SIZE == 61 and CRC_START == 21 and _HEAD.size + _TAIL.size == HEADER_SIZE

MAGIC = 2
ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_CORRUPT = ErrorCode.CORRUPT_MESSAGE


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte batch header, as read from the wire."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def next_offset(self) -> int:
        """The offset after this batch's last record: base + last_offset_delta + 1."""
        return self.base_offset + self.last_offset_delta + 1


class RawBatch(NamedTuple):
    """One undecoded batch: its parsed header and its complete bytes."""

    header: BatchHeader
    data: bytes


@dataclass(slots=True)
class RecordBatch:
    """A decoded batch: the header and its records."""

    header: BatchHeader
    records: list[Record]

    def encode(self, compression: int | None = None) -> bytes:
        """Re-encode with the same header fields (fresh CRC, batch length and records
        section); ``compression`` overrides the original codec."""
        h = self.header
        return encode_batch(
            self.records,
            base_offset=h.base_offset,
            base_timestamp=h.base_timestamp,
            max_timestamp=h.max_timestamp,
            last_offset_delta=h.last_offset_delta,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            partition_leader_epoch=h.partition_leader_epoch,
            compression=h.compression if compression is None else compression,
            log_append_time=h.is_log_append_time,
            transactional=h.is_transactional,
            control=h.is_control,
        )


# -- splitting and checking --------------------------------------------------------------


def read_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``data[pos]`` (no CRC check).

    Raises:
        RemoteProtocolError: INVALID_RECORD for magic ≠ 2; CORRUPT_MESSAGE if truncated
            or if ``batch_length`` is shorter than a header.
    """
    if len(data) - pos <= MAGIC_OFFSET:
        raise RemoteProtocolError("truncated record batch header", _CORRUPT)
    magic = data[pos + MAGIC_OFFSET]
    if magic != MAGIC:
        raise RemoteProtocolError(
            f"record batch magic {magic}, only 2 is supported", ErrorCode.INVALID_RECORD
        )
    if len(data) - pos < HEADER_SIZE:
        raise RemoteProtocolError("truncated record batch header", _CORRUPT)
    header = BatchHeader(*HEADER.unpack_from(data, pos))
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise RemoteProtocolError(f"batch length {header.batch_length} too short", _CORRUPT)
    return header


def split_batches(data: bytes | memoryview, *, allow_truncated: bool = False) -> list[RawBatch]:
    """Cut a ``records`` field into its batches without decoding records.

    Args:
        data: concatenated record batches.
        allow_truncated: fetch-style data may end with a partial batch (Kafka cuts at
            the size limit); drop it silently instead of raising.

    Returns:
        The complete batches in order.

    Raises:
        RemoteProtocolError: see :func:`read_header`; CORRUPT_MESSAGE for trailing bytes
            that are not a whole batch (unless ``allow_truncated``).
    """
    view = memoryview(data)
    end = len(view)
    pos = 0
    batches: list[RawBatch] = []
    while pos < end:
        if end - pos < HEADER_SIZE:
            if allow_truncated:
                break
            raise RemoteProtocolError(f"{end - pos} stray bytes after the last batch", _CORRUPT)
        header = read_header(view, pos)
        stop = pos + header.size
        if stop > end:
            if allow_truncated:
                break
            raise RemoteProtocolError(
                f"batch length {header.batch_length} exceeds the {end - pos} bytes left", _CORRUPT
            )
        batches.append(RawBatch(header, view[pos:stop].tobytes()))
        pos = stop
    return batches


def crc_of(batch: bytes) -> int:
    """CRC-32C of a batch's bytes from the attributes field to its end."""
    return int(google_crc32c.value(batch[CRC_START:]))


def verify_crc(raw: RawBatch) -> None:
    """Check a batch's CRC-32C.

    Raises:
        RemoteProtocolError: CORRUPT_MESSAGE on mismatch.
    """
    actual = crc_of(raw.data)
    if actual != raw.header.crc:
        raise RemoteProtocolError(
            f"record batch CRC {raw.header.crc:#010x}, computed {actual:#010x}", _CORRUPT
        )


def records_section(raw: RawBatch, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """A batch's records section, decompressed to at most ``limit`` bytes (the CRC is not
    checked here).

    Raises:
        RemoteProtocolError: see :func:`compression.decompress`.
    """
    payload = raw.data[HEADER_SIZE:]
    codec = raw.header.compression
    return decompress(codec, payload, limit) if codec else payload


def decode_records(raw: RawBatch, limit: int = MAX_DECOMPRESSED_BYTES) -> list[Record]:
    """Decompress (to at most ``limit`` bytes) and parse a batch's records (the CRC is not
    checked here).

    Raises:
        RemoteProtocolError: CORRUPT_MESSAGE if the records do not parse or their count
            differs from ``records_count``; see :func:`compression.decompress`.
    """
    h = raw.header
    section = records_section(raw, limit)
    return decode_records_section(section, h.records_count, h.base_timestamp)


def decode_batches(
    data: bytes | memoryview,
    *,
    check_crc: bool = True,
    allow_truncated: bool = False,
    limit: int = MAX_DECOMPRESSED_BYTES,
) -> list[RecordBatch]:
    """Split, CRC-check and decode every batch of a ``records`` field (each records section
    decompressed to at most ``limit`` bytes)."""
    out = []
    for raw in split_batches(data, allow_truncated=allow_truncated):
        if check_crc:
            verify_crc(raw)
        out.append(RecordBatch(raw.header, decode_records(raw, limit)))
    return out


def decode_batch(
    data: bytes | memoryview, *, check_crc: bool = True, limit: int = MAX_DECOMPRESSED_BYTES
) -> RecordBatch:
    """Decode a ``records`` field that must hold exactly one batch (Produce v3+).

    Raises:
        RemoteProtocolError: INVALID_RECORD when there is not exactly one batch, plus
            everything :func:`decode_batches` raises.
    """
    batches = decode_batches(data, check_crc=check_crc, limit=limit)
    if len(batches) != 1:
        raise RemoteProtocolError(
            f"expected exactly one record batch, got {len(batches)}", ErrorCode.INVALID_RECORD
        )
    return batches[0]


def encode_batch(
    records: Sequence[RecordLike],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = 0,
    compression: int = Compression.NONE,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """Build one v2 record batch.

    Args:
        records: ``(offset_delta, timestamp, key, value, headers)`` tuples (``Record``
            or plain tuples); timestamps are absolute, headers ``(str, bytes | None)``.
        base_offset: offset of the first record (the broker's assigned offset).
        base_timestamp: defaults to the first record's timestamp (-1 if none).
        max_timestamp: defaults to the largest record timestamp (-1 if none).
        last_offset_delta: defaults to the last record's offset delta.
        producer_id, producer_epoch, base_sequence: idempotence fields, -1 if unused.
        partition_leader_epoch: written as given (0 for this broker, section 2.1).
        compression: codec 0-4 for the records section.
        log_append_time, transactional, control: attribute bits 3, 4, 5.

    Returns:
        The batch bytes with a correct batch length and CRC-32C.

    Raises:
        LocalProtocolError: a field does not fit, or the batch is empty and
            ``last_offset_delta`` is not given.
    """
    if base_timestamp is None:
        base_timestamp = records[0][1] if records else -1
    if max_timestamp is None:
        max_timestamp = max((r[1] for r in records), default=-1)
    if last_offset_delta is None:
        if not records:
            raise LocalProtocolError("an empty batch needs an explicit last_offset_delta")
        last_offset_delta = records[-1][0]
    try:
        body = encode_records(records, base_timestamp)
        attributes = (
            compression
            | (ATTR_LOG_APPEND_TIME if log_append_time else 0)
            | (ATTR_TRANSACTIONAL if transactional else 0)
            | (ATTR_CONTROL if control else 0)
        )
        if compression:
            body = compress(compression, body)
        tail = _TAIL.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        crc = google_crc32c.extend(google_crc32c.value(tail), body)
        batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
        head = _HEAD.pack(base_offset, batch_length, partition_leader_epoch, MAGIC, crc)
    except (struct.error, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, LocalProtocolError):
            raise
        raise LocalProtocolError(f"cannot encode record batch: {exc}") from exc
    return b"".join((head, tail, body))


def patch_base_offset(
    batch: bytes, base_offset: int, partition_leader_epoch: int | None = None
) -> bytes:
    """Rewrite ``base_offset`` (and optionally ``partition_leader_epoch``) in place of the
    producer's values. Neither is covered by the CRC, so it stays valid (section 3.4)."""
    _, batch_length, epoch = _PATCH.unpack_from(batch, 0)
    if partition_leader_epoch is not None:
        epoch = partition_leader_epoch
    # One copy of the (possibly megabyte) batch, not a slice and then a concatenation.
    return b"".join(
        (_PATCH.pack(base_offset, batch_length, epoch), memoryview(batch)[_PATCH.size :])
    )


def set_log_append_time(batch: bytes, timestamp_ms: int) -> bytes:
    """Mark a batch LogAppendTime: set attribute bit 3 and ``max_timestamp``, then
    recompute the CRC (section 3.5 step 5)."""
    out = bytearray(batch)
    (attributes,) = _ATTRIBUTES.unpack_from(out, CRC_START)
    _ATTRIBUTES.pack_into(out, CRC_START, attributes | ATTR_LOG_APPEND_TIME)
    _MAX_TIMESTAMP.pack_into(out, MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _CRC.pack_into(out, CRC_OFFSET, crc_of(bytes(out)))
    return bytes(out)
