"""An in-memory model of what was put into a MessageStore, and the checks that compare them.

Tests record every acknowledged put in an :class:`Oracle`, then :func:`assert_all_found`
reads every message back through each read path (queue offset, key, both ids) and compares
fields. The oracle knows nothing of the store's files, so it cannot share a bug with them.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from mqcore.format.msgid import HostAddress
from mqcore.message import Message, MessageExt
from mqcore.store import GetStatus, MessageStore, PutResult

REPO = Path(__file__).resolve().parents[2]
ALL_TIME = (0, 2**62)


@dataclass(frozen=True)
class Expected:
    """One acknowledged message: what every read path must return."""

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    msg_id: str
    offset_msg_id: str
    store_timestamp: int
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    born_timestamp: int | None = None
    born_host: HostAddress | None = None
    properties: dict[str, str] = field(default_factory=dict)


class Oracle:
    """Everything put so far, in put order."""

    def __init__(self) -> None:
        self.messages: list[Expected] = []

    def add(self, msg: Message, result: PutResult) -> Expected:
        assert result.ok, result
        keys = (msg.keys,) if isinstance(msg.keys, str) else tuple(msg.keys)
        expected = Expected(
            topic=msg.topic,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
            phys_offset=result.phys_offset,
            size=result.wrote_bytes,
            msg_id=result.msg_id,
            offset_msg_id=result.offset_msg_id,
            store_timestamp=result.store_timestamp,
            body=msg.body,
            tags=msg.tags,
            keys=tuple(k for key in keys for k in key.split(" ") if k),
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            properties=dict(msg.properties or {}),
        )
        self.messages.append(expected)
        return expected

    def put(self, store: MessageStore, msg: Message, queue_id: int = 0) -> Expected:
        return self.add(msg, store.put_message(msg, queue_id))

    def put_batch(self, store: MessageStore, msgs: list[Message], queue_id: int = 0) -> None:
        for msg, result in zip(msgs, store.put_messages(msgs, queue_id), strict=True):
            self.add(msg, result)

    def by_queue(self) -> dict[tuple[str, int], list[Expected]]:
        queues: dict[tuple[str, int], list[Expected]] = defaultdict(list)
        for e in self.messages:
            queues[(e.topic, e.queue_id)].append(e)
        return {k: sorted(v, key=lambda e: e.queue_offset) for k, v in queues.items()}

    def by_key(self) -> dict[tuple[str, str], list[Expected]]:
        keys: dict[tuple[str, str], list[Expected]] = defaultdict(list)
        for e in self.messages:
            for key in e.keys:
                keys[(e.topic, key)].append(e)
        return keys


def read_queue(store: MessageStore, topic: str, queue_id: int, tags=None) -> list[MessageExt]:
    """Every message of a queue from its min offset, paging with get_messages."""
    offset = store.min_offset(topic, queue_id)
    end = store.max_offset(topic, queue_id)
    found: list[MessageExt] = []
    while offset < end:
        got = store.get_messages("g", topic, queue_id, offset, 32, tags)
        assert got.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE), got.status
        assert got.next_offset > offset
        found.extend(got.messages)
        offset = got.next_offset
    return found


def assert_same(found: MessageExt, e: Expected) -> None:
    """The decoded record carries what the producer sent and what the put returned."""
    assert (found.topic, found.queue_id, found.queue_offset) == (
        e.topic,
        e.queue_id,
        e.queue_offset,
    )
    assert (found.phys_offset, found.store_size) == (e.phys_offset, e.size)
    assert found.body == e.body
    assert found.msg_id == e.msg_id
    assert found.offset_msg_id == e.offset_msg_id
    assert found.store_timestamp == e.store_timestamp
    assert found.tags == (e.tags or None)
    assert found.keys == e.keys
    if e.born_timestamp is not None:
        assert found.born_timestamp == e.born_timestamp
    if e.born_host is not None:
        assert found.born_host == e.born_host
    for name, value in e.properties.items():
        assert found.properties.get(name) == value


def assert_all_found(store: MessageStore, oracle: Oracle, *, ids_every: int = 1) -> None:
    """Every message of the oracle by queue offset and by key; every ``ids_every``-th one
    also by both ids (an id lookup walks the index of every topic: the slow part)."""
    for (topic, queue_id), expected in oracle.by_queue().items():
        got = read_queue(store, topic, queue_id)
        assert [m.queue_offset for m in got] == [e.queue_offset for e in expected], (
            topic,
            queue_id,
        )
        for found, e in zip(got, expected, strict=True):
            assert_same(found, e)
    for (topic, key), expected in oracle.by_key().items():
        got = store.query_by_key(topic, key, *ALL_TIME, max_count=64)
        assert [m.phys_offset for m in got] == sorted(e.phys_offset for e in expected), (topic, key)
    if ids_every:
        for e in oracle.messages[::ids_every]:
            by_offset_id = store.view_by_id(e.offset_msg_id)
            assert by_offset_id is not None, e
            assert_same(by_offset_id, e)
            by_uniq = store.view_by_id(e.msg_id)
            assert by_uniq is not None, e
            assert by_uniq.phys_offset == e.phys_offset


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``python -m mqcore ARGS`` in a subprocess, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "mqcore", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
