"""The record-start chain (pipeline.chain): lanes and candidates both equal the plain walk."""

from __future__ import annotations

import random
from array import array

import pytest

from mqcore.format.msgid import HostAddress
from mqcore.format.record import MIN_RECORD_SIZE, encode_blank, encode_record
from pipeline.chain import _candidate_chain, _lane_chain, chain

BASE = 3 << 30  # the chunk's absolute offset: guesses check PHYSICALOFFSET against it
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


def both_ways(data: bytes, limit: int) -> tuple[list[int], int]:
    """chain() and the candidate chain, checked equal to each other."""
    fast, slow = array("i"), array("i")
    end = chain(data, limit, BASE, fast)
    assert _candidate_chain(data, limit, slow) == end
    assert fast == slow
    return fast.tolist(), end


RNG = random.Random(7)
VARYING = [RNG.choice([100, 100, 100, 101, 103, 640, 0, 2000]) for _ in range(1500)]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(records([100] * 1200), id="one-size"),
        pytest.param(records(VARYING), id="varying-sizes"),
        pytest.param(records([100] * 300, topic="%RETRY%" + "g" * 150), id="v2"),
        pytest.param(records(VARYING[:600], host=V6), id="ipv6"),
        pytest.param(records([90] * 800) + encode_blank(5000) + bytes(4992), id="blank-end"),
        pytest.param(records([90] * 800) + bytes(3000), id="zeros-end"),
        pytest.param(records(VARYING)[:-150], id="torn-tail"),
        pytest.param(records(VARYING) + b"\x00\x00\x01\x00garbage" * 40, id="garbage-end"),
    ],
)
def test_lanes_give_the_plain_chain(data: bytes) -> None:
    for limit in (len(data) - 4, len(data) // 2 + 37):
        assert _lane_chain(data, limit, BASE) is not None  # the lane path itself is tested
        assert both_ways(data, limit) == plain_chain(data, limit)


def test_bodies_with_self_located_false_starts_fall_back() -> None:
    """Every body opens with a copy of a record header naming its own position: window
    guesses pick those, the lanes do not land on them, and the candidates take over."""
    out = bytearray()
    for i in range(1200):
        body_at = BASE + len(out) + 88  # V1/IPv4 header
        fake = record(body_at, b"f" * (i % 5))
        out += record(BASE + len(out), fake + b"b" * (100 + i % 3))
    data = bytes(out)
    assert _lane_chain(data, len(data) - 4, BASE) is None
    assert both_ways(data, len(data) - 4) == plain_chain(data, len(data) - 4)


def test_a_lane_cut_short_falls_back() -> None:
    """A record in the middle whose TOTALSIZE is below the minimum ends the chain there."""
    data = bytearray(records([100] * 1200))
    middle = plain_chain(bytes(data), len(data))[0][600]
    data[middle : middle + 4] = (50).to_bytes(4, "big")
    data = bytearray(data)
    assert _lane_chain(bytes(data), len(data) - 4, BASE) is None
    starts, end = both_ways(bytes(data), len(data) - 4)
    assert (starts, end) == plain_chain(bytes(data), len(data) - 4) and end == middle
