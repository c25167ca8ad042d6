"""Fixtures of the pipeline tests: stores written by mqcore and by the foreign writer. The one
local SparkSession of the test run (``spark``) is in ``tests/conftest.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mqcore.clock import FakeClock
from mqcore.format.msgid import HostAddress
from mqcore.format.record import DispatchRequest, decode_dispatch, decode_record
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from pipeline.columnar import message_row
from tests.support.foreign_store import ForeignMessage, Written, write_commitlog

START_MS = 1_700_000_000_000
# Small geometry: 64 KiB segments roll every ~300 messages; 200-entry index files roll too.
SMALL = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=64,
    index_max_entries=200,
)
LONG_TOPIC = "%RETRY%" + "g" * 150  # over 127 bytes: written with the V2 magic
TX_PREPARED, TX_ROLLBACK = 0x4, 0xC


def message(i: int) -> Message:
    """The i-th test message: three topics, two queues, assorted tags, keys and properties."""
    topic = f"Topic{i % 3}"
    born = (
        HostAddress("::1", 4000 + i % 3) if i % 97 == 0 else HostAddress("10.0.0.9", 5000 + i % 2)
    )
    sys_flag = TX_PREPARED if i % 151 == 7 else TX_ROLLBACK if i % 151 == 8 else 0
    return Message(
        topic if i % 211 != 5 else LONG_TOPIC,
        f"body-{i}-".encode() * (i % 7) + bytes([i % 256]),
        tags=f"tag{i % 4}" if i % 5 else None,
        keys=[f"order-{i}", f"customer-{i % 10}"] if i % 3 else (),
        properties={"user": str(i), "écho": "✓"} if i % 2 else None,
        born_host=born,
        sys_flag=sys_flag,
        reconsume_times=i % 4,
        flag=i,
    )


def write_store(
    root: Path, count: int, *, first: int = 0, clock: FakeClock | None = None
) -> FakeClock:
    """Put messages ``first..first+count-1`` into a MessageStore at ``root`` (1 s apart)."""
    clock = clock or FakeClock(START_MS)
    with MessageStore(root, SMALL, clock=clock) as store:
        for i in range(first, first + count):
            store.put_message(message(i), queue_id=i % 2)
            clock.advance(1000)
    return clock


def mqcore_rows(root: Path) -> list[dict[str, Any]]:
    """Every record of the store as mqcore reads it (decode_dispatch walk + decode_record)."""
    rows: list[dict[str, Any]] = []
    for path in sorted((root / "commitlog").iterdir()):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            head = decode_dispatch(data, pos, len(data))
            if not isinstance(head, DispatchRequest):
                break
            rows.append(message_row(decode_record(data, pos)))
            pos += head.size
    return rows


@dataclass
class ForeignStore:
    root: Path
    written: list[Written]


@pytest.fixture(scope="session")
def mq_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 messages over several rolled 64 KiB segments, written by MessageStore."""
    root = tmp_path_factory.mktemp("mqstore")
    write_store(root, 1500)
    return root


@pytest.fixture(scope="session")
def foreign_store(tmp_path_factory: pytest.TempPathFactory) -> ForeignStore:
    """A RocketMQ-format CommitLog from tests/support/foreign_store.py (no mqcore code)."""
    root = tmp_path_factory.mktemp("foreign")
    messages = [
        ForeignMessage(
            topic=f"Orders{i % 2}",
            queue_id=i % 4,
            body=bytes(range(i % 200)) * 2,
            properties={"KEYS": f"k{i} shared", "TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"}
            if i % 4
            else {},
            born_timestamp=START_MS + i,
            store_timestamp=START_MS + 10 * i,
            flag=i,
        )
        for i in range(700)
    ]
    return ForeignStore(root, write_commitlog(root, messages, file_size=32 * 1024))
