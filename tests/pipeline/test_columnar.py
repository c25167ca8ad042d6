"""The columnar decoder (no Spark): every row equals what mqcore decodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from mqcore.format.msgid import HostAddress
from mqcore.format.properties import encode_properties
from mqcore.format.record import encode_record
from pipeline.columnar import Bounds, decode_chunk
from pipeline.scan import scan_range
from pipeline.schema import ARROW_SCHEMA
from pipeline.segments import WalkState, iter_chunks, list_segments, plan_ranges, snapshot_end
from tests.pipeline.conftest import LONG_TOPIC, START_MS, ForeignStore, mqcore_rows

NO_BOUNDS = Bounds()


def scan(root: Path, bounds: Bounds = NO_BOUNDS, **plan: Any) -> list[dict[str, Any]]:
    chunk_bytes = plan.pop("chunk_bytes", 16 << 20)
    rows: list[dict[str, Any]] = []
    for rng in plan_ranges(list_segments(root), **plan):
        for batch in scan_range(rng, bounds, chunk_bytes=chunk_bytes):
            assert batch.schema == ARROW_SCHEMA
            rows.extend(batch.to_pylist())
    return rows


def normalized(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as Arrow returns them (map as a list of pairs), for comparing with mqcore's."""
    return pa.Table.from_pylist(rows, schema=ARROW_SCHEMA).to_pylist()


def test_every_row_equals_mqcore(mq_store: Path) -> None:
    expected = normalized(mqcore_rows(mq_store))
    assert len(list_segments(mq_store)) >= 4  # rolled segments
    assert {r["topic"] for r in expected} >= {"Topic0", LONG_TOPIC}
    assert any(r["born_host"].startswith("[::1]") for r in expected)  # IPv6: the slow path
    assert scan(mq_store) == expected


@pytest.mark.parametrize(("max_partition_bytes", "chunk_bytes"), [(5000, 700), (20_000, 3000)])
def test_split_segments_and_small_chunks_give_the_same_rows(
    mq_store: Path, max_partition_bytes: int, chunk_bytes: int
) -> None:
    ranges = plan_ranges(list_segments(mq_store), max_partition_bytes=max_partition_bytes)
    assert sum(not r.synced for r in ranges) > 10  # slices that must find their first record
    rows = scan(mq_store, max_partition_bytes=max_partition_bytes, chunk_bytes=chunk_bytes)
    assert rows == normalized(mqcore_rows(mq_store))


def test_foreign_store_fields(foreign_store: ForeignStore) -> None:
    rows = scan(foreign_store.root)
    assert len(rows) == len(foreign_store.written)
    for row, w in zip(rows, foreign_store.written, strict=True):
        m = w.message
        assert (row["topic"], row["queue_id"], row["body"]) == (m.topic, m.queue_id, m.body)
        assert (row["phys_offset"], row["queue_offset"], row["store_size"]) == (
            w.phys_offset,
            w.queue_offset,
            w.size,
        )
        assert dict(row["properties"]) == m.properties
        assert (
            row["store_timestamp"] == m.store_timestamp
            and row["born_timestamp"] == m.born_timestamp
        )
        assert row["born_host"] == "192.168.0.10:50123" and row["store_host"] == "10.0.0.5:10911"
        assert row["msg_id"] == m.properties.get("UNIQ_KEY", row["offset_msg_id"])
        assert row["keys"] == (m.properties["KEYS"].split() if "KEYS" in m.properties else [])
        assert row["offset_msg_id"] == f"0A00000500002A9F{w.phys_offset:016X}"


def test_bounds(mq_store: Path) -> None:
    everything = normalized(mqcore_rows(mq_store))
    begin, end = START_MS + 200_000, START_MS + 900_000
    bounds = Bounds(
        topics=frozenset({"Topic1"}), begin_ms=begin, end_ms=end, min_phys=30_000, max_phys=200_000
    )
    expected = [
        r
        for r in everything
        if r["topic"] == "Topic1"
        and begin <= r["store_timestamp"] <= end
        and 30_000 <= r["phys_offset"] < 200_000
    ]
    assert expected and scan(mq_store, bounds) == expected


def _record(phys: int, props: bytes, topic: str = "T") -> bytes:
    return encode_record(
        topic=topic, queue_id=0, flag=0, queue_offset=0, phys_offset=phys, sys_flag=0,
        born_timestamp=START_MS, born_host=HostAddress("1.2.3.4", 1), store_timestamp=START_MS,
        store_host=HostAddress("5.6.7.8", 9), reconsume_times=0, prepared_transaction_offset=0,
        body=b"x", properties=props,
    )  # fmt: skip


def _write_segment(root: Path, records: list[bytes], size: int = 4096) -> None:
    (root / "commitlog").mkdir(parents=True)
    data = b"".join(records)
    (root / "commitlog" / f"{0:020d}").write_bytes(data + bytes(size - len(data)))


def test_rocketmq_property_rules_and_bad_utf8(tmp_path: Path) -> None:
    odd = [
        b"A\x01first\x02B\x01b\x02A\x01second\x02",  # a repeated name: the later value wins
        b"\x01noname\x02novalue\x01\x02ok\x01v\x01with-sep\x02",  # dropped, dropped, kept whole
        b"bad\x01\xff\xfe\x02",  # malformed UTF-8 becomes U+FFFD, as in Java
        b"",
    ]
    records, pos = [], 0
    for props in odd:
        records.append(_record(pos, props))
        pos += len(records[-1])
    _write_segment(tmp_path, records)
    rows = scan(tmp_path)
    assert [dict(r["properties"]) for r in rows] == [
        {"A": "second", "B": "b"},
        {"ok": "v\x01with-sep"},
        {"bad": "\ufffd\ufffd"},
        {},
    ]
    assert rows == normalized(mqcore_rows(tmp_path))


