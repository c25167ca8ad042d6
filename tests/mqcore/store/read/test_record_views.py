"""``MessageStore.get_records``: the same statuses and offsets as ``get_messages`` without a
filter, each record as raw bytes whose decoding is the message ``get_messages`` returns."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import CorruptRecordError
from mqcore.format.msgid import HostAddress
from mqcore.message import Message
from mqcore.store import GetStatus, MessageStore
from mqcore.store.read.record_reader import RecordReader
from tests.mqcore.store.test_store_fast_paths import SMALL, T0


@pytest.fixture
def store(tmp_path: Path) -> MessageStore:
    store = MessageStore(tmp_path, SMALL, clock=FakeClock(T0)).open()
    rng = random.Random(3)
    for i in range(300):
        host = HostAddress("::1" if i % 7 == 0 else "10.0.0.1", 5000 + i % 3)
        msg = Message(
            "T" * 127 if i % 11 == 0 else "orders",
            rng.randbytes(rng.choice([5, 700, 2500])),
            tags="A",
            keys=[f"k{i}"],
            properties={"p": str(i)} if i % 2 else None,
            born_host=host,
        )
        store.put_messages([msg], i % 2)
    store.dispatch_until_caught_up()
    return store


def test_records_decode_to_the_pulled_messages(store: MessageStore) -> None:
    try:
        assert len(store.commit_log.segments.files) > 4
        for topic in ("orders", "T" * 127):
            for queue_id in (0, 1):
                offset = store.min_offset(topic, queue_id)
                seen = 0
                while True:
                    count, max_bytes = random.Random(offset).choice([(1, 1 << 20), (9, 3000)])
                    got = store.get_records(topic, queue_id, offset, count, max_bytes)
                    pulled = store.get_messages(
                        "g", topic, queue_id, offset, count, max_bytes=max_bytes
                    )
                    assert (got.status, got.next_offset, got.min_offset, got.max_offset) == (
                        pulled.status, pulled.next_offset, pulled.min_offset, pulled.max_offset,
                    )  # fmt: skip
                    if got.status is not GetStatus.FOUND:
                        assert got.status is GetStatus.OFFSET_OVERFLOW_ONE
                        break
                    for view, message in zip(got.records, pulled.messages, strict=True):
                        assert view.message() == message
                        assert view.raw == store.commit_log.read(
                            message.phys_offset, view.store_size
                        )
                        assert (view.phys_offset, view.queue_offset) == (
                            message.phys_offset, message.queue_offset,
                        )  # fmt: skip
                        assert view.store_timestamp == message.store_timestamp
                        assert view.sys_flag == message.sys_flag
                        assert view.keys == message.keys and view.body == message.body
                        assert view.properties == message.properties
                    seen += len(got.records)
                    offset = got.next_offset
                assert seen == store.max_offset(topic, queue_id) > 0
        below = store.get_records("orders", 0, -1, 5)
        assert below.status is GetStatus.OFFSET_TOO_SMALL and below.records == []
        assert store.get_records("nope", 0, 0, 5).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    finally:
        store.close()


def test_a_unit_that_disagrees_with_the_log_is_an_error(store: MessageStore) -> None:
    try:
        unit = store.queues.get("orders", 0).unit_at(3)  # type: ignore[union-attr]
        assert unit is not None
        with RecordReader(store.commit_log) as reader:
            assert reader.raw(unit.phys_offset, unit.size) is not None
            with pytest.raises(CorruptRecordError):
                reader.raw(unit.phys_offset, unit.size - 1)
            with pytest.raises(CorruptRecordError):
                reader.raw(unit.phys_offset + 4, unit.size)
            assert reader.raw(store.commit_log.max_offset + 10, 100) is None
    finally:
        store.close()
