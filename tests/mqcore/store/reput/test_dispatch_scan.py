"""``dispatch_scan.dispatch_columns`` (reput without listeners) walks the log as
``iter_dispatch`` does: the same records, fields, skips and stopping offsets, on every kind of
record (IPv6 hosts, V2 topics, SCHEDULE_TOPIC_XXXX, corrupt ones, blank records)."""

from __future__ import annotations

import random
from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.format.msgid import HostAddress
from mqcore.format.properties import encode_properties
from mqcore.format.record import DispatchRequest, decode_record
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.commit_log import CommitLog
from mqcore.store.reput.dispatch_scan import DispatchRow, dispatch_columns

T0 = 1_700_000_000_000
SMALL = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=7,
    index_max_entries=60,
)
TOPICS = ("orders", "%RETRY%" + "g" * 150, "SCHEDULE_TOPIC_XXXX")


def fill(store: MessageStore, count: int) -> None:
    rng = random.Random(11)
    for i in range(count):
        store.put_message(
            Message(
                rng.choice(TOPICS),
                rng.randbytes(rng.choice([1, 300, 2000])),
                tags=rng.choice(["A", "Tág", None]),
                keys=rng.choice([f"k{i}", [f"k{i}", f"g{i % 5}"], []]),
                properties=rng.choice([None, {"DELAY": "2", "REAL_TOPIC": "orders"}, {"x": "y"}]),
                born_host=rng.choice([HostAddress("10.0.0.1", 1), HostAddress("2001:db8::5", 2)]),
                sys_flag=rng.choice([0, 0x4, 0x8, 0xC]),
            ),
            queue_id=rng.randrange(2),
        )


def walk_requests(
    log: CommitLog, start: int, end: int, budget: int
) -> tuple[list[DispatchRow], int]:
    rows: list[DispatchRow] = []
    for item in log.iter_dispatch(start, end, budget, log.delay_levels_ms):
        if isinstance(item, int):
            return rows, item
        assert isinstance(item, DispatchRequest)
        rows.append(
            DispatchRow(
                item.topic,
                item.queue_id,
                item.queue_offset,
                item.phys_offset,
                item.size,
                item.tags_code,
                item.store_timestamp,
                item.keys,
                item.uniq_key,
                item.sys_flag,
            )  # fmt: skip
        )
    raise AssertionError("iter_dispatch ends with an int")


def test_rows_walk_the_log_as_iter_dispatch_does(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        store.add_listener(lambda r: None)  # keep reput off the rows path while filling
        fill(store, 400)
        log = store.commit_log
        # A record whose fields do not add up (PROPERTIESLENGTH off by one): skipped by size.
        victim = store.put_message(Message("orders", b"victim", keys="v"))
        store.put_message(Message("orders", b"after", keys="a"))
        segment = log.segments.find(victim.phys_offset)
        assert segment is not None
        raw = log.read(victim.phys_offset, victim.wrote_bytes)
        assert raw is not None
        props = encode_properties(decode_record(raw, 0).properties)  # decoding keeps the order
        props_length_at = (
            victim.phys_offset - segment.base_offset + victim.wrote_bytes - len(props) - 2
        )
        buf = segment.buffer
        buf[props_length_at + 1] ^= 1
        end = log.max_offset
        rng = random.Random(3)
        budgets = [1 << 30, 5000, 70_000] + [rng.randrange(1, 200_000) for _ in range(20)]
        for budget in budgets:
            start = rng.choice([0, victim.phys_offset])
            stop = rng.choice([end, end - 1, rng.randrange(start, end)])
            columns, reached = dispatch_columns(log, start, stop, budget, log.delay_levels_ms)
            rows = columns.rows()
            assert (rows, reached) == walk_requests(log, start, stop, budget)
        columns, reached = dispatch_columns(log, 0, end, 1 << 30, log.delay_levels_ms)
        rows = [DispatchRow(*row) for row in columns.rows()]
        assert reached == end
        assert len(rows) == 401  # every record but the victim
        assert {r.topic for r in rows} == set(TOPICS)
        schedule = [r for r in rows if r.topic == "SCHEDULE_TOPIC_XXXX"]
        assert any(r.tags_code > T0 for r in schedule)  # deliver times, not tag hashes
