"""Record-batch compression codecs (attributes bits 0-2), backed by ``cramjam``.

=====  ======  ===========================================================================
code   codec   wire format (kafka-protocol.md section 3.6, as the three clients send it)
=====  ======  ===========================================================================
0      none
1      gzip    a gzip stream (several members are accepted)
2      snappy  kafka-python and aiokafka: **xerial framing**; librdkafka: one raw block
3      lz4     LZ4 frame format with independent blocks
4      zstd    a zstd frame, often without the content size (so streaming decompress)
=====  ======  ===========================================================================

Xerial snappy framing (Java ``SnappyOutputStream``)::

    0      8                 12                 16
    | magic 82 'SNAPPY' 00 | version int32 =1 | compatible int32 =1 |
    then repeated:  block_size int32 | raw snappy block (block_size bytes)

Decoding detects the 8-byte magic and otherwise treats the payload as one raw block.
Encoding writes xerial framing with 32 KiB input blocks (what Java and kafka-python
write), and LZ4 frames with independent blocks and no content checksum (what Kafka's
``KafkaLZ4BlockOutputStream`` writes; its reader cannot follow linked blocks).

Every decompression failure raises ``RemoteProtocolError`` with CORRUPT_MESSAGE; an
unknown codec number raises it with UNSUPPORTED_COMPRESSION_TYPE.

Decompression bombs: the output is capped at ``limit`` bytes (default
:data:`MAX_DECOMPRESSED_BYTES`) and the codec stops writing there, so a few kilobytes of
zstd or gzip that would expand to gigabytes cost at most ``limit`` bytes of memory and the
CPU to produce them. Going over raises ``RemoteProtocolError`` with MESSAGE_TOO_LARGE (10),
the code Kafka answers for a batch over its size limit (kafka-protocol.md sections 2.2 and
2.5), and the one Produce already answers when the decompressed bodies exceed
``max_batch_bytes``. CORRUPT_MESSAGE would be wrong: clients treat it as retriable and would
re-send the same batch forever, while MESSAGE_TOO_LARGE makes the Java producer split the
batch and the others fail it for good. gzip, lz4 and zstd decompress into a bounded buffer
(``cramjam.*.decompress_into``); snappy blocks state their length up front, which is
checked before anything is decompressed.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from enum import IntEnum

import cramjam

from mqcore.broker.config import BrokerConfig
from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .errors import ErrorCode


class Compression(IntEnum):
    """Compression codec numbers of record-batch attributes bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(
    ">"
    "8s"  # magic
    "i"  # version, 1
    "i"  # minimum compatible version, 1
)
XERIAL_BLOCK_SIZE = struct.Struct(">i")
XERIAL_BLOCK_BYTES = 32 * 1024  # input bytes per block, as Java's SnappyOutputStream

# The records section of one batch after decompression. Produce refuses batches whose bodies
# exceed ``BrokerConfig.max_batch_bytes`` (4 MiB, RocketMQ's maxMessageSize) anyway; the
# other half is headroom for keys, headers and record framing, which the store bounds per
# message (properties) but not per batch. Anything bigger cannot be stored, so there is no
# point in decompressing it.


def decompressed_limit(max_batch_bytes: int) -> int:
    """The cap on one records section for a broker taking ``max_batch_bytes`` a batch."""
    return 2 * max_batch_bytes


MAX_DECOMPRESSED_BYTES = decompressed_limit(BrokerConfig().max_batch_bytes)
"""The cap for the default ``BrokerConfig`` (Produce passes its broker's own)."""
# Valid snappy cannot expand more than this: the densest element, a 3-byte copy, writes
# at most 64 bytes. A block declaring more than this ratio of its input is corrupt, not big.
_SNAPPY_MAX_RATIO = 22
# cramjam's message when ``decompress_into`` runs out of output space (Rust's
# io::ErrorKind::WriteZero); any other DecompressionError means bad data.
_OUTPUT_FULL = "failed to write whole buffer"
# Per-thread output buffer kept between calls, so a typical batch costs no allocation;
# outputs that do not fit are retried once in a temporary ``limit + 1`` buffer.
_KEPT_BUFFER_BYTES = 1 << 20
_scratch = threading.local()


def _corrupt(codec: str, exc: Exception) -> RemoteProtocolError:
    return RemoteProtocolError(
        f"{codec} data cannot be decompressed: {exc}", ErrorCode.CORRUPT_MESSAGE
    )


def _too_large(codec: str, limit: int) -> RemoteProtocolError:
    return RemoteProtocolError(
        f"{codec} data decompresses to more than {limit} bytes", ErrorCode.MESSAGE_TOO_LARGE
    )


