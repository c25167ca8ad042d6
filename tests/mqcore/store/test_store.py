"""MessageStore end to end on real files: every message found again through every read path.

Small segments (64 KiB CommitLog, 100-unit ConsumeQueue files, index files of 7 slots and 200
entries) make a few thousand messages roll every kind of file many times; an in-memory
oracle (``tests/support/store_oracle.py``) says what each read must return.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import StoreLockedError, ValidationError
from mqcore.format.hashing import java_string_hash
from mqcore.format.msgid import HostAddress
from mqcore.format.record import MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2
from mqcore.message import Message
from mqcore.store import GetStatus, MessageStore, StoreConfig
from tests.support.store_oracle import (
    ALL_TIME,
    REPO,
    Oracle,
    assert_all_found,
    assert_same,
    read_queue,
)

T0 = 1_700_000_000_000
SMALL = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=100,
    index_hash_slots=7,  # every slot chain is shared by many keys
    index_max_entries=200,
)
RETRY_TOPIC = "%RETRY%" + "group-" * 25  # 157 chars: only %RETRY%/%DLQ% topics may exceed 127
TOPICS = ("orders", "payments", RETRY_TOPIC)
TAGS = ("TagA", "TagB", "TagC", None)


def open_store(root: Path, clock: FakeClock, config: StoreConfig = SMALL) -> MessageStore:
    return MessageStore(root, config, clock=clock).open()


def random_message(rng: random.Random, i: int, clock: FakeClock) -> Message:
    topic = rng.choice(TOPICS)
    body_len = rng.choice((1, 40, 200, 900, 3000))
    born_host = (
        HostAddress("2001:db8::17", 40001)
        if i % 7 == 0
        else HostAddress("192.168.1.20", 50000 + i % 100)
    )
    return Message(
        topic,
        rng.randbytes(body_len) if i % 3 else f"text body {i} ".encode() * (body_len // 12 + 1),
        tags=rng.choice(TAGS),
        keys=[f"id-{i}", f"group-{i // 4}"],  # one unique key, one shared by 4 messages
        properties={"seq": str(i)},
        born_timestamp=clock.now_ms() - rng.randrange(1000),
        born_host=born_host,
    )


def fill(store: MessageStore, clock: FakeClock, oracle: Oracle, count: int, seed: int = 7) -> None:
    """Put ``count`` messages: singles and batches, 3 topics x 3 queues, clock steps of 0-3 ms."""
    rng = random.Random(seed)
    i = len(oracle.messages)
    end = i + count
    while i < end:
        queue_id = rng.randrange(3)
        if rng.random() < 0.2:
            n = min(rng.randint(2, 5), end - i)
            batch = [random_message(rng, i + k, clock) for k in range(n)]
            topic = batch[0].topic
            for m in batch:
                m.topic = topic  # a batch goes to one queue
            oracle.put_batch(store, batch, queue_id)
            i += n
        else:
            oracle.put(store, random_message(rng, i, clock), queue_id)
            i += 1
        clock.advance(rng.randrange(4))
        if rng.random() < 0.1:
            store.dispatch_until_caught_up()
    store.dispatch_until_caught_up()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


# --- rolling: every message found through every read path ---------------------------------


def test_rolling_across_many_segments_finds_every_message(tmp_path: Path, clock: FakeClock) -> None:
    oracle = Oracle()
    with open_store(tmp_path, clock) as store:
        fill(store, clock, oracle, 1000)
        assert len(store.commit_log.segments.files) >= 8
        assert len(store.index.files) >= 5
        assert (
            max(len(q.segments.files) for t in TOPICS for q in store.queues.queues(t).values()) >= 2
        )
        assert_all_found(store, oracle, ids_every=5)
    with open_store(tmp_path, clock) as store:  # and again from the files alone, every id
        assert store.recovery is not None and store.recovery.records_dispatched == 0
        assert_all_found(store, oracle)


def test_batches_are_contiguous_in_one_segment(tmp_path: Path, clock: FakeClock) -> None:
    oracle = Oracle()
    body = b"b" * 5000
    with open_store(tmp_path, clock) as store:
        for round_ in range(12):  # 12 x 4 x ~5.1 KB: some batches must move to the next segment
            msgs = [Message("orders", body, keys=[f"r{round_}-{k}"]) for k in range(4)]
            results = store.put_messages(msgs, queue_id=1)
            for msg, r in zip(msgs, results, strict=True):
                oracle.add(msg, r)
            first = results[0]
            assert [r.queue_offset for r in results] == [first.queue_offset + k for k in range(4)]
            assert len({r.phys_offset // SMALL.commitlog_file_size for r in results}) == 1
            for a, b in zip(results, results[1:], strict=False):
                assert b.phys_offset == a.phys_offset + a.wrote_bytes
                assert b.store_timestamp == a.store_timestamp
            clock.advance(5)
        store.dispatch_until_caught_up()
        assert len(store.commit_log.segments.files) >= 3
        assert_all_found(store, oracle)


def test_ipv6_store_host_gives_56_char_offset_ids(tmp_path: Path, clock: FakeClock) -> None:
    config = StoreConfig(
        commitlog_file_size=64 * 1024,
        consume_queue_file_entries=100,
        index_hash_slots=7,
        index_max_entries=200,
        store_host=HostAddress("fd00::5", 10911),
    )
    oracle = Oracle()
    with MessageStore(tmp_path, config, clock=clock) as store:
        for i in range(300):
            oracle.put(
                store,
                Message("orders", b"v6" * 200, keys=[f"k{i}"], born_host=HostAddress("::1", i)),
                i % 2,
            )
        store.dispatch_until_caught_up()
        assert {len(e.offset_msg_id) for e in oracle.messages} == {56}
        assert_all_found(store, oracle)


def test_v2_topic_only_for_retry_topics(tmp_path: Path, clock: FakeClock) -> None:
    oracle = Oracle()
    with open_store(tmp_path, clock) as store:
        with pytest.raises(ValidationError, match="at most 127"):
            store.put_message(Message("x" * 128, b"body"))
        long_ = oracle.put(store, Message(RETRY_TOPIC, b"retry me", keys=["r1"]))
        short = oracle.put(store, Message("x" * 127, b"v1 still", keys=["r2"]))
        store.dispatch_until_caught_up()
        assert store.view_by_id(long_.offset_msg_id).magic_code == MESSAGE_MAGIC_CODE_V2
        assert store.view_by_id(short.offset_msg_id).magic_code == MESSAGE_MAGIC_CODE_V1
        assert_all_found(store, oracle)


# --- tag filter -----------------------------------------------------------------------------


def test_tag_filter_by_tag_code(tmp_path: Path, clock: FakeClock) -> None:
    oracle = Oracle()
    with open_store(tmp_path, clock) as store:
        fill(store, clock, oracle, 600, seed=11)
        for topic, queue_id in oracle.by_queue():
            for wanted in (("TagA",), ("TagB", "TagC")):
                codes = {java_string_hash(t) for t in wanted}
                got = read_queue(store, topic, queue_id, codes)
                expected = [e for e in oracle.by_queue()[(topic, queue_id)] if e.tags in wanted]
                assert [m.queue_offset for m in got] == [e.queue_offset for e in expected]
                for m, e in zip(got, expected, strict=True):
                    assert_same(m, e)


def test_tag_filter_with_no_match_in_a_file_moves_on(tmp_path: Path, clock: FakeClock) -> None:
    with open_store(tmp_path, clock) as store:
        for i in range(250):
            store.put_message(Message("orders", b"x", tags="rare" if i == 240 else "common"))
        store.dispatch_until_caught_up()
        rare = {java_string_hash("rare")}
        got = store.get_messages("g", "orders", 0, 0, 32, rare)
        # One ConsumeQueue file (100 units) per pull at most (travelCqFileNumWhenGetMessage=1).
        assert (got.status, got.next_offset, got.messages) == (
            GetStatus.NO_MATCHED_MESSAGE,
            100,
            [],
        )
        got = store.get_messages("g", "orders", 0, 200, 32, rare)
        assert got.status is GetStatus.FOUND
        assert [m.queue_offset for m in got.messages] == [240]


# --- spec 7.1 status table --------------------------------------------------------------------


def test_get_message_status_table(tmp_path: Path, clock: FakeClock) -> None:
    with open_store(tmp_path, clock) as store:
        for i in range(700):
            store.put_message(Message("orders", b"m" * 200, tags="TagA", keys=[f"k{i}"]))
        store.dispatch_until_caught_up()

    def row(offset: int, topic: str = "orders", queue_id: int = 0, tags=None) -> tuple:
        got = store.get_messages("g", topic, queue_id, offset, 4, tags)
        return got.status, got.next_offset, got.min_offset, got.max_offset

    # After cleanup removed the first CommitLog segment, the queue's min offset moves up.
    os.unlink(tmp_path / "commitlog" / f"{0:020d}")
    (tmp_path / "consumequeue" / "empty" / "0").mkdir(parents=True)  # a queue with no unit
    with open_store(tmp_path, clock) as store:
        low, high = store.min_offset("orders", 0), store.max_offset("orders", 0)
        assert 0 < low < high == 700
        assert row(0, "missing") == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        assert row(0, "orders", 1) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        assert row(5, "empty") == (GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        assert row(low - 1) == (GetStatus.OFFSET_TOO_SMALL, low, low, high)
        assert row(high) == (GetStatus.OFFSET_OVERFLOW_ONE, high, low, high)
        assert row(high + 10) == (GetStatus.OFFSET_OVERFLOW_BADLY, high, low, high)
        assert row(low) == (GetStatus.FOUND, low + 4, low, high)
        assert row(high - 1) == (GetStatus.FOUND, high, low, high)
        other = {java_string_hash("TagB")}
        status, next_offset, _, _ = row(low, tags=other)
        assert status is GetStatus.NO_MATCHED_MESSAGE and next_offset > low


def test_read_only_store_reports_removed_messages(tmp_path: Path, clock: FakeClock) -> None:
    with open_store(tmp_path, clock) as store:
        for _ in range(400):
            store.put_message(Message("orders", b"m" * 200))
    os.unlink(tmp_path / "commitlog" / f"{0:020d}")
    # Read-only: no recovery, no min-offset correction; the units point at a deleted segment.
    with MessageStore(tmp_path, SMALL, readonly=True) as store:
        got = store.get_messages("g", "orders", 0, 0, 4)
        assert got.status is GetStatus.MESSAGE_WAS_REMOVING and got.messages == []
        assert store.get_messages("g", "orders", 0, 399, 4).status is GetStatus.FOUND


# --- offset_for_time (spec 7.2, LOWER) ----------------------------------------------------------


def test_offset_for_time_matches_an_oracle(tmp_path: Path, clock: FakeClock) -> None:
    rng = random.Random(3)
    times: dict[int, list[int]] = {0: [], 1: []}
    with open_store(tmp_path, clock) as store:
        for _ in range(900):
            queue_id = rng.randrange(2)
            times[queue_id].append(
                store.put_message(Message("orders", b"t"), queue_id).store_timestamp
            )
            clock.advance(rng.choice((0, 0, 1, 2, 5)))  # equal store times happen
        store.dispatch_until_caught_up()
        for queue_id, stamps in times.items():
            assert len(store.queues.get("orders", queue_id).segments.files) >= 4
            probes = {stamps[0] - 1000, stamps[-1] + 1000, *stamps, *(t + 1 for t in stamps)}
            for ts in sorted(probes):
                expected = next((i for i, t in enumerate(stamps) if t >= ts), len(stamps))
                assert store.offset_for_time("orders", queue_id, ts) == expected, ts
        assert store.offset_for_time("missing", 0, T0) == 0


# --- reopen, abort, lock ------------------------------------------------------------------------


def test_reopen_after_clean_close(tmp_path: Path, clock: FakeClock) -> None:
    oracle = Oracle()
    with open_store(tmp_path, clock) as store:
        assert (tmp_path / "abort").exists()
        fill(store, clock, oracle, 300)
    assert not (tmp_path / "abort").exists()
    with open_store(tmp_path, clock) as store:
        report = store.recovery
        assert report is not None and report.last_exit_ok
        assert (report.records_dispatched, report.dropped_bytes, report.deleted_segments) == (
            0,
            0,
            [],
        )
        before = store.dispatch_until_caught_up()
        assert before == 0  # nothing re-dispatched either
        for (topic, queue_id), expected in oracle.by_queue().items():
            assert store.max_offset(topic, queue_id) == len(expected)
            r = oracle.put(
                store, Message(topic, b"after reopen", keys=[f"new-{topic}-{queue_id}"]), queue_id
            )
            assert r.queue_offset == len(expected)
        store.dispatch_until_caught_up()
        assert_all_found(store, oracle)


LOCK_PROBE = textwrap.dedent(
    """
    import sys
    from mqcore.errors import StoreLockedError
    from mqcore.store import MessageStore, StoreConfig
    config = StoreConfig(commitlog_file_size=65536, consume_queue_file_entries=100,
                         index_hash_slots=7, index_max_entries=200)
    try:
        MessageStore(sys.argv[1], config).open()
        print("opened")
    except StoreLockedError as exc:
        print("locked:", exc)
    with MessageStore(sys.argv[1], config, readonly=True) as ro:
        print("read-only max offset", ro.max_offset("orders", 0))
    """
)


def test_lock_keeps_out_a_second_writer_but_not_readers(tmp_path: Path, clock: FakeClock) -> None:
    with open_store(tmp_path, clock) as store:
        for _ in range(10):
            store.put_message(Message("orders", b"x"))
        store.dispatch_until_caught_up()
        probe = subprocess.run(
            [sys.executable, "-c", LOCK_PROBE, str(tmp_path)],
            capture_output=True, text=True, cwd=REPO, timeout=60, check=True,
        )  # fmt: skip
        lines = probe.stdout.splitlines()
        assert lines[0].startswith("locked:"), probe.stdout + probe.stderr
        assert lines[1] == "read-only max offset 10"
        with pytest.raises(StoreLockedError, match="already open"):
            MessageStore(tmp_path, SMALL).open()  # same process, same answer
        with MessageStore(tmp_path, SMALL, readonly=True) as ro:
            assert len(ro.get_messages("g", "orders", 0, 0, 32).messages) == 10
    probe = subprocess.run(
        [sys.executable, "-c", LOCK_PROBE, str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=True,
    )  # fmt: skip
    assert probe.stdout.splitlines()[0] == "opened"


def test_query_by_key_time_range(tmp_path: Path, clock: FakeClock) -> None:
    with open_store(tmp_path, clock) as store:
        stamps = []
        for _ in range(30):
            stamps.append(store.put_message(Message("orders", b"x", keys=["same"])).store_timestamp)
            clock.advance(2000)  # index time_diff has 1 s resolution
        store.dispatch_until_caught_up()
        assert len(store.query_by_key("orders", "same", *ALL_TIME, max_count=64)) == 30
        got = store.query_by_key("orders", "same", stamps[10], stamps[19], max_count=64)
        assert [m.store_timestamp for m in got] == stamps[10:20]
        assert len(store.query_by_key("orders", "same", *ALL_TIME, max_count=5)) == 5
        assert store.query_by_key("orders", "other", *ALL_TIME) == []
        assert store.query_by_key("payments", "same", *ALL_TIME) == []


def test_close_flushes_every_file_before_declaring_a_clean_exit(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = open_store(tmp_path, clock)
    last = None
    for i in range(1200):  # ~7 CommitLog segments, ~6 files per queue: async flush, no flusher
        last = store.put_message(Message("orders", b"f" * 300), i % 2)
        clock.advance(1)
    store.dispatch_until_caught_up()
    end = store.commit_log.max_offset
    queues = {q: q.segments.max_offset for q in store.queues.queues("orders").values()}
    assert store.commit_log.flushed_offset < end
    store.close()
    assert not (tmp_path / "abort").exists()
    assert store.commit_log.flushed_offset == end
    assert {q: q.segments.flushed_where for q in queues} == queues
    assert last is not None and store.checkpoint.physic_msg_timestamp == last.store_timestamp


def test_a_batch_that_fails_to_encode_leaves_no_queue_offset_gap(tmp_path: Path) -> None:
    from mqcore.format.msgid import UniqKeyGenerator
    from mqcore.store.commit_log import PendingRecord
    from mqcore.store.put.pending import pending_record

    cfg = StoreConfig(
        commitlog_file_size=64 * 1024,
        consume_queue_file_entries=100,
        index_hash_slots=11,
        index_max_entries=100,
    )
    with MessageStore(tmp_path, cfg) as store:
        store.put_message(Message("Gap", b"first"))
        good = pending_record(
            Message("Gap", b"second"),
            0,
            uniq=UniqKeyGenerator(clock=store.clock),
            clock=store.clock,
            max_message_size=cfg.max_message_size,
            store_host=cfg.store_host,
        )[0]
        # A record whose body is not bytes cannot be encoded: the batch fails midway.
        bad = PendingRecord(**{**{f: getattr(good, f) for f in good.__slots__}, "body": None})  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.commit_log.append([good, bad])
        assert store.commit_log.queue_offsets[("Gap", 0)] == 1
        r = store.put_message(Message("Gap", b"third"))
        assert r.queue_offset == 1
        store.dispatch_until_caught_up()
        got = store.get_messages("g", "Gap", 0, 0, 10)
        assert [m.body for m in got.messages] == [b"first", b"third"]


def test_key_query_from_a_message_s_exact_store_time_finds_it(tmp_path: Path) -> None:
    # Index entries hold whole seconds since the file's first entry: a message stored at
    # 1.5 s into the file reads back as 1.0 s. Its own store time must still find it.
    clock = FakeClock(now_ms=1_800_000_000_000)
    cfg = StoreConfig(
        commitlog_file_size=64 * 1024,
        consume_queue_file_entries=100,
        index_hash_slots=11,
        index_max_entries=100,
    )
    with MessageStore(tmp_path, cfg, clock=clock) as store:
        store.put_message(Message("Exact", b"first", keys=["a"]))
        clock.advance(1_500)
        r = store.put_message(Message("Exact", b"second", keys=["b"]))
        store.dispatch_until_caught_up()
        ts = r.store_timestamp
        found = store.query_by_key("Exact", "b", ts, ts)
        assert [m.body for m in found] == [b"second"]
        assert store.query_by_key("Exact", "b", ts + 1, ts + 10_000) == []


def test_offset_for_time_reads_store_times_behind_ipv6_born_hosts(tmp_path: Path) -> None:
    # With an IPv6 born host STORETIMESTAMP sits 12 bytes further into the record.
    clock = FakeClock(now_ms=1_800_000_000_000)
    cfg = StoreConfig(
        commitlog_file_size=64 * 1024,
        consume_queue_file_entries=100,
        index_hash_slots=11,
        index_max_entries=100,
    )
    v6 = HostAddress("2001:db8::7", 40000)
    with MessageStore(tmp_path, cfg, clock=clock) as store:
        times = []
        for i in range(20):
            r = store.put_message(Message("Six", f"m{i}".encode(), born_host=v6))
            times.append(r.store_timestamp)
            clock.advance(1_000)
        store.dispatch_until_caught_up()
        assert store.commit_log.store_time_of(0, 200) == times[0]
        assert store.offset_for_time("Six", 0, times[7]) == 7
        assert store.offset_for_time("Six", 0, times[7] + 1) == 8
