"""The put path of plain batches: messages without user properties, one topic.

A producer's batch is nearly always of this shape (tags, keys, maybe a delay level, one
topic). The general path (``Appender.prepare`` → ``PendingRecord`` →
``CommitLog.append`` → ``encode_record_parts`` → PutResult) spent ~80% of its time on
per-message objects and calls rather than on the record. :func:`encode_plain` does it all
in one flat loop with the same result, byte for byte (``test_plain_batch.py`` compares
every record with ``encode_record``'s): the checks, ``UNIQ_KEY`` (``UniqKeyGenerator.reserve``:
one clock read and one lock for the batch), the properties string, the body CRC and the
header of every message; the results are columns (``results.BatchPutResults``: UNIQ_KEYs,
positions, queue offsets), whose offsetMsgIds are made in one go when first asked for
(``msgid.create_offset_msg_ids``). ``CommitLog.append_plain`` runs it under the
put lock, where the offsets and the store time are known, and copies the joined records
into the segment once.

Anything unusual (user properties, a second topic, an empty or oversized body, a property
value holding a separator, a host that is not an address, ...) makes :func:`encode_plain`
return None before anything is written, and the caller takes the general path, which
raises the errors in its order.

A Kafka produce batch comes as columns (:class:`PlainColumns`: one topic and born host,
a body, key and born timestamp per record, nothing else): :func:`encode_plain_columns`
writes what :func:`encode_plain` writes for ``to_messages()`` with no message per record,
and hands any batch it does not surely encode to :func:`encode_plain` as messages.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate, repeat
from operator import add

import numpy as np
import numpy.typing as npt

from mqcore.errors import MessageIllegalError, ValidationError
from mqcore.format.body_crc import BODY_CRC_MASK, body_crc_array, body_crcs, crc32
from mqcore.format.layout import (
    ENCODE_HEADERS,
    HOST_BYTES,
    HOST_V6_FLAGS,
    PROPERTIES_LENGTH,
    TOPIC_FIELDS,
    cache_host_bytes,
    cache_topic_field,
)
from mqcore.format.msgid import (
    IPV6_HOST_SIZE,
    HostAddress,
    ReservedIds,
    create_offset_msg_ids,
    reserved_tails,
)
from mqcore.format.properties import MAX_PROPERTIES_BYTES, encode_message_properties
from mqcore.message import Message
from mqcore.store.put.keyed_grid import encode_keyed_grid, key_pairs
from mqcore.store.put.plain_grid import KEYS_OPEN, MIN_GRID_RECORDS, encode_grid, properties_size
from mqcore.store.results import BatchPutResults, PutStatus

I64s = npt.NDArray[np.int64]
EncodedBatch = tuple[list[bytes], BatchPutResults, int, int]
"""A plain batch encoded at a given CommitLog position (:func:`encode_plain`): the parts
(``b"".join(parts)`` is the records), the PutResults (status PUT_OK), the total bytes and
the next queue offset. A bare tuple: a NamedTuple costs ~0.3 us a batch to build."""


def _plen_table() -> list[bytes]:
    return [PROPERTIES_LENGTH.pack(n) for n in range(_PLEN_TABLE_SIZE)]


_PLEN_TABLE_SIZE = 1024  # plain properties are ~100 bytes: TAGS, KEYS and a 32-char UNIQ_KEY
_PLEN = _plen_table()


def encode_plain(
    msgs: Sequence[Message],
    queue_id: int,
    uniq_head: str,
    uniq_first: int,
    now_ms: int,
    max_body: int,
    default_born_host: HostAddress,
    store_host: HostAddress,
    phys_offset: int,
    queue_offset: int,
    store_timestamp: int,
) -> EncodedBatch | None:
    """Encode ``msgs`` (not empty; the first topic has passed ``validate_topic``) as records
    from ``phys_offset``, the first taking ``queue_offset``: the checks, properties, CRC,
    header and result columns of each message in one loop. Deterministic, so the caller can run
    it again at the next segment when the batch does not fit.

    ``uniq_head`` and ``uniq_first`` come from ``UniqKeyGenerator.reserve(len(msgs))``;
    ``now_ms`` is the BORNTIMESTAMP of messages without one. (Plain arguments rather than a
    context object: building one cost ~0.2-0.5 us a batch.)

    Returns:
        The batch, or None when it is not plain (module docstring): nothing was changed.

    Raises:
        MessageIllegalError: an integer field does not fit its width (as
            ``encode_record_parts``).
    """
    topic = msgs[0].topic
    fields = _topic_and_store(topic, store_host)
    if fields is None:
        return None
    topic_field, magic, fixed_sizes, store, store_bits = fields
    plen = _PLEN
    not_v6_mask = ~HOST_V6_FLAGS
    # The born host of the previous message and what follows from it (hosts repeat).
    last_host: object = _NO_HOST
    born = b""
    pack = ENCODE_HEADERS[0].pack
    fixed = host_flags = 0
    # One list per record part, interleaved once at the end: appending to short lists is
    # cheaper than growing one list by five items a record (``parts += (...)`` spent ~1,000
    # instructions a record in list_extend, reallocating the growing list, plus the tuple).
    headers: list[bytes] = []
    bodies: list[bytes] = []
    length_fields: list[bytes] = []
    properties_fields: list[bytes] = []
    starts: list[int] = []
    msg_ids: list[str] = []
    queue_offsets: list[int] = []
    start = phys_offset
    try:
        for m, uniq_tail in zip(msgs, reserved_tails(uniq_first, len(msgs)), strict=True):
            body = m.body
            body_length = len(body)
            if (
                m.properties
                or m.topic != topic
                or body.__class__ is not bytes
                or not 0 < body_length <= max_body
            ):
                return None
            uniq_key = uniq_head + uniq_tail
            keys = m.keys
            if keys.__class__ is not str:
                keys = " ".join(keys)
            tags = m.tags
            # encode_message_properties, inlined for the usual message. A value holding the
            # pair separator goes to it, which hands it to encode_properties to raise. (Two
            # ``in`` tests: ~1,500 instructions less than ``text.count``, which parses its
            # arguments the slow way.)
            # The four layouts without a delay level: TAGS and KEYS (the usual RocketMQ
            # message), KEYS alone or nothing (a keyed or keyless Kafka record), TAGS alone.
            if m.delay_level > 0:
                properties = encode_message_properties(tags, keys, m.delay_level, uniq_key)
            elif tags:
                if keys and "\x02" not in tags and "\x02" not in keys:
                    properties = (
                        f"TAGS\x01{tags}\x02KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq_key}\x02".encode()
                    )
                elif not keys and "\x02" not in tags:
                    properties = f"TAGS\x01{tags}\x02UNIQ_KEY\x01{uniq_key}\x02".encode()
                else:
                    properties = encode_message_properties(tags, keys, 0, uniq_key)
            elif not keys:
                properties = f"UNIQ_KEY\x01{uniq_key}\x02".encode()
            elif "\x02" not in keys:
                properties = f"KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq_key}\x02".encode()
            else:
                properties = encode_message_properties(tags, keys, 0, uniq_key)
            properties_length = len(properties)
            try:
                length_field = plen[properties_length]
            except IndexError:
                if properties_length > MAX_PROPERTIES_BYTES:
                    return None
                length_field = PROPERTIES_LENGTH.pack(properties_length)
            born_host = m.born_host
            if born_host is not last_host:
                found = _host_bytes(born_host or default_born_host)
                if found is None:
                    return None
                last_host = born_host
                born = found
                variant = (len(born) == IPV6_HOST_SIZE) | store_bits
                pack = ENCODE_HEADERS[variant].pack
                fixed = fixed_sizes[variant] + len(topic_field)
                host_flags = variant << 4
            size = fixed + body_length + properties_length
            sys_flag = m.sys_flag
            if sys_flag & 0x4:  # PREPARED and ROLLBACK records take no queue offset
                record_queue_offset = 0
            else:
                record_queue_offset = queue_offset
                queue_offset += 1
            born_timestamp = m.born_timestamp
            headers.append(
                pack(
                    size, magic, crc32(body) & BODY_CRC_MASK, queue_id, m.flag, record_queue_offset,
                    phys_offset, (sys_flag & not_v6_mask) | host_flags,
                    now_ms if born_timestamp is None else born_timestamp, born, store_timestamp,
                    store, m.reconsume_times, 0, body_length,
                )
            )  # fmt: skip
            bodies.append(body)
            length_fields.append(length_field)
            properties_fields.append(properties)
            starts.append(phys_offset)
            msg_ids.append(uniq_key)
            queue_offsets.append(record_queue_offset)
            phys_offset += size
    except (MessageIllegalError, UnicodeEncodeError, TypeError):
        return None  # the general path raises it, in its order
    except struct.error as exc:
        raise MessageIllegalError(
            "record", "field_range", f"record: an integer field does not fit its width ({exc})"
        ) from None
    results = BatchPutResults(
        PutStatus.PUT_OK, topic, queue_id, store_timestamp, msg_ids, starts, queue_offsets,
        phys_offset, partial(create_offset_msg_ids, store),
    )  # fmt: skip
    parts = _interleave(topic_field, headers, bodies, length_fields, properties_fields)
    return parts, results, phys_offset - start, queue_offset


@dataclass(slots=True)
class PlainColumns:
    """A plain batch of one topic as columns: what a Kafka produce batch of records without
    headers is (``kafka_listener.plain_columns``). Record ``i`` is the message
    ``to_messages()[i]``: body, keys and born timestamp of its own, the batch's topic and
    born host, and nothing else (no tags, properties, flag or delay level)."""

    topic: str
    bodies: Sequence[bytes]
    keys: Sequence[str]  # "" for none (a keyless Kafka record), else one key
    born_timestamps: Sequence[int | None]  # None: the store's time (BORNTIMESTAMP)
    born_host: HostAddress | None = None
    #: What :meth:`key_pairs` answers, when whoever made the columns knows it (the Kafka
    #: decoder: its keys are one decoded text, split): must agree with ``keys``.
    known_key_pairs: tuple[bytes, I64s] | None = field(default=None, repr=False, compare=False)
    _lengths: npt.NDArray[np.int64] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __len__(self) -> int:
        return len(self.bodies)

    def body_lengths(self) -> npt.NDArray[np.int64] | None:
        """Each body's length, or None when some body is not ``bytes``; worked out once
        (the broker's checks and the encoder both read it; the columns are not changed
        once read)."""
        lengths = self._lengths
        if lengths is None:
            bodies = self.bodies
            if set(map(type, bodies)) != {bytes}:
                return None
            lengths = self._lengths = np.fromiter(map(len, bodies), np.int64, len(bodies))
        return lengths

    def key_pairs(self) -> tuple[bytes, I64s] | None:
        """``keyed_grid.key_pairs(keys)`` (the keys' properties pairs back to back, and
        their lengths) when every key is a non-empty ``str`` of ASCII without the pair
        separator, else None; worked out once, or given (``known_key_pairs``: ~60 ns a key
        less for the encoder, whose checks it answers)."""
        found = self.known_key_pairs
        if found is None:
            keys = self.keys
            found = _NO_PAIRS
            if keys and "" not in keys and set(map(type, keys)) == {str}:
                joined = "".join(keys)
                if joined.isascii() and "\x02" not in joined:
                    found = key_pairs(keys)
            self.known_key_pairs = found
        return None if found is _NO_PAIRS else found

    def to_messages(self) -> list[Message]:
        """The equivalent messages (what the general paths and the tests take)."""
        topic, host = self.topic, self.born_host
        return [
            Message(topic, body, None, keys, None, 0, born_timestamp, host)
            for body, keys, born_timestamp in zip(
                self.bodies, self.keys, self.born_timestamps, strict=True
            )
        ]


def encode_plain_columns(
    columns: PlainColumns,
    queue_id: int,
    uniq_head: str,
    uniq_first: int,
    now_ms: int,
    max_body: int,
    default_born_host: HostAddress,
    store_host: HostAddress,
    phys_offset: int,
    queue_offset: int,
    store_timestamp: int,
) -> EncodedBatch | None:
    """:func:`encode_plain` of ``columns.to_messages()``: same arguments, bytes, results,
    None and errors, without a message per record.

    A batch of records without keys or with keys of one length (``plain_grid.py``), or
    all keyed with ASCII keys of several lengths (``keyed_grid.py``), is encoded as one
    numpy grid of headers and tails; other batches step by step, each step a
    C-level ``map`` or a comprehension over a column (CRCs, sizes, positions, headers)
    rather than a step of one Python loop: ~0.4 us a record less than building the messages
    and encoding them (5,000 keyless 100-byte records). A batch this does not surely encode
    (a body that is not ``bytes`` or out of range, a key with a separator or long
    properties, an integer out of range, a topic or host that cannot be encoded) goes to
    :func:`encode_plain` as messages, which decides: rare batches pay for the messages,
    and no rule is written twice.
    """
    bodies = columns.bodies
    count = len(bodies)
    try:
        fields = _topic_and_store(columns.topic, store_host)
        born = _host_bytes(columns.born_host or default_born_host)
        lengths = columns.body_lengths() if count else None
        if fields is None or born is None or lengths is None:
            raise _Declined
        if not 0 < lengths.min() <= lengths.max() <= max_body:
            raise _Declined
        topic_field, magic, fixed_sizes, store, store_bits = fields
        variant = (len(born) == IPV6_HOST_SIZE) | store_bits
        header = ENCODE_HEADERS[variant]
        born_timestamps = columns.born_timestamps
        if None in born_timestamps:
            born_timestamps = [now_ms if t is None else t for t in born_timestamps]
        if count >= MIN_GRID_RECORDS:
            keys_text = _grid_keys(columns, len(uniq_head))
            if keys_text is not None:
                crcs = body_crc_array(bodies, count)
                template = header.pack(
                    0, magic, 0, queue_id, 0, 0, 0, variant << 4, 0, born, store_timestamp,
                    store, 0, 0, 0,
                )  # fmt: skip
                timestamps = np.array(born_timestamps, np.int64)
                if isinstance(keys_text, bytes):
                    parts, starts, end = encode_grid(
                        bodies, lengths, crcs, timestamps, keys_text, template, topic_field,
                        uniq_head, uniq_first, phys_offset, queue_offset,
                    )  # fmt: skip
                else:
                    parts, starts, end = encode_keyed_grid(
                        bodies, lengths, crcs, timestamps, *keys_text, template, topic_field,
                        uniq_head, uniq_first, phys_offset, queue_offset,
                    )  # fmt: skip
                return _encoded(
                    columns, queue_id, store_timestamp, store, uniq_head, uniq_first, parts,
                    starts, end, phys_offset, queue_offset,
                )  # fmt: skip
        body_lengths = lengths.tolist()
        fixed = fixed_sizes[variant] + len(topic_field)
        msg_ids = [uniq_head + tail for tail in reserved_tails(uniq_first, count)]
        if columns.keys.count("") == count:  # keyless: the UNIQ_KEY alone, of one length
            # (a comprehension of f-strings: ~0.1 us a record, ``map(str.format)`` ~0.3)
            properties = [f"UNIQ_KEY\x01{msg_id}\x02".encode() for msg_id in msg_ids]
            length_fields = [_PLEN[len(properties[0])]] * count
            sizes = list(map(add, body_lengths, repeat(fixed + len(properties[0]))))
        else:
            properties = _keyed_properties(columns.keys, msg_ids)
            properties_lengths = list(map(len, properties))
            if max(properties_lengths) >= _PLEN_TABLE_SIZE:
                raise _Declined
            length_fields = list(map(_PLEN.__getitem__, properties_lengths))
            sizes = list(map(add, map(add, body_lengths, properties_lengths), repeat(fixed)))
        starts = list(accumulate(sizes, initial=phys_offset))
        end = starts.pop()
        queue_offsets = list(range(queue_offset, queue_offset + count))
        crc_list = body_crcs(bodies)
        headers = list(
            map(
                header.pack, sizes, repeat(magic), crc_list, repeat(queue_id),
                repeat(0), queue_offsets, starts, repeat(variant << 4), born_timestamps,
                repeat(born), repeat(store_timestamp), repeat(store), repeat(0), repeat(0),
                body_lengths,
            )
        )  # fmt: skip
    except (_Declined, struct.error, TypeError, OverflowError):
        return encode_plain(
            columns.to_messages(), queue_id, uniq_head, uniq_first, now_ms, max_body,
            default_born_host, store_host, phys_offset, queue_offset, store_timestamp,
        )  # fmt: skip
    parts = _interleave(topic_field, headers, bodies, length_fields, properties)
    return _encoded(
        columns, queue_id, store_timestamp, store, uniq_head, uniq_first, parts, starts, end,
        phys_offset, queue_offset,
    )  # fmt: skip


def _encoded(
    columns: PlainColumns,
    queue_id: int,
    store_timestamp: int,
    store: bytes,
    uniq_head: str,
    uniq_first: int,
    parts: list[bytes],
    starts: list[int],
    end: int,
    phys_offset: int,
    queue_offset: int,
) -> EncodedBatch:
    """:func:`encode_plain_columns`' answer, its UNIQ_KEYs made when read."""
    count = len(starts)
    results = BatchPutResults(
        PutStatus.PUT_OK, columns.topic, queue_id, store_timestamp,
        ReservedIds(uniq_head, uniq_first, count), starts,
        range(queue_offset, queue_offset + count), end, partial(create_offset_msg_ids, store),
    )  # fmt: skip
    return parts, results, end - phys_offset, queue_offset + count


