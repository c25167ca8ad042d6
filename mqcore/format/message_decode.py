"""The pull path's record decoder: ``decode_record``'s result, about twice as fast for the
usual record (V1 topic, IPv4 hosts).

``decode_record`` frames any record variant through the general checks, then decodes it,
formatting both hosts with ``inet_ntop`` and a new ``HostAddress`` each. A pull of 32
messages pays that 32 times for what is almost always the same store host and a handful of
born hosts. :func:`decode_message` inlines the framing checks of the usual record (the
checks of ``record._frame``, in the same order, on the values one header unpack gives) and
takes hosts from a small cache; any other record, or one that fails a check, goes to
``decode_record`` itself, which alone decides what a bad record is and raises for it.
The results are equal field for field (``tests/mqcore/format/test_message_decode.py``).
"""

from __future__ import annotations

import socket
from typing import Any

from mqcore.format.layout import (
    DECODE_HEADERS,
    HEADER_SIZES,
    HOST_V6_FLAGS,
    PROPERTIES_LENGTH,
    V1_MAX_TOPIC_BYTES,
)
from mqcore.format.msgid import HostAddress, ReadableBuffer
from mqcore.format.record import MESSAGE_MAGIC_CODE, decode_record
from mqcore.message import MessageExt

_HEADER = DECODE_HEADERS[0]  # V1 record, IPv4 born and store hosts
_HEADER_SIZE = HEADER_SIZES[0]
_PLEN = PROPERTIES_LENGTH
_PLEN_SIZE = PROPERTIES_LENGTH.size
_MIN_TOTAL = _HEADER_SIZE + 1 + _PLEN_SIZE  # a V1 topic length byte and PROPERTIES_LENGTH
_HOSTS_MAX = 4096  # distinct (ip, port) pairs kept; the cache is dropped when full


class _Builder:
    """Same slots as :class:`MessageExt`: filled, then its ``__class__`` set (``record.py``'s
    ``_MessageExtBuilder`` does the same; a frozen dataclass ``__init__`` costs ~2 us)."""

    __slots__ = MessageExt.__slots__


_hosts: dict[tuple[bytes, int], HostAddress] = {}


def _host(ip: bytes, port: int) -> HostAddress:
    host = _hosts.get((ip, port))
    if host is None:
        if len(_hosts) >= _HOSTS_MAX:
            _hosts.clear()
        host = _hosts[(ip, port)] = HostAddress(socket.inet_ntop(socket.AF_INET, ip), port)
    return host


def decode_message(buf: ReadableBuffer, pos: int, limit: int) -> MessageExt:
    """``decode_record(buf, pos, limit=limit)``.

    Raises:
        CorruptRecordError: as ``decode_record``.
    """
    if limit - pos < _MIN_TOTAL:
        return decode_record(buf, pos, limit=limit)
    (
        total, magic, body_crc, queue_id, flag, queue_offset, phys_offset, sys_flag,
        born_timestamp, born_ip, born_port, store_timestamp, store_ip, store_port,
        reconsume_times, prepared_transaction_offset, body_length,
    ) = _HEADER.unpack_from(buf, pos)  # fmt: skip
    end = pos + total
    body_pos = pos + _HEADER_SIZE
    topic_length_pos = body_pos + body_length
    if (
        magic != MESSAGE_MAGIC_CODE
        or sys_flag & HOST_V6_FLAGS
        or total < _MIN_TOTAL
        or end > limit
        or body_length < 0
        or topic_length_pos + 1 + _PLEN_SIZE > end
    ):
        return decode_record(buf, pos, limit=limit)
    topic_length = buf[topic_length_pos]
    properties_pos = topic_length_pos + 1 + topic_length + _PLEN_SIZE
    if topic_length > V1_MAX_TOPIC_BYTES or properties_pos > end:
        return decode_record(buf, pos, limit=limit)
    (properties_length,) = _PLEN.unpack_from(buf, properties_pos - _PLEN_SIZE)
    if properties_length < 0 or properties_pos + properties_length != end:
        return decode_record(buf, pos, limit=limit)
    m: Any = _Builder()
    m.store_size = total
    m.magic_code = magic
    m.body_crc = body_crc
    m.queue_id = queue_id
    m.flag = flag
    m.queue_offset = queue_offset
    m.phys_offset = phys_offset
    m.sys_flag = sys_flag
    m.born_timestamp = born_timestamp
    m.born_host = _hosts.get((born_ip, born_port)) or _host(born_ip, born_port)
    m.store_timestamp = store_timestamp
    m.store_host = _hosts.get((store_ip, store_port)) or _host(store_ip, store_port)
    m.reconsume_times = reconsume_times
    m.prepared_transaction_offset = prepared_transaction_offset
    m.body = bytes(buf[body_pos:topic_length_pos])  # a copy whatever the buffer type
    m.topic = str(buf[topic_length_pos + 1 : properties_pos - _PLEN_SIZE], "utf-8", "replace")
    props: dict[str, str] = {}
    if properties_length:
        # ``record._properties_at``, inlined: Java keeps a pair only when its first \x01 is
        # neither the first nor the last character.
        for segment in str(buf[properties_pos:end], "utf-8", "replace").split("\x02"):
            name, _, value = segment.partition("\x01")
            if name and value:
                props[name] = value
    m.properties = props
    m.__class__ = MessageExt
    message: MessageExt = m
    return message
