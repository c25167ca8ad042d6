"""Idempotent producers' state across restarts, over real stores on tmp_path.

A *crash image* is a copy of a store directory taken while the broker has it open: what
the disk holds after a kill -9 at that moment (the CommitLog's mapped pages and the
journal's writes are in the page cache, which the copy reads). Opening the copy runs
crash recovery. Crash points are taken at the real steps of the produce path (the store's
``ProducerStates.begin`` / ``record`` run, and the copy is taken right before or after).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import (
    Call,
    KafkaContext,
    Later,
    ListenerConfig,
    dispatch,
    supported_versions,
)
from kafka_listener.idempotence import ProducerStates
from kafka_listener.producer_files import JOURNAL_SUFFIX, SNAPSHOT_SUFFIX
from kafka_listener.records import encode_batch
from kafka_listener.schemas import ApiKey
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.clock import FakeClock, SystemClock
from mqcore.store import StoreConfig

from .harness import TEST_STORE_CONFIG

TOPIC = "orders"
PID = 77


class Running:
    """A broker and a Kafka context over ``root`` (dispatch on send: no reput thread)."""

    def __init__(self, root: Path, store_config: StoreConfig = TEST_STORE_CONFIG, clock=None):
        self.root = root
        self.clock = clock or SystemClock()
        self.broker = Broker.open(
            root, store_config, config=BrokerConfig(dispatch_on_send=True), clock=self.clock
        )
        self.ctx = KafkaContext(
            self.broker, ListenerConfig(port=0), self.clock, versions=supported_versions()
        )

    def call(self, key: int, request: dict[str, Any]) -> Any:
        async def run() -> Any:
            call = Call(key, supported_versions()[key][1], 1, "test", request)
            response = await dispatch(self.ctx, call)
            return await response.response if isinstance(response, Later) else response

        return asyncio.run(run())

    def produce(self, records: bytes, partition: int = 0) -> dict[str, Any]:
        request = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": partition, "records": records}]}
            ],
        }
        reply = self.call(ApiKey.PRODUCE, request)
        return dict(reply["responses"][0]["partition_responses"][0])

    def stored(self, partition: int = 0) -> list[bytes]:
        self.broker.store.dispatch_until_caught_up()
        result = self.broker.store.get_messages("-", TOPIC, partition, 0, 10_000)
        return [m.body for m in result.messages]

    def close(self) -> None:
        self.ctx.close()
        self.broker.close()


def batch(seq: int, values: list[bytes], pid: int = PID, epoch: int = 0) -> bytes:
    records = [(i, 1_000 + i, None, value, ()) for i, value in enumerate(values)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def values(tag: str, count: int = 3) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(count)]


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    r = Running(tmp_path / "store")
    r.broker.admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    yield r
    r.close()


def crash_image(root: Path, dest: Path) -> Path:
    """The store as a kill -9 now would leave it (see the module docstring)."""
    shutil.copytree(root, dest)
    return dest


def test_a_retry_after_a_clean_restart_is_answered_with_its_offset(tmp_path: Path) -> None:
    first = Running(tmp_path / "s")
    first.broker.admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    assert first.produce(batch(0, values("a")))["base_offset"] == 0
    assert first.produce(batch(3, values("b")))["base_offset"] == 3
    first.close()

    second = Running(tmp_path / "s")
    try:
        for seq, base in ((0, 0), (3, 3)):  # both retries: the original offsets
            reply = second.produce(batch(seq, values("a" if seq == 0 else "b")))
            assert (reply["error_code"], reply["base_offset"]) == (0, base)
        assert second.produce(batch(9, values("c")))["error_code"] == (
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        assert second.produce(batch(6, values("c")))["base_offset"] == 6
        assert second.stored() == values("a") + values("b") + values("c")
    finally:
        second.close()


def _wrap(
    running: Running, name: str, before: Callable[[], None] | None, after: Callable[[], None] | None
) -> None:
    """Run ``before`` / ``after`` around the store's ``ProducerStates.<name>`` calls."""
    states = running.ctx.producers
    original = getattr(states, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before()
        result = original(*args, **kwargs)
        if after is not None:
            after()
        return result

    setattr(states, name, wrapped)


@pytest.mark.parametrize(
    ("point", "stored_before_crash"),
    [
        ("after the intent, before the append", False),
        ("after the append, before the BATCH entry", True),
        ("after the BATCH entry, before the ack", True),
    ],
)
def test_kill_at_each_step_never_duplicates_nor_loses(
    running: Running, tmp_path: Path, point: str, stored_before_crash: bool
) -> None:
    running.produce(batch(0, values("a")))
    image = tmp_path / "image"
    take = lambda: crash_image(running.root, image)  # noqa: E731
    if point.startswith("after the intent"):
        _wrap(running, "begin", None, take)
    elif point.startswith("after the append"):
        _wrap(running, "record", take, None)
    else:
        _wrap(running, "record", None, take)
    assert running.produce(batch(3, values("b")))["base_offset"] == 3  # the ack never arrived

    restarted = Running(image)
    try:
        assert restarted.stored() == values("a") + (values("b") if stored_before_crash else [])
        reply = restarted.produce(batch(3, values("b")))  # the client's retry
        assert (reply["error_code"], reply["base_offset"]) == (0, 3)
        assert restarted.produce(batch(0, values("a")))["base_offset"] == 0
        assert restarted.stored() == values("a") + values("b")  # once, at its offset
    finally:
        restarted.close()


def test_a_batch_lost_in_the_crash_is_stored_again(running: Running, tmp_path: Path) -> None:
    """The journal says stored, the CommitLog lost it (its pages never reached the disk,
    the journal's did): the retry is stored again, not answered as a duplicate."""
    running.produce(batch(0, values("a")))
    end_before = running.broker.store.commit_log.max_offset
    running.produce(batch(3, values("b")))
    end_after = running.broker.store.commit_log.max_offset
    image = crash_image(running.root, tmp_path / "image")
    segment = image / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:  # the last batch's bytes, as never written
        f.seek(end_before)
        f.write(bytes(end_after - end_before))

    restarted = Running(image)
    try:
        assert restarted.stored() == values("a")
        reply = restarted.produce(batch(3, values("b")))
        assert (reply["error_code"], reply["base_offset"]) == (0, 3)
        assert restarted.stored() == values("a") + values("b")
        assert restarted.produce(batch(3, values("b")))["base_offset"] == 3  # now a duplicate
        assert restarted.stored() == values("a") + values("b")
    finally:
        restarted.close()


def test_partial_batch_at_the_recovered_end_is_stored_again(
    running: Running, tmp_path: Path
) -> None:
    """Only the first records of a batch survived: the batch counts as lost (storing the
    retry again duplicates those records; answering it as a duplicate would lose the
    others, which were never acknowledged)."""
    running.produce(batch(0, values("a", 4)))
    store = running.broker.store
    first_phys = store.commit_log.min_offset
    image = crash_image(running.root, tmp_path / "image")
    sizes = [m.store_size for m in store.get_messages("-", TOPIC, 0, 0, 10).messages]
    segment = image / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:  # the last two records never reached the disk
        f.seek(first_phys + sum(sizes[:2]))
        f.write(bytes(sum(sizes[2:])))

    restarted = Running(image)
    try:
        assert restarted.stored() == values("a", 4)[:2]
        assert restarted.produce(batch(0, values("a", 4)))["base_offset"] == 2
        assert restarted.stored() == values("a", 4)[:2] + values("a", 4)
    finally:
        restarted.close()


def test_producer_ids_are_never_reused_even_when_the_clock_goes_back(tmp_path: Path) -> None:
    clock = FakeClock(now_ms=1_800_000_000_000)
    request = {"transactional_id": None, "transaction_timeout_ms": 1}
    first = Running(tmp_path / "s", clock=clock)
    issued = [first.call(ApiKey.INIT_PRODUCER_ID, request)["producer_id"] for _ in range(3)]
    first.close()
    clock.set(1_700_000_000_000)  # an hour ... and more, back
    second = Running(tmp_path / "s", clock=clock)
    try:
        again = second.call(ApiKey.INIT_PRODUCER_ID, request)["producer_id"]
        assert again > max(issued)
    finally:
        second.close()


def test_the_journal_is_compacted_and_stays_small(tmp_path: Path) -> None:
    from kafka_listener.handlers.produce import _store_partition

    r = Running(tmp_path / "s")
    r.broker.admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    r.ctx.close()  # its producer state is this test's, with a small journal
    store = r.broker.store
    states = ProducerStates.open(store, r.clock, compact_bytes=4096)
    call = Call(ApiKey.PRODUCE, 9, 1, None, {})
    sequences: dict[tuple[int, int], int] = {}
    for i in range(400):  # 2 producers x 2 partitions each, 400 batches
        partition, pid = i % 4, 100 + i % 2
        seq = sequences.get((pid, partition), 0)
        records = batch(seq, [b"x%d" % i], pid=pid)
        reply = _store_partition(
            r.broker, states, r.ctx.batch_cache, TOPIC, partition, records, call
        )
        assert reply["error_code"] == 0
        sequences[(pid, partition)] = seq + 1
        if states.compactor is not None:  # a slow fsync must not let the journal run ahead
            states.compactor.join()
    states.close()
    directory = store.root / "kafka" / "producers"
    files = sorted((p.name, p.stat().st_size) for p in directory.iterdir())
    assert sum(size for _, size in files) < 4096 + 1024 + 2 * 1468, files  # journal + snapshot
    assert len([f for f, _ in files if f.endswith(SNAPSHOT_SUFFIX)]) == 1, files
    assert len([f for f, _ in files if f.endswith(JOURNAL_SUFFIX)]) == 1, files
    reopened = ProducerStates.open(store, r.clock)
    code, at = reopened.check((101, TOPIC, 3), 0, sequences[(101, 3)] - 1, 1)
    assert (code, at) == (ErrorCode.NONE, 99)  # the last of 100 batches in partition 3
    reopened.close()
    r.broker.close()


def test_a_damaged_journal_is_reported_and_the_broker_starts(tmp_path: Path) -> None:
    first = Running(tmp_path / "s")
    first.broker.admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    for i in range(4):
        first.produce(batch(i, [b"v%d" % i]))
    image = crash_image(first.root, tmp_path / "image")
    first.close()
    [journal] = (image / "kafka" / "producers").glob(f"*{JOURNAL_SUFFIX}")
    data = bytearray(journal.read_bytes())
    data[40] ^= 0xFF  # inside the first entries: later entries stay readable
    journal.write_bytes(bytes(data))

    second = Running(image)
    try:
        [problem] = second.broker.store.health.problems()
        assert problem.kind == "kafka_producer_state" and "CRC" in problem.detail["damage"]
        assert second.produce(batch(4, [b"v4"]))["error_code"] == 0  # still serving
    finally:
        second.close()


def fill(directory: Path) -> None:
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with contextlib.suppress(OSError):  # until ENOSPC
        while os.write(fd, bytes(64)):
            pass
    os.close(fd)


@pytest.fixture
def full_journal_disk(tmp_path: Path) -> Iterator[Path]:
    """``<store>/kafka/producers`` on a 64 KiB tmpfs, filled to the last byte."""
    directory = tmp_path / "s" / "kafka" / "producers"
    directory.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(directory)], check=True)
    try:
        fill(directory)
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


