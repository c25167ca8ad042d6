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
unknown codec number raises it with UNSUPPORTED_COMPRESSION_TYPE. No limit is put on the
decompressed size here: the frame limit bounds the compressed input, and a handler that
fears decompression bombs must check ``records_count`` / sizes before calling.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

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


def _corrupt(codec: str, exc: Exception) -> RemoteProtocolError:
    return RemoteProtocolError(
        f"{codec} data cannot be decompressed: {exc}", ErrorCode.CORRUPT_MESSAGE
    )


def snappy_decompress(data: bytes) -> bytes:
    """Decompress xerial-framed or raw snappy data (auto-detected by the magic)."""
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < XERIAL_HEADER.size:
        raise RemoteProtocolError("truncated xerial snappy header", ErrorCode.CORRUPT_MESSAGE)
    parts = []
    pos = XERIAL_HEADER.size
    end = len(data)
    while pos < end:
        if pos + XERIAL_BLOCK_SIZE.size > end:
            raise RemoteProtocolError("truncated xerial block size", ErrorCode.CORRUPT_MESSAGE)
        (size,) = XERIAL_BLOCK_SIZE.unpack_from(data, pos)
        pos += XERIAL_BLOCK_SIZE.size
        if size < 0 or pos + size > end:
            raise RemoteProtocolError(f"bad xerial block size {size}", ErrorCode.CORRUPT_MESSAGE)
        parts.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
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


def decompress(codec: int, data: bytes) -> bytes:
    """Decompress a record batch's records section.

    Args:
        codec: attributes bits 0-2.
        data: the compressed bytes after the 61-byte batch header.

    Returns:
        The concatenated uncompressed records.

    Raises:
        RemoteProtocolError: CORRUPT_MESSAGE if the data is not valid for the codec,
            UNSUPPORTED_COMPRESSION_TYPE for codec numbers 5-7.
    """
    try:
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return snappy_decompress(data)
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
        if codec == Compression.NONE:
            return data
    except cramjam.DecompressionError as exc:
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
