"""An independent, minimal RocketMQ CommitLog writer, written from spec/store-format.md only.

It shares no code with mqcore on purpose: tests use it to produce a "foreign" store (as a
RocketMQ broker would leave it: CommitLog segments, an abort file, no ConsumeQueue, no index)
and check that Cairn opens it, recovers it and rebuilds the derived files. Every field is
packed one by one from the spec's table 1.2, so a symmetric bug in mqcore's codec cannot hide.
"""

from __future__ import annotations

import socket
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

MAGIC_V1 = -626843481
BLANK_MAGIC = -875286124


def java_hash(s: str) -> int:
    b = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + (b[i] << 8 | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@dataclass
class ForeignMessage:
    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp: int = 1_700_000_000_000
    store_timestamp: int = 1_700_000_000_000
    flag: int = 0


@dataclass
class Written:
    """Where the writer put one message: what a reader must find again."""

    message: ForeignMessage
    phys_offset: int
    queue_offset: int
    size: int


def encode_properties(props: dict[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


def ipv4(addr: str, port: int) -> bytes:
    return socket.inet_aton(addr) + struct.pack(">i", port)


def encode_record(m: ForeignMessage, queue_offset: int, phys_offset: int) -> bytes:
    topic = m.topic.encode()
    props = encode_properties(m.properties)
    born = ipv4("192.168.0.10", 50123)
    store = ipv4("10.0.0.5", 10911)
    size = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(born) + 8 + len(store) + 4 + 8
    size += 4 + len(m.body) + 1 + len(topic) + 2 + len(props)
    parts = [
        struct.pack(">i", size),  # TOTALSIZE
        struct.pack(">i", MAGIC_V1),  # MAGICCODE
        struct.pack(">i", zlib.crc32(m.body) & 0x7FFFFFFF),  # BODYCRC
        struct.pack(">i", m.queue_id),  # QUEUEID
        struct.pack(">i", m.flag),  # FLAG
        struct.pack(">q", queue_offset),  # QUEUEOFFSET
        struct.pack(">q", phys_offset),  # PHYSICALOFFSET
        struct.pack(">i", 0),  # SYSFLAG
        struct.pack(">q", m.born_timestamp),  # BORNTIMESTAMP
        born,  # BORNHOST
        struct.pack(">q", m.store_timestamp),  # STORETIMESTAMP
        store,  # STOREHOSTADDRESS
        struct.pack(">i", 0),  # RECONSUMETIMES
        struct.pack(">q", 0),  # PREPARED_TRANSACTION_OFFSET
        struct.pack(">i", len(m.body)),
        m.body,
        struct.pack(">b", len(topic)),
        topic,
        struct.pack(">h", len(props)),
        props,
    ]
    out = b"".join(parts)
    assert len(out) == size
    return out


def write_commitlog(root: Path, messages: list[ForeignMessage], file_size: int) -> list[Written]:
    """Write ``messages`` as RocketMQ would: segments of ``file_size``, blank records at ends.

    Leaves an ``abort`` file (as after a crash) and no ConsumeQueue or index.
    """
    directory = root / "commitlog"
    directory.mkdir(parents=True, exist_ok=True)
    next_queue_offset: dict[tuple[str, int], int] = {}
    written: list[Written] = []
    base = 0
    buf = bytearray(file_size)
    pos = 0
    for m in messages:
        qkey = (m.topic, m.queue_id)
        qoff = next_queue_offset.get(qkey, 0)
        record = encode_record(m, qoff, base + pos)
        if len(record) + 8 > file_size - pos:
            struct.pack_into(">ii", buf, pos, file_size - pos, BLANK_MAGIC)
            (directory / f"{base:020d}").write_bytes(bytes(buf))
            base += file_size
            buf = bytearray(file_size)
            pos = 0
            record = encode_record(m, qoff, base + pos)
        buf[pos : pos + len(record)] = record
        written.append(Written(m, base + pos, qoff, len(record)))
        pos += len(record)
        next_queue_offset[qkey] = qoff + 1
    (directory / f"{base:020d}").write_bytes(bytes(buf))
    (root / "abort").write_text("12345")
    return written
