"""Appender: the put path after the facade's checks, by the plain or the general encoder."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import ValidationError
from mqcore.format.msgid import UniqKeyGenerator
from mqcore.format.record import decode_record
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.put.appender import Appender
from mqcore.store.results import BatchPutResults
from mqcore.store.sharing.progress import Slot

T0 = 1_700_000_000_000
SMALL = StoreConfig(commitlog_file_size=64 * 1024, consume_queue_file_entries=50)


def appender_of(store: MessageStore, uniq: UniqKeyGenerator | None = None) -> Appender:
    """A second appender over ``store``'s open CommitLog and publisher."""
    return Appender(
        store.commit_log,
        store.config,
        store.clock,
        uniq or UniqKeyGenerator(ip="10.0.0.1", pid=1, clock=FakeClock(T0)),
        store.publisher,
    )


def test_a_plain_batch_goes_by_columns_and_others_by_the_general_path(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        appender = appender_of(store)
        plain = appender.put([Message("T", b"a", tags="x", keys="k1")] * 3, 0)
        assert isinstance(plain, BatchPutResults)
        general = appender.put([Message("T", b"b", properties={"user": "v"})], 1)
        assert isinstance(general, list)
        [result] = general
        raw = store.commit_log.read(result.phys_offset, result.wrote_bytes)
        assert raw is not None
        record = decode_record(raw, 0)
        assert record.properties["user"] == "v"
        assert record.properties["UNIQ_KEY"] == result.msg_id
        assert [r.queue_offset for r in plain.to_list()] == [0, 1, 2]


def test_every_append_is_published_and_wakes_reput(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        appender = appender_of(store)
        assert not appender.appended.is_set()
        appender.put([Message("T", b"a")], 0)
        assert appender.appended.is_set()
        progress = store.progress
        assert progress is not None
        assert progress.get(Slot.MAX_OFFSET) == store.commit_log.max_offset > 0


def test_a_bad_topic_is_refused_by_the_general_path_in_its_order(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        appender = appender_of(store)
        assert appender.put_plain([Message("bad topic!", b"a")], 0) is None
        with pytest.raises(ValidationError):
            appender.put([Message("bad topic!", b"a")], 0)
        assert store.commit_log.max_offset == 0


def test_under_sync_flush_a_put_returns_on_disk(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, flush="sync")
    with MessageStore(tmp_path, config, clock=FakeClock(T0)) as store:
        appender = appender_of(store)
        for batch in (
            [Message("T", b"a", keys="k")] * 4,
            [Message("T", b"b", properties={"p": "v"})],
        ):
            results = appender.put(batch, 0)
            last = results[-1]
            assert store.commit_log.flushed_offset >= last.phys_offset + last.wrote_bytes


def test_the_given_generator_names_the_messages(tmp_path: Path) -> None:
    twin = UniqKeyGenerator(ip="10.0.0.1", pid=1, clock=FakeClock(T0), counter_start=7)
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        appender = appender_of(
            store, UniqKeyGenerator(ip="10.0.0.1", pid=1, clock=FakeClock(T0), counter_start=7)
        )
        results = appender.put([Message("T", b"a")] * 2 + [Message("T", b"b")], 0)
        assert isinstance(results, BatchPutResults)
        assert [r.msg_id for r in results.to_list()] == [twin.next_id() for _ in range(3)]
