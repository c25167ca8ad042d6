"""Host addresses and the two RocketMQ message ids (spec 2.3, 2.4).

Host address on disk (BORNHOST / STOREHOSTADDRESS fields, and inside both ids)::

    IPv4: | ip: 4 bytes  | port: int32 |   8 bytes
    IPv6: | ip: 16 bytes | port: int32 |  20 bytes

**offsetMsgId** (``MessageDecoder.createMessageId``), upper-case hex of::

    | store ip (4 or 16) | store port int32 | PHYSICALOFFSET int64 |   32 or 56 hex chars

It names the record's position, so it is unique per record (a retried message gets a new one).

**UNIQ_KEY** client id (``MessageClientIDSetter``), upper-case hex of::

    | ip (4 or 16) | pid: 2 | loader hash: 4 | ms since start of month: 4 | counter: 2 |

The first 10 (IPv4) bytes are a per-process constant prefix. The time field is relative to the
start of the current month in the local time zone, so it only names the time up to the month:
:func:`uniq_key_time_ms` recovers an absolute time given any time close to it.

IPv4-mapped IPv6 text (``::ffff:10.0.0.5``, as a dual-stack socket reports IPv4 peers) is
stored as the IPv4 address, because Java's ``InetAddress`` turns such addresses into
``Inet4Address`` and RocketMQ then writes 4 bytes without the IPv6 sysflag bit.
"""

from __future__ import annotations

import functools
import ipaddress
import mmap
import os
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, overload

from mqcore.clock import Clock, SystemClock
from mqcore.errors import ValidationError

__all__ = [
    "HostAddress",
    "UniqKeyGenerator",
    "choose_producer_ip",
    "create_offset_msg_id",
    "create_offset_msg_ids",
    "decode_host",
    "decode_offset_msg_id",
    "encode_host",
    "uniq_key_time_ms",
]

ReadableBuffer = bytes | bytearray | memoryview | mmap.mmap
"""What the decoders read from: anything supporting ``struct.unpack_from`` and slicing."""

_PORT = struct.Struct(">i")  # port: int32, after the 4 or 16 address bytes
_PHYS_OFFSET = struct.Struct(">q")  # PHYSICALOFFSET: int64, after the host in an offsetMsgId
_UNIQ_TAIL = struct.Struct(
    ">"
    "I"  # ms since the start of the month (Java int, written as its 32 bits)
    "H"  # counter, low 16 bits
)
_UNIQ_PREFIX_TAIL = struct.Struct(
    ">"
    "H"  # pid, low 16 bits
    "I"  # class-loader hash, 32 bits
)
IPV4_HOST_SIZE = 4 + _PORT.size
IPV6_HOST_SIZE = 16 + _PORT.size
_OFFSET_ID_V4_CHARS = 2 * (IPV4_HOST_SIZE + _PHYS_OFFSET.size)  # 32
_OFFSET_ID_V6_CHARS = 2 * (IPV6_HOST_SIZE + _PHYS_OFFSET.size)  # 56
_UNIQ_V4_BYTES = 4 + _UNIQ_PREFIX_TAIL.size + _UNIQ_TAIL.size  # 16
_UNIQ_V6_BYTES = 16 + _UNIQ_PREFIX_TAIL.size + _UNIQ_TAIL.size  # 28
_UNIQ_TIME_FROM_END = _UNIQ_TAIL.size  # the time field starts this many bytes before the end
_NTP_SLACK_MS = 1_000_000  # diffs in (-1_000_000, 0) are clock steps back: forced to 0


class HostAddress(NamedTuple):
    """An IP address (textual IPv4 or IPv6) and a port."""

    ip: str
    port: int

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"


def _ip_bytes(ip: str) -> bytes:
    """Packed address: 4 bytes for IPv4 (and IPv4-mapped IPv6), else 16."""
    try:
        if ":" not in ip:
            return socket.inet_pton(socket.AF_INET, ip)
        packed = socket.inet_pton(socket.AF_INET6, ip.partition("%")[0])
    except (OSError, ValueError):
        raise ValidationError(
            "host", "ip_address", f"host: {ip!r} is not a textual IPv4 or IPv6 address"
        ) from None
    if packed.startswith(b"\x00" * 10 + b"\xff\xff"):
        return packed[12:]
    return packed


@functools.lru_cache(maxsize=4096)
def encode_host(host: HostAddress) -> bytes:
    """The 8-byte (IPv4) or 20-byte (IPv6) on-disk form of ``host``.

    Cached: a broker sees few distinct hosts, and this runs twice per put.

    Raises:
        ValidationError: the ip is not an address, or the port is outside 0..65535.
    """
    ip, port = host
    if not 0 <= port <= 0xFFFF:
        raise ValidationError("host", "port", f"host: port must be in 0..65535 (got {port})")
    return _ip_bytes(ip) + _PORT.pack(port)


