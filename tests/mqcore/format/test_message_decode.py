"""The pull path's decoder (``message_decode.decode_message``) returns exactly what
``decode_record`` returns, and raises where it raises, for every record variant and for
damaged records; and pulls read from the mappings give the messages the old copy-and-decode
path gave."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import CorruptRecordError
from mqcore.format.hashing import java_string_hash
from mqcore.format.message_decode import decode_message
from mqcore.format.msgid import HostAddress
from mqcore.format.properties import encode_properties
from mqcore.format.record import decode_record, encode_record
from mqcore.message import Message
from mqcore.store import GetStatus, MessageStore
from tests.mqcore.store.test_store_fast_paths import SMALL, T0

HOSTS = [
    HostAddress("10.0.0.9", 4000),
    HostAddress("10.0.0.9", 4001),
    HostAddress("192.168.1.20", 10911),
    HostAddress("::1", 7000),
    HostAddress("fe80::1:2", 10911),
]


def _record(rng: random.Random) -> bytes:
    topic = rng.choice(["orders", "t" * 127, "T" * 128, "Ünïcode", "x"])
    props: dict[str, str] = rng.choice(
        [
            {},
            {"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "u" * 32},
            {"a": "1", "b": ""},  # an empty value is dropped on decode, as in Java
            {"ü": "värde"},
        ]
    )
    raw_props = encode_properties(props) if props else b""
    if rng.random() < 0.1:
        raw_props += b"\x02\x01x\x02y\x01"  # pairs Java ignores
    return encode_record(
        topic=topic,
        queue_id=rng.randrange(16),
        flag=rng.randrange(-5, 5),
        queue_offset=rng.randrange(1 << 40),
        phys_offset=rng.randrange(1 << 40),
        sys_flag=rng.choice([0, 0x1, 0x4, 0x8]),
        born_timestamp=rng.randrange(1 << 42),
        born_host=rng.choice(HOSTS),
        store_timestamp=rng.randrange(1 << 42),
        store_host=rng.choice(HOSTS),
        reconsume_times=rng.randrange(20),
        prepared_transaction_offset=rng.randrange(1 << 30),
        body=rng.randbytes(rng.choice([0, 1, 100, 5000])),
        properties=raw_props,
    )


def _outcome(decode: object, buf: bytes, pos: int, limit: int) -> object:
    try:
        return decode(buf, pos, limit)  # type: ignore[operator]
    except CorruptRecordError as exc:
        return ("raised", str(exc))


def _reference(buf: bytes, pos: int, limit: int) -> object:
    return decode_record(buf, pos, limit=limit)


@pytest.mark.parametrize("seed", range(4))
def test_equal_to_decode_record_for_every_variant(seed: int) -> None:
    rng = random.Random(seed)
    variants = set()
    for _ in range(300):
        record = _record(rng)
        buf = b"\x00" * 7 + record + b"\xff" * 9  # not at offset 0, not alone in the buffer
        got = decode_message(buf, 7, 7 + len(record))
        assert got == decode_record(buf, 7, limit=7 + len(record))
        assert type(got.body) is bytes
        variants.add((got.sys_flag & 0x30, len(got.topic.encode()) > 127))
    assert len(variants) == 8  # both host widths each, V1 and V2 topics


@pytest.mark.parametrize("seed", range(4))
def test_damaged_records_fail_as_decode_record_fails(seed: int) -> None:
    rng = random.Random(100 + seed)
    raised = 0
    for _ in range(400):
        record = bytearray(_record(rng))
        damage = rng.choice(["flip", "truncate", "limit"])
        limit = len(record)
        if damage == "flip":  # a header or length byte: framing must notice or decode the same
            record[rng.randrange(min(len(record), 100))] ^= 1 << rng.randrange(8)
        elif damage == "truncate":
            del record[rng.randrange(len(record)) :]
            limit = len(record)
        else:
            limit = rng.randrange(len(record))
        buf = bytes(record)
        expected = _outcome(_reference, buf, 0, limit)
        assert _outcome(decode_message, buf, 0, limit) == expected
        raised += isinstance(expected, tuple)
    assert raised > 100


def test_pulls_across_segments_equal_the_records_at_their_offsets(tmp_path: Path) -> None:
    """64 KiB CommitLog segments: a pull's records span files; each message equals the one
    ``message_at`` decodes from a copy; no-filter pulls stop at ``max_count``, ``max_bytes``
    or the queue end, and next_offset is one past the last returned."""
    store = MessageStore(tmp_path, SMALL, clock=FakeClock(T0)).open()
    try:
        rng = random.Random(7)
        for i in range(400):
            size = rng.choice([10, 900, 3000])
            store.put_messages(
                [Message("orders", rng.randbytes(size), tags=f"T{i % 3}", keys=[f"k{i}"])],
                i % 2,
            )
        store.dispatch_until_caught_up()
        assert len(store.commit_log.segments.files) > 5
        for queue_id in (0, 1):
            offset, pulled = 0, []
            while True:
                got = store.get_messages(
                    "g",
                    "orders",
                    queue_id,
                    offset,
                    rng.choice([1, 7, 32]),
                    max_bytes=rng.choice([4000, 1 << 22]),
                )
                if got.status is not GetStatus.FOUND:
                    assert got.status is GetStatus.OFFSET_OVERFLOW_ONE
                    break
                assert got.next_offset == got.messages[-1].queue_offset + 1
                pulled += got.messages
                offset = got.next_offset
            assert [m.queue_offset for m in pulled] == list(range(200))
            for m in pulled:
                assert m == store.commit_log.message_at(m.phys_offset)
        filtered = store.get_messages("g", "orders", 0, 0, 5, tag_filter={java_string_hash("T1")})
        assert filtered.status is GetStatus.FOUND
        assert [m.tags for m in filtered.messages] == ["T1"] * 5
    finally:
        store.close()
