"""The TOTALSIZE chain (mqcore.format.chain): the vectorised walk equals the reference walk,
and both equal the definition, on many shapes of bytes and bounds."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mqcore.format.chain import _lane_walk, candidates, walk, walk_reference
from mqcore.format.msgid import HostAddress
from mqcore.format.record import MIN_RECORD_SIZE, encode_blank, encode_record

BASE = 3 << 30  # the chunk's absolute offset: lane guesses check PHYSICALOFFSET against it
V4, V6 = HostAddress("10.0.0.1", 7000), HostAddress("::1", 7001)


def plain_chain(data: bytes, limit: int) -> tuple[list[int], int]:
    """The definition: TOTALSIZE after TOTALSIZE from 0 while at most limit."""
    starts, q = [], 0
    while q <= limit:
        total = int.from_bytes(data[q : q + 4], "big", signed=True)
        if total < MIN_RECORD_SIZE:
            break
        starts.append(q)
        q += total
    return starts, q


def record(phys: int, body: bytes, *, topic: str = "Topic", host: HostAddress = V4) -> bytes:
    return encode_record(
        topic=topic, queue_id=1, flag=0, queue_offset=5, phys_offset=phys, sys_flag=0,
        born_timestamp=1, born_host=host, store_timestamp=2, store_host=host,
        reconsume_times=0, prepared_transaction_offset=0, body=body,
        properties=b"TAGS\x01t\x02KEYS\x01k\x02",
    )  # fmt: skip


def records(sizes: list[int], **kw: object) -> bytes:
    out = bytearray()
    for size in sizes:
        out += record(BASE + len(out), b"b" * size, **kw)  # type: ignore[arg-type]
    return bytes(out)


def lane_chain(data: bytes, limit: int) -> tuple[list[int], int] | None:
    """The lanes alone over the whole of ``data`` (None where they cannot tell)."""
    found = _lane_walk(np.frombuffer(data, np.uint8), limit, BASE, None)
    return None if found is None else (found[0].tolist(), found[1])


def both_ways(
    data: bytes,
    start: int,
    stop: int,
    *,
    end: int | None = None,
    max_records: int | None = None,
    base: int | None = BASE,
) -> tuple[list[int], int]:
    """walk() and walk_reference(), checked equal to each other."""
    fast, q_fast = walk(data, start, stop, end=end, max_records=max_records, base=base)
    slow, q_slow = walk_reference(data, start, stop, end=end, max_records=max_records)
    assert fast.dtype == np.int64
    assert (fast.tolist(), q_fast) == (slow, q_slow)
    return slow, q_slow


RNG = random.Random(7)
VARYING = [RNG.choice([100, 100, 100, 101, 103, 640, 0, 2000]) for _ in range(1500)]
STRETCHES = [size for size in (100, 105, 100, 110, 99, 300) for _ in range(700)]
SHAPES = [
    pytest.param(records([100] * 1200), id="one-size"),
    pytest.param(records(VARYING), id="varying-sizes"),
    pytest.param(records(STRETCHES), id="stretches"),
    pytest.param(records([100] * 300, topic="%RETRY%" + "g" * 150), id="v2"),
    pytest.param(records(VARYING[:600], host=V6), id="ipv6"),
    pytest.param(records([90] * 800) + encode_blank(5000) + bytes(4992), id="blank-end"),
    pytest.param(records([90] * 800) + bytes(3000), id="zeros-end"),
    pytest.param(records(VARYING)[:-150], id="torn-tail"),
    pytest.param(records(VARYING) + b"\x00\x00\x01\x00garbage" * 40, id="garbage-end"),
]


@pytest.mark.parametrize("data", SHAPES)
def test_lanes_give_the_plain_chain(data: bytes) -> None:
    for limit in (len(data) - 4, len(data) // 2 + 37):
        assert lane_chain(data, limit) is not None  # the lane path itself is tested
        assert lane_chain(data, limit) == plain_chain(data, limit)
        assert both_ways(data, 0, limit + 1) == plain_chain(data, limit)


@pytest.mark.parametrize("data", SHAPES)
def test_bounded_walks_equal_the_reference(data: bytes) -> None:
    """Reput's walks: a run of at most so many records, ending within the written bytes,
    from record starts all along the chain, stop and end anywhere."""
    starts = plain_chain(data, len(data) - 4)[0]
    rng = random.Random(len(data))
    for _ in range(60):
        start = rng.choice(starts)
        end = rng.randrange(start, len(data) + 1)
        stop = rng.randrange(start, max(start, end - MIN_RECORD_SIZE) + 2)
        for max_records in (1, 7, 2048, None):
            both_ways(data, start, stop, end=end, max_records=max_records, base=None)
            both_ways(data, start, stop, end=end, max_records=max_records)


def test_the_reference_is_the_definition() -> None:
    data = records(VARYING) + bytes(200)
    assert walk_reference(data, 0, len(data) - 3) == plain_chain(data, len(data) - 4)
    five = walk_reference(data, 0, len(data) - 3, max_records=5)[0]
    assert five == plain_chain(data, 1 << 40)[0][:5]
    first, second = plain_chain(data, 1 << 40)[0][:2]
    # A record must end within ``end``: the first one alone fits, then the walk stops there.
    assert walk_reference(data, 0, len(data) - 3, end=second) == ([0], second)
    assert walk_reference(data, 0, len(data) - 3, end=second - 1) == ([], 0)
    # Positions are relative to ``start``.
    size = int.from_bytes(data[second : second + 4], "big")
    assert walk_reference(data, second, second + 1) == ([0], second + size)


def test_bodies_with_self_located_false_starts_fall_back() -> None:
    """Every body opens with a copy of a record header naming its own position: window
    guesses pick those, the lanes do not land on them, and the reference takes over."""
    out = bytearray()
    for i in range(1200):
        body_at = BASE + len(out) + 88  # V1/IPv4 header
        fake = record(body_at, b"f" * (i % 5))
        out += record(BASE + len(out), fake + b"b" * (100 + i % 3))
    data = bytes(out)
    assert lane_chain(data, len(data) - 4) is None
    assert both_ways(data, 0, len(data) - 3) == plain_chain(data, len(data) - 4)


def test_a_lane_cut_short_falls_back() -> None:
    """A record in the middle whose TOTALSIZE is below the minimum ends the chain there."""
    data = bytearray(records([100] * 1200))
    middle = plain_chain(bytes(data), len(data))[0][600]
    data[middle : middle + 4] = (50).to_bytes(4, "big")
    assert lane_chain(bytes(data), len(data) - 4) is None
    starts, end = both_ways(bytes(data), 0, len(data) - 3)
    assert (starts, end) == plain_chain(bytes(data), len(data) - 4) and end == middle


@pytest.mark.parametrize("total", [0, -1, 1, MIN_RECORD_SIZE - 1, 1 << 30, -(1 << 31)])
def test_corrupt_sizes_end_the_chain(total: int) -> None:
    """A corrupt TOTALSIZE anywhere (first record, inside a stretch, inside a lane) ends the
    walk there, or, for a huge one, takes that record as running past the bytes given."""
    clean = records(VARYING[:400] + [100] * 400)
    starts = plain_chain(clean, len(clean) - 4)[0]
    for index in (0, 1, 17, 350, 401, 799):
        data = bytearray(clean)
        data[starts[index] : starts[index] + 4] = total.to_bytes(4, "big", signed=True)
        data = bytearray(data)
        expected = plain_chain(bytes(data), len(data) - 4)
        assert both_ways(bytes(data), 0, len(data) - 3) == expected
        assert both_ways(bytes(data), 0, len(data) - 3, base=None) == expected
        both_ways(bytes(data), 0, len(data) - 3, end=len(data), max_records=2048)


def test_empty_and_tiny_walks() -> None:
    data = records([100])
    assert both_ways(data, 0, 0) == ([], 0)
    assert both_ways(data, 5, 5) == ([], 5)
    assert both_ways(data, 0, 1, max_records=0) == ([], 0)
    assert both_ways(data, 0, 1) == ([0], len(data))
    assert both_ways(bytes(300), 0, 297) == ([], 0)


def test_candidates_find_every_record_start() -> None:
    data = records(VARYING[:300]) + bytes(500)
    at, totals = candidates(data)
    starts = plain_chain(data, len(data) - 4)[0]
    assert set(starts) <= set(at.tolist())
    sizes = dict(zip(at.tolist(), totals.tolist(), strict=True))
    assert all(sizes[q] == int.from_bytes(data[q : q + 4], "big") for q in starts)
    assert candidates(b"short")[0].tolist() == []