def decode_host(buf: ReadableBuffer, pos: int, ipv6: bool) -> HostAddress:
    """Read a host written by :func:`encode_host` at ``buf[pos:]``.

    Raises:
        struct.error: fewer than 8 (or 20) bytes at ``pos``.
    """
    width = 16 if ipv6 else 4
    (port,) = _PORT.unpack_from(buf, pos + width)  # raises first if the host is cut short
    raw = bytes(buf[pos : pos + width])
    return HostAddress(socket.inet_ntop(socket.AF_INET6 if ipv6 else socket.AF_INET, raw), port)


def create_offset_msg_id(store_host: HostAddress, phys_offset: int) -> str:
    """The offsetMsgId of the record at ``phys_offset`` stored by ``store_host`` (spec 2.3)."""
    return (encode_host(store_host) + _PHYS_OFFSET.pack(phys_offset)).hex().upper()


def create_offset_msg_ids(store_host: bytes, phys_offsets: list[int]) -> list[str]:
    """:func:`create_offset_msg_id` of many records of one store host, ``store_host`` given
    encoded (:func:`encode_host`).

    One ``pack`` of every (host, offset) pair, one ``hex`` with a separator between ids, one
    ``upper`` and one ``split`` for the batch: a third fewer instructions an id (~1,600
    against ~2,400 under cachegrind) than four objects an id (pack, hex, upper, concatenate);
    the put path makes one per record.

    Raises:
        struct.error: an offset outside int64.
    """
    count = len(phys_offsets)
    if count > _IDS_PER_PACK:
        ids: list[str] = []
        for first in range(0, count, _IDS_PER_PACK):
            ids += create_offset_msg_ids(store_host, phys_offsets[first : first + _IDS_PER_PACK])
        return ids
    if not count:
        return []
    width = len(store_host)
    layout = _ID_LAYOUTS.get((count, width))
    if layout is None:
        # The offsetMsgId layout repeated: | host | PHYSICALOFFSET | host | PHYSICALOFFSET | ...
        layout = struct.Struct(">" + f"{width}s{_PHYS_OFFSET.format[1:]}" * count)
        if len(_ID_LAYOUTS) < _ID_LAYOUTS_MAX:
            _ID_LAYOUTS[(count, width)] = layout
    fields: list[bytes | int] = [store_host] * (2 * count)
    fields[1::2] = phys_offsets
    return layout.pack(*fields).hex(" ", width + _PHYS_OFFSET.size).upper().split(" ")


_IDS_PER_PACK = 1024
"""Ids per ``pack`` in :func:`create_offset_msg_ids` (a longer batch takes several)."""
_ID_LAYOUTS: dict[tuple[int, int], struct.Struct] = {}
"""(ids, host width) -> the repeated layout; a batch size keeps hitting the same one."""
_ID_LAYOUTS_MAX = 256


def decode_offset_msg_id(msg_id: str) -> tuple[HostAddress, int]:
    """Split an offsetMsgId into its store host and commit-log offset.

    32 hex characters mean an IPv4 store host, 56 an IPv6 one (Java decides by length only).

    Raises:
        ValidationError: field ``msg_id``, rule ``format``: wrong length or not hexadecimal.
    """
    if len(msg_id) not in (_OFFSET_ID_V4_CHARS, _OFFSET_ID_V6_CHARS):
        raise ValidationError(
            "msg_id",
            "format",
            f"msg_id: an offset message id has {_OFFSET_ID_V4_CHARS} or {_OFFSET_ID_V6_CHARS}"
            f" hex characters (got {len(msg_id)})",
        )
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValidationError(
            "msg_id", "format", f"msg_id: {msg_id!r} is not hexadecimal"
        ) from None
    if len(raw) * 2 != len(msg_id):  # fromhex skips whitespace
        raise ValidationError("msg_id", "format", f"msg_id: {msg_id!r} is not hexadecimal")
    ipv6 = len(msg_id) == _OFFSET_ID_V6_CHARS
    host = decode_host(raw, 0, ipv6)
    (offset,) = _PHYS_OFFSET.unpack_from(raw, IPV6_HOST_SIZE if ipv6 else IPV4_HOST_SIZE)
    return host, offset


# --- UNIQ_KEY ---------------------------------------------------------------------------------