def _snappy_block_len(block: bytes, room: int, limit: int) -> int:
    """The uncompressed length a raw snappy block declares, checked against ``room`` (what
    is left of ``limit``)."""
    size = int(cramjam.snappy.decompress_raw_len(block))
    if size > _SNAPPY_MAX_RATIO * len(block) + 16:
        raise RemoteProtocolError(
            f"raw snappy block of {len(block)} bytes claims {size}", ErrorCode.CORRUPT_MESSAGE
        )
    if size > room:
        raise _too_large("snappy", limit)
    return size


def snappy_decompress(data: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress xerial-framed or raw snappy data (auto-detected by the magic).

    Raises:
        RemoteProtocolError: CORRUPT_MESSAGE for bad data, MESSAGE_TOO_LARGE if the
            output would exceed ``limit`` bytes (checked before decompressing).
        cramjam.DecompressionError: from cramjam, for :func:`decompress` to translate.
    """
    if not data.startswith(XERIAL_MAGIC):
        _snappy_block_len(data, limit, limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < XERIAL_HEADER.size:
        raise RemoteProtocolError("truncated xerial snappy header", ErrorCode.CORRUPT_MESSAGE)
    parts = []
    room = limit
    pos = XERIAL_HEADER.size
    end = len(data)
    while pos < end:
        if pos + XERIAL_BLOCK_SIZE.size > end:
            raise RemoteProtocolError("truncated xerial block size", ErrorCode.CORRUPT_MESSAGE)
        (size,) = XERIAL_BLOCK_SIZE.unpack_from(data, pos)
        pos += XERIAL_BLOCK_SIZE.size
        if size < 0 or pos + size > end:
            raise RemoteProtocolError(f"bad xerial block size {size}", ErrorCode.CORRUPT_MESSAGE)
        block = data[pos : pos + size]
        room -= _snappy_block_len(block, room, limit)
        parts.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += size
    return b"".join(parts)


def snappy_compress_xerial(data: bytes) -> bytes:
    """Compress into xerial framing (what Java and kafka-python write)."""
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(data), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(XERIAL_BLOCK_SIZE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_compress(data: bytes) -> bytes:
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


_Into = Callable[[bytes, bytearray], int]
_INTO: dict[int, _Into] = {
    Compression.GZIP: cramjam.gzip.decompress_into,  # all members of a multi-member stream
    Compression.LZ4: cramjam.lz4.decompress_into,  # frame format
    Compression.ZSTD: cramjam.zstd.decompress_into,  # with or without the content size
}


def _decompress_into(codec: int, data: bytes, limit: int) -> bytes:
    """Decompress with ``_INTO[codec]`` writing at most ``limit + 1`` bytes.

    Raises:
        RemoteProtocolError: MESSAGE_TOO_LARGE when the output exceeds ``limit``.
        cramjam.DecompressionError: bad data.
    """
    into = _INTO[codec]
    buf: bytearray | None = getattr(_scratch, "buf", None)
    if buf is None:
        buf = _scratch.buf = bytearray(_KEPT_BUFFER_BYTES)
    if len(buf) > limit:  # a small limit: never let the codec write past it
        buf = bytearray(limit + 1)
    try:
        size = into(data, buf)
    except cramjam.DecompressionError as exc:
        if _OUTPUT_FULL not in str(exc) or len(buf) > limit:
            raise
        buf = bytearray(limit + 1)  # rare: a batch bigger than the kept buffer
        size = into(data, buf)
    if size > limit:
        raise _too_large(Compression(codec).name.lower(), limit)
    return bytes(memoryview(buf)[:size])


def decompress(codec: int, data: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress a record batch's records section.

    Args:
        codec: attributes bits 0-2.
        data: the compressed bytes after the 61-byte batch header.
        limit: most bytes the output may have (not applied to codec 0, whose size the
            caller already bounds).

    Returns:
        The concatenated uncompressed records.

    Raises:
        RemoteProtocolError: CORRUPT_MESSAGE if the data is not valid for the codec,
            MESSAGE_TOO_LARGE if it decompresses to more than ``limit`` bytes,
            UNSUPPORTED_COMPRESSION_TYPE for codec numbers 5-7.
    """
    try:
        if codec in _INTO:
            return _decompress_into(codec, data, limit)
        if codec == Compression.SNAPPY:
            return snappy_decompress(data, limit)
        if codec == Compression.NONE:
            return data
    except cramjam.DecompressionError as exc:
        if _OUTPUT_FULL in str(exc):  # the output reached limit + 1 bytes
            raise _too_large(Compression(codec).name.lower(), limit) from None
        raise _corrupt(Compression(codec).name.lower(), exc) from None
    raise RemoteProtocolError(
        f"unknown compression codec {codec}", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    )


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section with ``codec`` (see the module table for formats).

    Raises:
        LocalProtocolError: ``codec`` is not 0-4.
    """
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return snappy_compress_xerial(data)
    if codec == Compression.LZ4:
        return _lz4_compress(data)
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise LocalProtocolError(f"unknown compression codec {codec}")
