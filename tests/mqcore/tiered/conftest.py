"""Fixtures for tiered storage tests: both backends, and real records from a MessageStore."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.format import Valid, check_record
from mqcore.tiered import MemoryBackend, PosixBackend, SegmentBackend

T0 = 1_700_000_000_000
TOPIC = "orders"


@pytest.fixture(params=["memory", "posix"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> SegmentBackend:
    """The contract suite runs against every backend."""
    if request.param == "memory":
        return MemoryBackend()
    return PosixBackend(tmp_path / "tier", "DefaultCluster", "broker-a")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@dataclass(frozen=True)
class LocalRecord:
    """One message as the local store holds it: what the dispatcher would hand the tier."""

    queue_offset: int
    phys_offset: int
    record: bytes
    tags_code: int
    store_timestamp: int


@pytest.fixture
def local_records(tmp_path: Path, clock: FakeClock) -> Iterator[list[LocalRecord]]:
    """60 real records of queue ``orders``/1 (bodies of 1..3000 bytes, mixed tags), read
    back from a MessageStore's CommitLog and ConsumeQueue."""
    rng = random.Random(11)
    config = StoreConfig(commitlog_file_size=64 * 1024, consume_queue_file_entries=100)
    with MessageStore(tmp_path / "store", config, clock=clock).open() as store:
        for i in range(60):
            store.put_message(
                Message(
                    TOPIC,
                    rng.randbytes(rng.choice((1, 40, 200, 900, 3000))),
                    tags=rng.choice(("TagA", "TagB", None)),
                    keys=[f"id-{i}"],
                ),
                queue_id=1 if i % 4 else 2,  # queue 2 interleaves, so phys offsets have gaps
            )
            clock.advance(5)
        store.dispatch_until_caught_up()
        queue = store.queues.get(TOPIC, 1)
        assert queue is not None
        records = []
        for unit in queue.units(0, 1000):
            raw = store.commit_log.read(unit.phys_offset, unit.size)
            assert raw is not None
            checked = check_record(raw, 0, len(raw))
            assert isinstance(checked, Valid)
            records.append(
                LocalRecord(
                    unit.queue_offset,
                    unit.phys_offset,
                    raw,
                    unit.tags_code,
                    checked.store_timestamp,
                )
            )
        assert len(records) == 45
        yield records