def _month_start_ms(now_ms: int, months_back: int = 0) -> int:
    """Epoch ms of local midnight on the 1st of the month holding ``now_ms`` (minus N months)."""
    local = time.localtime(now_ms // 1000)
    month_index = local.tm_year * 12 + (local.tm_mon - 1) - months_back
    year, month0 = divmod(month_index, 12)
    # isdst=-1: let mktime decide whether DST applies at that midnight.
    return int(time.mktime((year, month0 + 1, 1, 0, 0, 0, 0, 0, -1))) * 1000


def _next_month_start_ms(now_ms: int) -> int:
    return _month_start_ms(now_ms, months_back=-1)


# Java's UtilAll.isInternalIP: the RFC 1918 ranges (127/8 never gets this far).
_INTERNAL_V4 = (
    ipaddress.IPv4Network("10.0.0.0/8"),
    ipaddress.IPv4Network("172.16.0.0/12"),
    ipaddress.IPv4Network("192.168.0.0/16"),
)


def choose_producer_ip(candidates: Iterable[str]) -> bytes | None:
    """Pick the id address as ``UtilAll.getIP`` does, from addresses in interface order.

    The first public IPv4 or IPv6 address wins; otherwise the first private IPv4 one
    (10/8, 172.16/12, 192.168/16). Loopback, link-local, unspecified and non-unicast
    addresses are never chosen.

    Returns:
        4 or 16 packed bytes, or None when nothing qualifies.
    """
    internal: bytes | None = None
    for text in candidates:
        try:
            addr = ipaddress.ip_address(text.partition("%")[0])
        except ValueError:
            continue
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        if addr.is_loopback or addr.is_link_local or addr.is_unspecified or addr.is_multicast:
            continue
        if isinstance(addr, ipaddress.IPv4Address):
            first = addr.packed[0]
            if not (1 <= first <= 126 or 128 <= first <= 223):  # Java's class A/B/C check
                continue
            if any(addr in network for network in _INTERNAL_V4):
                internal = internal or addr.packed
                continue
            return addr.packed
        if addr.is_site_local:  # Java's isInternalV6IP; unique-local fc00::/7 counts as public
            continue
        return addr.packed
    return internal


def _local_ip_candidates() -> list[str]:
    """This host's addresses, best effort, in a stable order (stdlib has no getifaddrs)."""
    found: list[str] = []
    # The address the default route would use (a UDP connect sends nothing).
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((probe, 9))
                found.append(sock.getsockname()[0])
        except OSError:
            pass
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)
        found.extend(str(info[4][0]) for info in infos)
    except OSError:
        pass
    return found


