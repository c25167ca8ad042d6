"""The walk's body CRC check (segments._first_bad_crc) against mqcore's check per record."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from mqcore.format.chain import walk
from mqcore.format.msgid import HostAddress
from mqcore.format.record import encode_record
from pipeline.segments import (
    WalkState,
    _crc_ok,
    _first_bad_crc,
    iter_chunks,
    list_segments,
    plan_ranges,
)

V4, V6 = HostAddress("10.0.0.1", 7000), HostAddress("::1", 7001)


def record(phys: int, body: bytes, *, topic: str = "T", host: HostAddress = V4) -> bytes:
    return encode_record(
        topic=topic, queue_id=1, flag=0, queue_offset=5, phys_offset=phys, sys_flag=0,
        born_timestamp=1, born_host=host, store_timestamp=2, store_host=host,
        reconsume_times=0, prepared_transaction_offset=0, body=body, properties=b"K\x01v\x02",
    )  # fmt: skip


def mixed(count: int) -> bytearray:
    """V1/IPv4 records of assorted body sizes (some empty), with V2 and IPv6 ones among them."""
    out = bytearray()
    for i in range(count):
        kind = {3: {"topic": "%RETRY%" + "g" * 150}, 5: {"host": V6}}.get(i % 7, {})
        out += record(len(out), bytes([i % 251]) * (i * 37 % 300), **kind)  # type: ignore[arg-type]
    return out


def per_record(data: bytes, positions: array[int], end: int) -> int:
    """The reference: mqcore's check on each record until one fails."""
    bounds = [*positions, end]
    for i in range(len(positions)):
        if not _crc_ok(data, bounds[i], bounds[i + 1] - bounds[i]):
            return i
    return len(positions)


def chain_of(data: bytes) -> tuple[array[int], int]:
    starts, end = walk(data, 0, len(data) - 3, base=0)
    return array("i", starts.tolist()), end


@pytest.mark.parametrize("flip", [None, 0, 1, 3, 5, 60, 199])
def test_vectorised_crc_check_equals_mqcore(flip: int | None) -> None:
    data = mixed(200)
    positions, end = chain_of(bytes(data))
    assert len(positions) == 200
    if flip is not None:  # one body byte (or, for an empty body, its CRC field) changed
        q = positions[flip]
        body_length = int.from_bytes(data[q + 84 : q + 88], "big")
        at = q + 8 if body_length == 0 or flip % 7 in (3, 5) else q + 88 + body_length // 2
        data[at] ^= 0x40
    view = memoryview(bytes(data))
    found = _first_bad_crc(view, positions, len(positions), end)
    assert found == per_record(bytes(data), positions, end)
    if flip is not None and flip % 7 not in (3, 5) and int.from_bytes(data[84:88], "big"):
        assert found == flip


def test_walk_stops_at_a_torn_record_mid_chunk(tmp_path: Path) -> None:
    data = mixed(120)
    positions, _ = chain_of(bytes(data))
    q = positions[80]
    data[q + 88 + 5] ^= 0xFF  # record 80 (V1/IPv4, 80 * 37 % 300 = 260-byte body)
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(bytes(data) + bytes(4096))
    rng = plan_ranges(list_segments(tmp_path), verify_crc="all")[0]
    state = WalkState()
    assert sum(c.count for c in iter_chunks(rng, state)) == 80
    assert state.reason == "crc" and state.next_offset == q
