"""A broker-role and a services-role store on one directory, as two processes would be."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig

#: Small files: a few hundred messages cross CommitLog, ConsumeQueue and index boundaries.
SMALL = StoreConfig(
    commitlog_file_size=16 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=11,
    index_max_entries=400,
)


def put_orders(store: MessageStore, n: int, *, start: int = 0) -> None:
    for i in range(start, start + n):
        result = store.put_message(Message("Orders", f"order {i}".encode(), keys=[f"K{i}"]), i % 2)
        assert result.ok, result


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MessageStore]:
    store = MessageStore(tmp_path, SMALL, role="broker").open()
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def worker(tmp_path: Path, broker: MessageStore) -> Iterator[MessageStore]:
    store = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        yield store
    finally:
        store.close()