@functools.cache
def _local_ip() -> bytes:
    """The producer IP of this process; 4 bytes of the current time if none can be found."""
    chosen = choose_producer_ip(_local_ip_candidates())
    if chosen is not None:
        return chosen
    return (time.time_ns() // 1_000_000 & 0xFFFFFFFF).to_bytes(4, "big")  # createFakeIP


_PROCESS_LOADER_HASH = int.from_bytes(os.urandom(4), "big")
"""Stands in for Java's class-loader identity hash: constant per process, random across."""


class UniqKeyGenerator:
    """Creates UNIQ_KEY client message ids (spec 2.4). Thread-safe.

    Args:
        ip: the address to embed (IPv4 or IPv6 text); default: this host's, chosen as the
            Java client does, falling back to 4 bytes of the current time.
        pid: default ``os.getpid()``; only its low 16 bits are used.
        clock: time source; default the system clock.
        loader_hash: the 32-bit "class-loader hash"; default a per-process random constant.
        counter_start: first counter value (Java starts at 0).
    """

    def __init__(
        self,
        ip: str | None = None,
        pid: int | None = None,
        clock: Clock | None = None,
        *,
        loader_hash: int | None = None,
        counter_start: int = 0,
    ) -> None:
        ip_bytes = _local_ip() if ip is None else _ip_bytes(ip)
        pid_value = os.getpid() if pid is None else pid
        hash_value = _PROCESS_LOADER_HASH if loader_hash is None else loader_hash
        prefix = ip_bytes + _UNIQ_PREFIX_TAIL.pack(pid_value & 0xFFFF, hash_value & 0xFFFFFFFF)
        self._prefix_hex = prefix.hex().upper()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._counter = counter_start
        self._lock = threading.Lock()
        self._last_head: tuple[int | None, str] = (None, "")  # reserve's (diff, head)
        now = self._clock.now_ms()
        self._month_start_ms = _month_start_ms(now)
        self._next_month_start_ms = _next_month_start_ms(now)

    @property
    def prefix(self) -> str:
        """The constant hex prefix (ip, pid, loader hash) of every id this generator makes."""
        return self._prefix_hex

    def next_id(self) -> str:
        """A new id: 32 hex characters (IPv4 producer) or 56 (IPv6)."""
        head, counter = self.reserve(1)
        return head + f"{counter & 0xFFFF:04X}"

    def reserve(self, count: int) -> tuple[str, int]:
        """``count`` ids made at one instant, for a batch: returns ``(head, first)``, and id
        ``i`` is ``head`` + the 4 upper-case hex digits of ``(first + i) & 0xFFFF`` (the ids
        ``next_id`` would return in the same millisecond). One lock and one clock read for
        the whole batch instead of one per id."""
        with self._lock:
            now = self._clock.now_ms()
            if now >= self._next_month_start_ms:
                self._month_start_ms = _month_start_ms(now)
                self._next_month_start_ms = _next_month_start_ms(now)
            diff = now - self._month_start_ms
            counter = self._counter
            self._counter = counter + count
        diff = ((diff + 0x80000000) & 0xFFFFFFFF) - 0x80000000  # Java (int) cast
        if -_NTP_SLACK_MS < diff < 0:
            diff = 0
        # Batches come many to the millisecond: reuse the last head (one tuple, read and
        # replaced whole, so threads never pair a diff with another diff's head).
        last_diff, head = self._last_head
        if diff != last_diff:
            head = f"{self._prefix_hex}{diff & 0xFFFFFFFF:08X}"
            self._last_head = (diff, head)
        return head, counter


_HEX4: list[str] | None = None
"""The 4 upper-case hex digits of 0..65535 (a UNIQ_KEY's counter), built on first use (a
~3 MB table: an index costs ~20 ns, formatting the counter ~250 ns)."""


def hex4_table() -> list[str]:
    """:data:`_HEX4`, built on first use."""
    global _HEX4
    table = _HEX4
    if table is None:  # two threads may both build it; either list is complete when bound
        table = _HEX4 = [f"{i:04X}" for i in range(0x10000)]
    return table


def reserved_tails(first: int, count: int) -> list[str]:
    """The last 4 hex digits of the ``count`` ids of ``reserve(count)`` that returned
    ``first``: id ``i`` is the reserved head + tail ``i``."""
    hex4 = hex4_table()
    first &= 0xFFFF
    if first + count <= 0x10000:
        return hex4[first : first + count]
    return [hex4[(first + i) & 0xFFFF] for i in range(count)]  # the counter wraps


class ReservedIds(Sequence[str]):
    """The ids of one :meth:`UniqKeyGenerator.reserve` as a sequence, each made when read:
    a put's callers mostly read one (the Kafka listener: the first) or none, and making
    every id of a batch costs ~75 ns an id. Equal to the list of the same ids."""

    __slots__ = ("_count", "_first", "_head", "_ids")

    def __init__(self, head: str, first: int, count: int) -> None:
        self._head = head
        self._first = first
        self._count = count
        self._ids: list[str] | None = None

    def to_list(self) -> list[str]:
        """Every id, made once."""
        ids = self._ids
        if ids is None:
            head = self._head
            ids = self._ids = [head + tail for tail in reserved_tails(self._first, self._count)]
        return ids

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return self.to_list()[index]
        if not -self._count <= index < self._count:
            raise IndexError("ReservedIds index out of range")
        return self._head + hex4_table()[(self._first + index % self._count) & 0xFFFF]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ReservedIds | list | tuple):
            return self.to_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, as a list

    def __repr__(self) -> str:
        return f"ReservedIds({self.to_list()!r})"


def uniq_key_time_ms(uniq_key: str, near_ms: int) -> int | None:
    """The creation time encoded in a UNIQ_KEY, as epoch ms (``getNearlyTimeFromID``).

    The key holds only the offset from the start of its month, so the month is taken from
    ``near_ms`` (for example the record's store time or "now"); if that would put the key's
    time after ``near_ms``, the previous month is used instead. Local time zone, as the
    producer's JVM used.

    Returns:
        Epoch ms, or None if ``uniq_key`` is not a 32- or 56-character hex id.
    """
    if len(uniq_key) not in (2 * _UNIQ_V4_BYTES, 2 * _UNIQ_V6_BYTES):
        return None
    try:
        raw = bytes.fromhex(uniq_key)
    except ValueError:
        return None
    if 2 * len(raw) != len(uniq_key):
        return None
    span_ms: int = _UNIQ_TAIL.unpack_from(raw, len(raw) - _UNIQ_TIME_FROM_END)[0]
    start = _month_start_ms(near_ms)
    if start + span_ms > near_ms:
        start = _month_start_ms(near_ms, months_back=1)
    return start + span_ms