def _grid_keys(columns: PlainColumns, uniq_length: int) -> bytes | tuple[bytes, I64s] | None:
    """The keys of a batch for the grids: for ``plain_grid.encode_grid`` the keys back to
    back when all have one length (b"" when there are none), for
    ``keyed_grid.encode_keyed_grid`` their pairs and lengths (``PlainColumns.key_pairs``)
    when they have several; None when neither takes them: some but not all records keyed,
    keys not ASCII, holding the pair separator, or too long for the length table."""
    count = len(columns.keys)
    if columns.keys.count("") == count:
        return b""
    found = columns.key_pairs()
    if found is None:
        return None
    pairs, lengths = found
    longest = int(lengths.max())
    if properties_size(longest, uniq_length + 4) >= _PLEN_TABLE_SIZE:
        return None
    if lengths.min() == longest:  # one length: the keys without their pairs' bytes
        rows = np.frombuffer(pairs, np.uint8).reshape(count, -1)
        return rows[:, len(KEYS_OPEN) : len(KEYS_OPEN) + longest].tobytes()
    return found


_NO_PAIRS: tuple[bytes, I64s] = (b"", np.zeros(0, np.int64))  # key_pairs(): worked out, none


class _Declined(Exception):
    """A batch :func:`encode_plain_columns` leaves to :func:`encode_plain`."""


