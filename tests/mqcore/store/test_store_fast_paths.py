"""The store's batch fast paths leave exactly the files the one-at-a-time paths leave.

Reput dispatches in batches (``DispatchWriter.write_requests``: ``ConsumeQueueStore.put_many``,
``IndexService.build_index_many``); here a second store is given ``ReferenceDispatchWriter``,
which dispatches every record through ``DispatchWriter.write_one`` (the recovery path, one
record at a time), and every derived file must be equal byte for byte, listeners called in
the same order. The put path's dict-free property encoding
and batch record encoding are covered the same way: the CommitLog bytes must equal records
built with the reference encoders.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from mqcore.clock import FakeClock
from mqcore.format.msgid import HostAddress
from mqcore.format.properties import encode_properties
from mqcore.format.record import decode_record, encode_record
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.reput.dispatch_write import DispatchWriter, ReferenceDispatchWriter

T0 = 1_700_000_000_000
SMALL = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=7,
    index_max_entries=60,  # rolls every ~25 messages
)
TX_TYPES = (0x0, 0x0, 0x0, 0x4, 0x8, 0xC)  # none, prepared, commit, rollback


def messages(seed: int, count: int) -> list[tuple[int, list[Message]]]:
    """(queue_id, batch) pairs: singles and batches, 2 topics, 3 queues, every tx type."""
    rng = random.Random(seed)
    out: list[tuple[int, list[Message]]] = []
    i = 0
    while i < count:
        topic = rng.choice(["orders", "payments"])
        batch = []
        for _ in range(rng.choice([1, 1, 3, 8])):
            batch.append(
                Message(
                    topic,
                    rng.randbytes(rng.choice([1, 100, 700])),
                    tags=rng.choice(["TagA", "TagB", None, ""]),
                    keys=rng.choice([[f"id-{i}"], [f"id-{i}", f"g-{i // 5}"], [], "a  b"]),
                    properties=rng.choice([None, {}, {"seq": str(i)}, {"UNIQ_KEY": f"u{i}"}]),
                    born_timestamp=T0 + i,
                    born_host=HostAddress("10.0.0.9", 4000 + i % 3),
                    sys_flag=rng.choice(TX_TYPES),
                    delay_level=rng.choice([0, 0, 2]),
                )
            )
            i += 1
        out.append((rng.randrange(3), batch))
    return out


def derived_files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for sub in ("consumequeue", "index", "commitlog")
        for path in sorted((root / sub).rglob("*"))
        if path.is_file()
    }


def test_batched_reput_writes_the_files_of_one_by_one_dispatch(tmp_path: Path) -> None:
    """Three stores: ``batched`` (a listener: requests, ``write_requests``), ``rows`` (no
    listener: ``dispatch_scan`` rows) and ``single`` (``write_one`` one request at a time)."""
    seen: dict[str, list[int]] = {"batched": [], "single": []}
    stores = {}
    puts = messages(5, 600)
    for name in ("batched", "rows", "single"):
        clock = FakeClock(T0)
        writer = ReferenceDispatchWriter if name == "single" else DispatchWriter
        store = MessageStore(tmp_path / name, SMALL, clock=clock, dispatch=writer).open()
        if name in seen:
            store.add_listener(lambda r, name=name: seen[name].append(r.phys_offset))
        for step, (queue_id, batch) in enumerate(puts):
            store.put_messages(batch, queue_id)
            clock.advance(step % 3)
            if step % 7 == 0:
                store.reput_once(max_bytes=6000)  # stop in the middle of the log now and then
        store.dispatch_until_caught_up()
        stores[name] = store
    batched, rows, single = stores["batched"], stores["rows"], stores["single"]
    assert seen["batched"] == seen["single"]
    assert len(seen["single"]) == sum(len(batch) for _, batch in puts)
    assert len(batched.index.files) > 5
    assert batched.checkpoint.logics_msg_timestamp == single.checkpoint.logics_msg_timestamp > 0
    assert rows.checkpoint.logics_msg_timestamp == single.checkpoint.logics_msg_timestamp
    assert rows.reput_offset == single.reput_offset == single.commit_log.max_offset
    for store in stores.values():
        store.commit_log.flush(0)
        store.queues.flush_all(0)
        store.index.flush()
    assert derived_files(tmp_path / "batched") == derived_files(tmp_path / "single")
    assert derived_files(tmp_path / "rows") == derived_files(tmp_path / "single")
    for store in stores.values():
        store.close()


def test_put_path_writes_the_reference_records(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        for queue_id, batch in messages(9, 200):
            results = store.put_messages(batch, queue_id)
            for msg, result in zip(batch, results, strict=True):
                raw = store.commit_log.read(result.phys_offset, result.wrote_bytes)
                assert raw is not None
                stored = decode_record(raw, 0)
                props = msg.all_properties()
                props.setdefault("UNIQ_KEY", result.msg_id)
                assert stored.properties["UNIQ_KEY"] == result.msg_id
                expected = encode_record(
                    topic=msg.topic,
                    queue_id=queue_id,
                    flag=msg.flag,
                    queue_offset=result.queue_offset,  # 0 for prepared and rollback records
                    phys_offset=result.phys_offset,
                    sys_flag=msg.sys_flag,
                    born_timestamp=msg.born_timestamp,
                    born_host=msg.born_host or HostAddress("127.0.0.1", 0),
                    store_timestamp=result.store_timestamp,
                    store_host=SMALL.store_host,
                    reconsume_times=0,
                    prepared_transaction_offset=0,
                    body=msg.body,
                    properties=encode_properties(props),
                )
                assert raw == expected
            clock.advance(1)


def plain_runs(seed: int, count: int) -> list[tuple[int, list[Message]]]:
    """Mostly the benchmark's shape (one topic and queue, a tag, one key, the store's
    UNIQ_KEY): the runs reput writes column by column, with now and then what breaks a
    run (another queue, a PREPARED or ROLLBACK record, two keys, no key)."""
    rng = random.Random(seed)
    out: list[tuple[int, list[Message]]] = []
    i = 0
    while i < count:
        odd = rng.random() < 0.1
        batch = [
            Message(
                "orders",
                rng.randbytes(rng.choice([10, 100])),
                tags=rng.choice(["TagA", "TagB"]),
                keys=rng.choice([f"k{i + n}", f"k{i + n} g", ""]) if odd else f"k{i + n}",
                sys_flag=rng.choice([0x0, 0x4, 0x8, 0xC]) if odd else 0,
            )
            for n in range(rng.choice([1, 32, 64]))
        ]
        i += len(batch)
        out.append((1 if odd and rng.random() < 0.5 else 0, batch))
    return out


def open_store(
    path: Path, config: StoreConfig, clock: FakeClock, *, reference: bool
) -> MessageStore:
    """An open store; ``reference``: one that dispatches through requests, one
    ``write_one`` each (``ReferenceDispatchWriter``), the reference the fast paths are
    compared with."""
    if not reference:
        return MessageStore(path, config, clock=clock).open()
    store = MessageStore(path, config, clock=clock, dispatch=ReferenceDispatchWriter).open()
    store.add_listener(lambda r: None)  # requests, not rows or columns
    return store


def assert_same_derived_files(stores: dict[str, MessageStore], path: Path, reference: Path) -> None:
    """Flush and close both stores; their ConsumeQueue and index files are equal."""
    for store in stores.values():
        store.commit_log.flush(0)
        store.queues.flush_all(0)
        store.index.flush()
    assert derived_files(path) == derived_files(reference)
    for store in stores.values():
        store.close()


def test_rows_path_on_plain_runs_writes_the_files_of_one_by_one_dispatch(tmp_path: Path) -> None:
    stores = {}
    for name in ("rows", "single"):
        clock = FakeClock(T0)
        store = open_store(tmp_path / name, SMALL, clock, reference=name == "single")
        rng = random.Random(2)
        for queue_id, batch in plain_runs(8, 3000):
            store.put_messages(batch, queue_id)
            clock.advance(rng.randrange(3))
            if rng.random() < 0.2:
                store.reput_once(max_bytes=rng.randrange(100, 30_000))
        store.dispatch_until_caught_up()
        stores[name] = store
    rows, single = stores["rows"], stores["single"]
    assert len(rows.index.files) > 20
    assert len(rows.queues.queues("orders")[0].segments.files) > 20
    assert rows.checkpoint.logics_msg_timestamp == single.checkpoint.logics_msg_timestamp > 0
    assert_same_derived_files(stores, tmp_path / "rows", tmp_path / "single")


#: Index files of a few thousand entries in 101 slots: the column passes (runs of 32 keys
#: or more) meet repeated slots in nearly every run, and files roll in the middle of runs.
MIDDLE = StoreConfig(
    commitlog_file_size=256 * 1024,
    consume_queue_file_entries=700,
    index_hash_slots=101,
    index_max_entries=2_500,
)


def kafka_runs(seed: int, count: int) -> list[tuple[str, int, list[Message]]]:
    """Mostly keyless runs (UNIQ_KEY alone: a keyless Kafka record, read as one fixed-width
    column) of one topic and queue, with keyed runs, tagged runs, other topics and queues,
    a non-ASCII key and PREPARED records in between."""
    rng = random.Random(seed)
    out: list[tuple[str, int, list[Message]]] = []
    i = 0
    while i < count:
        kind = rng.choice(["keyless"] * 6 + ["keyed", "tagged", "odd"])
        size = rng.choice([1, 40, 300, 700])
        topic = rng.choice(["orders", "orders", "payments"])
        batch = []
        for n in range(size):
            extra: dict[str, Any] = {}
            if kind == "keyed":
                extra["keys"] = f"k{i + n}"
            elif kind == "tagged":
                extra["tags"] = "TagA"
            elif kind == "odd":
                extra["keys"] = "ключ"
                extra["sys_flag"] = 0x4 if n == 3 else 0
            batch.append(Message(topic, rng.randbytes(rng.choice([10, 100])), **extra))
        i += size
        out.append((topic, rng.choice([0, 0, 0, 1]), batch))
    return out


def assert_column_path_writes_the_reference_files(
    tmp_path: Path, runs: list[tuple[str, int, list[Message]]]
) -> None:
    """Put ``runs`` into a store dispatching by columns (reput's path) and into one
    dispatching one by one, reputting now and then: same derived files."""
    stores = {}
    for name in ("columns", "single"):
        clock = FakeClock(T0)
        store = open_store(tmp_path / name, MIDDLE, clock, reference=name == "single")
        arrivals: list[object] = []
        store.add_arrivals_listener(arrivals.append)
        rng = random.Random(3)
        for _, queue_id, batch in runs:
            store.put_messages(batch, queue_id)
            clock.advance(rng.choice([0, 1, 1500]))
            if rng.random() < 0.3:
                store.reput_once(max_bytes=rng.choice([3_000, 100_000, 1 << 20]))
        store.dispatch_until_caught_up()
        stores[name] = store
    columns, single = stores["columns"], stores["single"]
    assert len(columns.index.files) > 10
    assert columns.checkpoint.logics_msg_timestamp == single.checkpoint.logics_msg_timestamp
    assert_same_derived_files(stores, tmp_path / "columns", tmp_path / "single")


def test_column_path_on_kafka_runs_writes_the_files_of_one_by_one_dispatch(
    tmp_path: Path,
) -> None:
    assert_column_path_writes_the_reference_files(tmp_path, kafka_runs(5, 30_000))


def keyed_runs(
    seed: int, count: int, kinds: tuple[str, ...], tagged_share: float
) -> list[tuple[str, int, list[Message]]]:
    """Keyed runs (``[TAGS] KEYS UNIQ_KEY``, read as byte columns by
    ``keyed_properties``) with keys of one length and of several, with and without TAGS,
    and between them keyless runs, and runs with a non-ASCII key, two keys in one KEYS,
    a \\x01 in a key, or keyed and keyless records mixed (``kinds``: var, fixed,
    keyless, odd, mixed; ``tagged_share``: the share of batches with TAGS)."""
    rng = random.Random(seed)
    out: list[tuple[str, int, list[Message]]] = []
    i = 0
    while i < count:
        kind = rng.choice(kinds)
        tagged = rng.random() < tagged_share
        size = rng.choice([1, 40, 300, 700])
        topic = rng.choice(["orders", "orders", "payments"])
        batch = []
        for n in range(size):
            extra: dict[str, Any] = {}
            if tagged:
                extra["tags"] = rng.choice(["TagA", "TagBB"])
            if kind == "var":
                extra["keys"] = f"order-{i + n}"
            elif kind == "fixed":
                extra["keys"] = f"order-{i + n:06d}"
            elif kind == "odd" and n == size // 2:
                extra["keys"] = rng.choice(["ключ-1", "a b", "a\x01b", "x" * 300])
            elif kind == "odd" or (kind == "mixed" and n % 3):
                extra["keys"] = f"k{i + n}"
            batch.append(Message(topic, rng.randbytes(rng.choice([10, 100])), **extra))
        i += size
        out.append((topic, rng.choice([0, 0, 0, 1]), batch))
    return out


def test_column_path_on_keyed_runs_writes_the_files_of_one_by_one_dispatch(
    tmp_path: Path,
) -> None:
    kinds = ("var", "var", "fixed", "fixed", "keyless", "odd", "mixed")
    assert_column_path_writes_the_reference_files(tmp_path, keyed_runs(6, 30_000, kinds, 0.4))


def test_column_path_on_keyed_runs_with_odd_keys_writes_the_reference_files(
    tmp_path: Path,
) -> None:
    """Keyed runs with no TAGS and no keyless record: the scan's runs (up to 2048 records,
    across put batches) are all in one layout, so the odd keys (two keys in one KEYS,
    non-ASCII, \\x01) meet the byte-column checks themselves."""
    kinds = ("var", "fixed", "odd")
    assert_column_path_writes_the_reference_files(tmp_path, keyed_runs(7, 30_000, kinds, 0.0))
