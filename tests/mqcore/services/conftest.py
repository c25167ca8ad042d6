"""Helpers for the service tests: small segments, a broker and a worker on one directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.message import Message
from mqcore.services import reput
from mqcore.store import GetStatus, MessageStore, StoreConfig

#: 16 KiB CommitLog segments, 50-unit ConsumeQueue files, tiny index files: a few hundred
#: messages cross every kind of file boundary.
SMALL = StoreConfig(
    commitlog_file_size=16 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=11,
    index_max_entries=400,
)


def put_many(store: MessageStore, n: int, *, start: int = 0, queues: int = 2) -> None:
    for i in range(start, start + n):
        result = store.put_message(
            Message("Orders", f"order {i}".encode(), keys=[f"K{i}"]), queue_id=i % queues
        )
        assert result.ok, result


def drain(store: MessageStore, topic: str, queue_id: int, offset: int = 0) -> list[bytes]:
    """Every body of a queue from ``offset``, in order."""
    bodies: list[bytes] = []
    while True:
        got = store.get_messages("g", topic, queue_id, offset, 32)
        if got.status is not GetStatus.FOUND:
            return bodies
        bodies += [m.body for m in got.messages]
        offset = got.next_offset


def reput_all(store: MessageStore) -> int:
    total = 0
    while (result := reput.step(store)).progressed:
        total += result.detail["dispatched"]
    assert result.status == "ok", result
    return total


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    """A broker-role store and a services-role store (a worker) on one directory."""
    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    worker = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        yield broker, worker
    finally:
        reput.release(worker)
        worker.close()
        broker.close()