def test_walk_stops_at_zeros_and_reports_where(mq_store: Path) -> None:
    segments = list_segments(mq_store)
    last = plan_ranges(segments)[-1]
    state = WalkState()
    count = sum(chunk.count for chunk in iter_chunks(last, state))
    assert count > 0 and state.reason == "end_of_data"
    assert state.next_offset == snapshot_end(mq_store)
    first = plan_ranges(segments)[0]
    state = WalkState()
    list(iter_chunks(first, state))
    assert state.reason == "blank"


def test_torn_tail_is_not_read_with_crc_checks(tmp_path: Path) -> None:
    records = [_record(0, encode_properties({"K": "v"}))]
    records.append(_record(len(records[0]), b""))
    torn = bytearray(records[1])
    torn[88:] = bytes(len(torn) - 88)  # header written, body and the rest not yet
    _write_segment(tmp_path, [records[0], bytes(torn)])
    assert len(scan(tmp_path, verify_crc="tail")) == 1
    assert snapshot_end(tmp_path) == len(records[0])


def test_corrupt_record_without_a_size_ends_the_scan(tmp_path: Path) -> None:
    first = _record(0, b"")
    second = bytearray(_record(len(first), b""))
    second[88 + 1] = 0xFF  # negative V1 topic length: mqcore says Corrupt(size=0)
    third = _record(len(first) + len(second), b"")
    _write_segment(tmp_path, [first, bytes(second), third])
    assert [r["phys_offset"] for r in scan(tmp_path, verify_crc="none")] == [0]
    n = len(
        list(
            decode_chunk(
                next(iter_chunks(plan_ranges(list_segments(tmp_path))[0], WalkState())), Bounds()
            )[0].to_pylist()
        )
    )
    assert n == 1


def test_bodies_holding_magic_codes_and_odd_properties(tmp_path: Path) -> None:
    """Cases of the vectorised walk and property parser: a body that holds a record's magic
    code and a copy of a whole record (false record starts), a name repeated among more than
    16 properties, separators at the edges, and a topic that is not valid UTF-8."""
    magic = (-626843481).to_bytes(4, "big", signed=True)  # V1 message magic
    many = "".join(f"p{i}\x01v{i}\x02" for i in range(20)) + "p3\x01late\x02"
    cases: list[tuple[bytes, bytes, str]] = [
        (encode_properties({"K": "v"}), b"xx" + magic + b"\x00\x00\x00\x5b" + magic * 3, "T"),
        (many.encode(), b"body", "T"),
        (b"\x02\x02lead\x01x\x02\x01\x02", b"", "T"),
        (b"tail\x01y", b"b", "T"),
        (encode_properties({"KEYS": "  a  b ", "TAGS": "t"}), b"c", "T\udcff"),
    ]
    records, pos = [], 0
    for props, body, topic in cases:
        record = _custom_record(pos, props, body, topic)
        records.append(record)
        pos += len(record)
    # A body that is an entire valid record: only the TOTALSIZE chain tells it is a body.
    records.append(_custom_record(pos, b"", records[0], "T"))
    _write_segment(tmp_path, records, size=8192)
    rows = scan(tmp_path)
    assert rows == normalized(mqcore_rows(tmp_path))
    assert len(rows) == len(records)
    assert dict(rows[1]["properties"])["p3"] == "late" and len(rows[1]["properties"]) == 20
    assert dict(rows[2]["properties"]) == {"lead": "x"}
    assert dict(rows[3]["properties"]) == {"tail": "y"}
    assert rows[4]["keys"] == ["a", "b"] and rows[4]["topic"] == "T\ufffd"
    assert rows[5]["body"] == records[0]


def _custom_record(phys: int, props: bytes, body: bytes, topic: str) -> bytes:
    record = bytearray(
        encode_record(
            topic="T" * len(topic.encode("utf-8", "surrogateescape")), queue_id=1, flag=7,
            queue_offset=3, phys_offset=phys, sys_flag=0, born_timestamp=START_MS,
            born_host=HostAddress("1.2.3.4", 1), store_timestamp=START_MS + 5,
            store_host=HostAddress("5.6.7.8", 9), reconsume_times=2,
            prepared_transaction_offset=0, body=body, properties=props,
        )
    )  # fmt: skip
    raw = topic.encode("utf-8", "surrogateescape")
    at = 88 + len(body) + 1  # V1/IPv4: header, body, 1-byte topic length, topic
    record[at : at + len(raw)] = raw
    return bytes(record)


@pytest.mark.parametrize(
    "columns",
    [["phys_offset"], ["topic", "store_time"], ["msg_id", "keys"], ["tags", "body", "born_host"]],
)
def test_projection_gives_the_same_values(mq_store: Path, columns: list[str]) -> None:
    full = scan(mq_store)
    rows: list[dict[str, Any]] = []
    for rng in plan_ranges(list_segments(mq_store)):
        for batch in scan_range(rng, NO_BOUNDS, columns=columns):
            assert batch.schema.names == [c for c in ARROW_SCHEMA.names if c in columns]
            rows.extend(batch.to_pylist())
    assert rows == [{c: r[c] for c in r if c in columns} for r in full]