def _keyed_properties(keys: Sequence[str], msg_ids: list[str]) -> list[bytes]:
    """The properties of records with a key or none: ``KEYS`` (if any) then ``UNIQ_KEY``,
    as :func:`encode_plain` writes them.

    Raises:
        _Declined: a key it must decide (not text, holding the pair separator, not
            encodable).
    """
    for k in keys:
        if k.__class__ is not str or "\x02" in k:
            raise _Declined
    try:
        return [
            (f"KEYS\x01{k}\x02UNIQ_KEY\x01{u}\x02" if k else f"UNIQ_KEY\x01{u}\x02").encode()
            for k, u in zip(keys, msg_ids, strict=True)
        ]
    except UnicodeEncodeError:
        raise _Declined from None


def _interleave(
    topic_field: bytes,
    headers: Sequence[bytes],
    bodies: Sequence[bytes],
    length_fields: Sequence[bytes],
    properties_fields: Sequence[bytes],
) -> list[bytes]:
    """The parts of the records, in order: header, body, topic, properties length and
    properties of each."""
    parts = [topic_field] * (5 * len(headers))
    parts[0::5] = headers
    parts[1::5] = bodies
    parts[3::5] = length_fields
    parts[4::5] = properties_fields
    return parts


def _topic_and_store(
    topic: str, store_host: HostAddress
) -> tuple[bytes, int, tuple[int, ...], bytes, int] | None:
    """The topic's field, magic code and fixed record sizes (``cache_topic_field``), the
    store host's bytes and its variant bits; None when either cannot be encoded."""
    cached = TOPIC_FIELDS.get(topic)
    if cached is None:
        try:
            cached = cache_topic_field(topic, 0)
        except MessageIllegalError:
            return None
    store = _host_bytes(store_host)
    if store is None:
        return None
    return (*cached, store, 2 if len(store) == IPV6_HOST_SIZE else 0)


_NO_HOST = object()


def _host_bytes(host: HostAddress) -> bytes | None:
    """``encode_host(host)`` through the writer's cache, or None if it is not an address."""
    found = HOST_BYTES.get(host)
    if found is None:
        try:
            found = cache_host_bytes(host)
        except ValidationError:
            return None
    return found
