"""The producer state's files on disk: generations, interrupted compactions, the writer;
and settling the journal against a real CommitLog (``producer_recovery.settle``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_listener.producer_files import (
    JOURNAL_SUFFIX,
    SNAPSHOT_SUFFIX,
    JournalWriter,
    file_name,
    load_files,
    remove_older,
    write_snapshot,
)
from kafka_listener.producer_journal import (
    Abandoned,
    Batch,
    IdsIssued,
    Intent,
    encode_entry,
)
from kafka_listener.producer_recovery import settle
from mqcore.broker.broker import Broker
from mqcore.format.body_crc import body_crc
from mqcore.format.msgid import HostAddress, encode_host
from mqcore.message import Message

from .harness import TEST_STORE_CONFIG


def batch(seq: int, base: int = 0, first_phys: int = 0, log_end: int = 0) -> Batch:
    return Batch(0, 5, 0, 0, seq, 1, base, first_phys, log_end, "t")


def test_a_fresh_directory_loads_empty(tmp_path: Path) -> None:
    loaded = load_files(tmp_path / "p")
    assert (loaded.generation, loaded.entries, loaded.problems) == (-1, [], [])


def test_snapshot_then_its_journal_and_later_ones(tmp_path: Path) -> None:
    """The states an interrupted compaction leaves all load to the same entries."""
    write_snapshot(tmp_path, 3, [IdsIssued(9), batch(0)])
    writer = JournalWriter(tmp_path, 3, 0)
    writer.append(encode_entry(batch(1)))
    writer.switch(4)  # compaction began: the new journal exists, its snapshot not yet
    writer.append(encode_entry(batch(2)))
    tmp = tmp_path / (file_name(4, SNAPSHOT_SUFFIX) + ".tmp")
    tmp.write_bytes(b"half a snapshot")
    expected = [IdsIssued(9), batch(0), batch(1), batch(2)]
    loaded = load_files(tmp_path)
    assert loaded.entries == expected and loaded.generation == 4 and not loaded.problems
    assert not tmp.exists()  # leftover temporary files are removed

    write_snapshot(tmp_path, 4, [IdsIssued(9), batch(0), batch(1)])  # ... its snapshot written
    assert load_files(tmp_path).entries == expected  # journal 3 is now ignored
    remove_older(tmp_path, 4)  # ... and the old generation deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        file_name(4, JOURNAL_SUFFIX),
        file_name(4, SNAPSHOT_SUFFIX),
    ]
    assert load_files(tmp_path).entries == expected
    writer.close()


def test_a_damaged_newest_snapshot_falls_back_and_is_reported(tmp_path: Path) -> None:
    write_snapshot(tmp_path, 1, [batch(0)])
    JournalWriter(tmp_path, 1, 0).close()
    write_snapshot(tmp_path, 2, [batch(0), batch(1)])
    path = tmp_path / file_name(2, SNAPSHOT_SUFFIX)
    data = bytearray(path.read_bytes())
    data[30] ^= 0xFF
    path.write_bytes(bytes(data))
    loaded = load_files(tmp_path)
    assert loaded.entries == [batch(0)]
    assert loaded.problems == [f"{path.name}: entry at byte 14: CRC mismatch"]


def test_writer_appends_syncs_and_cuts_a_torn_tail_on_load(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, 0, 0)
    first = writer.append(encode_entry(batch(0)))
    writer.sync_until(first)
    writer.append(encode_entry(Abandoned(3)))
    writer.close()
    path = tmp_path / file_name(0, JOURNAL_SUFFIX)
    with open(path, "ab") as f:
        f.write(encode_entry(batch(1))[:-4])  # a crash in the middle of an append
    loaded = load_files(tmp_path)
    assert loaded.entries == [batch(0), Abandoned(3)]
    assert loaded.torn_bytes == len(encode_entry(batch(1))) - 4 and not loaded.problems
    with pytest.raises(FileExistsError):
        JournalWriter(tmp_path, 0, 0)  # a generation is never reused


def test_the_timer_syncs_without_a_waiter(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, 0, 0.01)
    _generation, end = writer.append(encode_entry(batch(0)))
    assert writer.synced < end
    deadline = time.monotonic() + 10
    while writer.synced < end and time.monotonic() < deadline:
        time.sleep(0.01)
    assert writer.synced == end
    writer.close()


# -- settle, against a real CommitLog -----------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path, TEST_STORE_CONFIG)
    b.admin.create_topic("t", read_queue_nums=2, write_queue_nums=2)
    yield b
    b.close()


HOST = HostAddress("10.1.2.3", 4567)


def put(broker: Broker, queue_id: int, bodies: list[bytes], host: HostAddress = HOST) -> Batch:
    """Store a batch; the BATCH entry describing it (producer 5, sequence = base)."""
    log = broker.store.commit_log
    messages = [Message("t", body, born_host=host) for body in bodies]
    results = broker.store.put_messages(messages, queue_id)
    base, first = results[0].queue_offset, results[0].phys_offset
    return Batch(0, 5, 0, queue_id, base, len(bodies), base, first, log.max_offset, "t")


def intent_of(b: Batch, bodies: list[bytes], log_start: int, host: HostAddress = HOST) -> Intent:
    return Intent(
        11, b.producer_id, b.epoch, b.partition, b.first_sequence, b.record_count,
        log_start, body_crc(bodies[0]), body_crc(bodies[-1]), b.topic, encode_host(host),
    )  # fmt: skip


def test_settle_keeps_what_survived_and_drops_what_did_not(broker: Broker) -> None:
    log = broker.store.commit_log
    kept = put(broker, 0, [b"a", b"b"])
    tail = put(broker, 0, [b"c", b"d", b"e"])
    lost = tail._replace(first_sequence=9, log_end=log.max_offset + 500)  # its end was cut
    gone = batch(12, base=10, first_phys=log.max_offset, log_end=log.max_offset + 50)
    settled = settle([IdsIssued(3), kept, tail, lost, gone], log, log.max_offset)
    assert settled.entries == [IdsIssued(3), kept, tail, lost]  # lost is read: all there
    assert (settled.kept, settled.lost) == (3, 1)
    # the recovered end inside the last batch: it is not all there
    cut = tail.first_phys + 10
    settled = settle([kept, tail, lost], log, cut)
    assert settled.entries == [kept] and (settled.kept, settled.lost) == (1, 2)


def test_settle_finds_an_open_intent_in_the_commitlog(broker: Broker) -> None:
    log = broker.store.commit_log
    put(broker, 0, [b"before"])
    start = log.max_offset
    put(broker, 1, [b"other queue"])
    bodies = [b"x1", b"x2", b"x3"]
    stored = put(broker, 0, bodies)
    put(broker, 0, [b"after"])
    intent = intent_of(stored, bodies, start)
    settled = settle([intent], log, log.max_offset)
    assert (settled.found, settled.not_found, settled.last_intent_id) == (1, 0, 11)
    assert settled.entries == [stored]  # log_end: exactly where its last record ends


def test_settle_does_not_mistake_other_data_for_an_open_intent(broker: Broker) -> None:
    log = broker.store.commit_log
    start = log.max_offset
    bodies = [b"x1", b"x2"]
    stored = put(broker, 0, bodies, host=HostAddress("10.9.9.9", 1))  # another connection
    same_host = put(broker, 0, [b"x1", b"y", b"x2"])  # other count
    cases = [
        intent_of(stored, bodies, start),  # born host differs
        intent_of(same_host, [b"x1", b"zz"], start),  # last body differs
        intent_of(stored, bodies, log.max_offset),  # starts after it
    ]
    for intent in cases:
        settled = settle([intent], log, log.max_offset)
        assert (settled.found, settled.not_found, settled.entries) == (0, 1, [])
    # an intent that was completed or abandoned is not looked for
    done = intent_of(stored, bodies, start)
    settled = settle([done, Abandoned(done.intent_id)], log, log.max_offset)
    assert (settled.found, settled.not_found) == (0, 0)
    # a run a kept batch claims is not claimed again by an intent of the same bodies
    mine = put(broker, 1, bodies)
    claimed = settle([mine, intent_of(mine, bodies, start)], log, log.max_offset)
    assert claimed.entries == [mine] and claimed.not_found == 1