def test_a_full_journal_disk_refuses_idempotent_batches_until_space_returns(
    tmp_path: Path, full_journal_disk: Path
) -> None:
    clock = FakeClock()
    r = Running(tmp_path / "s", clock=clock)
    try:
        r.broker.admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        [condition] = r.broker.store.health.conditions()
        assert "producer journal cannot be written" in condition.summary
        refused = r.produce(batch(0, values("a")))
        assert refused["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        plain = encode_batch([(0, 1, None, b"plain", ())])
        assert r.produce(plain)["error_code"] == 0  # other producers are not affected
        (full_journal_disk / "filler").unlink()
        clock.advance(5_000)  # the journal is tried again
        assert r.produce(batch(0, values("a")))["base_offset"] == 1
        assert r.produce(batch(0, values("a")))["base_offset"] == 1  # a retry
        assert r.broker.store.health.conditions() == []
        fill(full_journal_disk)  # full again, while running: the journal's page fills up
        expected = [b"plain", *values("a")]
        for seq in range(3, 3000, 3):  # until an INTENT does not fit
            reply = r.produce(batch(seq, values(str(seq))))
            if reply["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR:
                break
            assert reply["error_code"] == 0
            expected += values(str(seq))
        else:
            raise AssertionError("the journal never filled the disk")
        assert r.stored() == expected  # the refused batch was not stored
        (full_journal_disk / "filler").unlink()
        assert r.produce(batch(seq, values(str(seq))))["base_offset"] == len(expected)
        assert r.stored() == [*expected, *values(str(seq))]
    finally:
        r.close()
