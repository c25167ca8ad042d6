"""The plain-batch put path (``plain_batch.py``: messages without user properties, one topic)
writes exactly the records of the reference encoder, returns the PutResults of the general
path, and hands anything unusual to the general path, which raises its own errors."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import MessageIllegalError, ValidationError
from mqcore.format.layout import SIZE_MAGIC
from mqcore.format.msgid import HostAddress, UniqKeyGenerator, create_offset_msg_id
from mqcore.format.properties import encode_properties
from mqcore.format.record import BLANK_MAGIC_CODE, decode_record, encode_record
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.recovery.geometry import infer_geometry
from mqcore.store.recovery.verify import check_store
from mqcore.store.results import PutStatus
from tests.support.store_oracle import read_queue

T0 = 1_700_000_000_000
SMALL = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=7,
    index_max_entries=60,
)
BORN_HOSTS = (
    HostAddress("10.0.0.9", 4000),
    HostAddress("2001:db8::17", 40001),
    HostAddress("::ffff:10.1.2.3", 7),  # IPv4-mapped: stored as IPv4
    None,  # the store's default
)
TX_TYPES = (0x0, 0x0, 0x0, 0x4, 0x8, 0xC)  # none, prepared, commit, rollback
KEYS = ("id-{i}", ["id-{i}", "g-{i}"], [], "a  b-{i}", "ключ-{i}", ["", "x-{i}"])


def plain_batches(seed: int, count: int, topic: str = "orders") -> list[list[Message]]:
    rng = random.Random(seed)
    out: list[list[Message]] = []
    i = 0
    while i < count:
        batch = []
        for _ in range(rng.choice([1, 2, 8, 32])):
            keys = rng.choice(KEYS)
            batch.append(
                Message(
                    topic,
                    rng.randbytes(rng.choice([1, 100, 1500])),
                    tags=rng.choice(["TagA", "Tág", None, ""]),
                    keys=keys.format(i=i)
                    if isinstance(keys, str)
                    else [k.format(i=i) for k in keys],
                    properties=rng.choice([None, {}]),
                    flag=rng.choice([0, 7, -1]),
                    born_timestamp=rng.choice([T0 + i, None]),
                    born_host=rng.choice(BORN_HOSTS),
                    sys_flag=rng.choice(TX_TYPES) | rng.choice([0, 0x30]),  # host bits ignored
                    reconsume_times=rng.choice([0, 3]),
                    delay_level=rng.choice([0, 0, 2]),
                )
            )
            i += 1
        out.append(batch)
    return out


def reference_record(msg: Message, config: StoreConfig, result, queue_id: int) -> bytes:  # type: ignore[no-untyped-def]
    props = msg.all_properties()
    props["UNIQ_KEY"] = result.msg_id
    return encode_record(
        topic=msg.topic,
        queue_id=queue_id,
        flag=msg.flag,
        queue_offset=result.queue_offset,
        phys_offset=result.phys_offset,
        sys_flag=msg.sys_flag,
        born_timestamp=T0 if msg.born_timestamp is None else msg.born_timestamp,
        born_host=msg.born_host or HostAddress("127.0.0.1", 0),
        store_timestamp=result.store_timestamp,
        store_host=config.store_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=0,
        body=msg.body,
        properties=encode_properties(props),
    )


@pytest.mark.parametrize("store_host", [HostAddress("10.0.0.1", 10911), HostAddress("fd00::1", 9)])
def test_plain_batches_write_the_reference_records(tmp_path: Path, store_host: HostAddress) -> None:
    config = StoreConfig(**{**SMALL.__dict__, "store_host": store_host})
    clock = FakeClock(T0)
    next_offsets: dict[int, int] = {}
    with MessageStore(tmp_path, config, clock=clock) as store:
        store.put_message(Message("orders", b"validates the topic"), 0)  # general path
        next_offsets[0] = 1
        for step, batch in enumerate(plain_batches(3, 1500)):
            queue_id = step % 3
            results = store.put_messages(batch, queue_id)
            assert len(results) == len(batch)
            for msg, r in zip(batch, results, strict=True):
                assert r.status is PutStatus.PUT_OK
                assert (r.topic, r.queue_id, r.store_timestamp) == ("orders", queue_id, T0)
                assert r.offset_msg_id == create_offset_msg_id(store_host, r.phys_offset)
                raw = store.commit_log.read(r.phys_offset, r.wrote_bytes)
                assert raw == reference_record(msg, config, r, queue_id)
                assert decode_record(raw, 0).properties["UNIQ_KEY"] == r.msg_id
                if msg.sys_flag & 0x4:  # prepared and rollback records take no queue offset
                    assert r.queue_offset == 0
                else:
                    assert r.queue_offset == next_offsets.get(queue_id, 0)
                    next_offsets[queue_id] = r.queue_offset + 1
            # one batch, one segment, back to back
            ends = [r.phys_offset + r.wrote_bytes for r in results]
            assert [r.phys_offset for r in results[1:]] == ends[:-1]
            assert len({r.phys_offset // config.commitlog_file_size for r in results}) == 1
        assert len(store.commit_log.segments.files) > 10  # rolled, with blank records
        store.dispatch_until_caught_up()
        queued = [m.msg_id for q in range(3) for m in read_queue(store, "orders", q)]
        assert len(queued) == len(set(queued)) == sum(next_offsets.values())
    report = check_store(tmp_path, infer_geometry(tmp_path))
    assert report.ok, report.defects


def test_a_rolled_plain_batch_starts_the_next_segment_after_a_blank(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        store.put_message(Message("T", b"x"))
        big = [Message("T", bytes(3000), tags="A", keys=f"k{i}") for i in range(20)]
        first = store.put_messages(big)  # ~61 KB: fits in the first segment
        second = store.put_messages(big)  # does not: blank, then the next segment
        assert first[0].phys_offset < SMALL.commitlog_file_size
        assert second[0].phys_offset == SMALL.commitlog_file_size
        end = first[-1].phys_offset + first[-1].wrote_bytes
        raw = store.commit_log.read(end, SIZE_MAGIC.size)
        assert raw is not None
        assert SIZE_MAGIC.unpack(raw) == (SMALL.commitlog_file_size - end, BLANK_MAGIC_CODE)
        assert [r.queue_offset for r in second] == list(range(21, 41))
        store.dispatch_until_caught_up()
        assert store.query_by_key("T", "k3", 0, T0 + 1)[1].phys_offset == second[3].phys_offset


@pytest.mark.parametrize(
    ("bad", "error", "rule"),
    [
        (Message("T", b""), MessageIllegalError, "empty"),
        (Message("T", b"x", keys="a\x02b"), MessageIllegalError, "separator"),
        (Message("T", b"x", tags="\ud800"), MessageIllegalError, "utf8"),
        (
            Message("T", b"x", born_host=HostAddress("host.example", 1)),
            ValidationError,
            "ip_address",
        ),
        (Message("T", b"x", flag=1 << 40), MessageIllegalError, "field_range"),
    ],
)
def test_a_batch_the_plain_path_refuses_raises_the_general_path_error(
    tmp_path: Path, bad: Message, error: type[Exception], rule: str
) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        store.put_message(Message("T", b"first"))
        end = store.commit_log.max_offset
        with pytest.raises(error) as info:
            store.put_messages([Message("T", b"ok", tags="A", keys="k"), bad])
        assert getattr(info.value, "rule", None) == rule
        assert store.commit_log.max_offset == end  # nothing written
        assert store.put_message(Message("T", b"third")).queue_offset == 1  # no gap


def test_mixed_topics_and_user_properties_take_the_general_path(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        store.put_messages([Message("A", b"1"), Message("B", b"2")])  # validates both topics
        mixed = store.put_messages([Message("A", b"3", keys="k"), Message("B", b"4")])
        with_props = store.put_messages([Message("A", b"5", properties={"p": "v"})])
        assert [(r.topic, r.queue_offset) for r in mixed + with_props] == [
            ("A", 1),
            ("B", 1),
            ("A", 2),
        ]
        raw = store.commit_log.read(with_props[0].phys_offset, with_props[0].wrote_bytes)
        assert raw is not None
        assert decode_record(raw, 0).properties["p"] == "v"


def test_sync_flush_plain_batch_is_on_disk_when_it_returns(tmp_path: Path) -> None:
    config = StoreConfig(**{**SMALL.__dict__, "flush": "sync"})
    with MessageStore(tmp_path, config, clock=FakeClock(T0)) as store:
        store.put_message(Message("T", b"validates"))
        results = store.put_messages([Message("T", b"x", tags="A", keys=f"k{i}") for i in range(5)])
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert store.commit_log.flushed_offset >= results[-1].phys_offset + results[-1].wrote_bytes


def test_uniq_key_counter_wraps_inside_a_batch(tmp_path: Path) -> None:
    uniq = UniqKeyGenerator(ip="10.0.0.1", pid=1, clock=FakeClock(T0), counter_start=0xFFF0)
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0), uniq=uniq) as store:
        twin = UniqKeyGenerator(ip="10.0.0.1", pid=1, clock=FakeClock(T0), counter_start=0xFFF0)
        store.put_message(Message("T", b"validates"))
        twin.next_id()
        results = store.put_messages([Message("T", b"x", keys=f"k{i}") for i in range(40)])
        assert [r.msg_id for r in results] == [twin.next_id() for _ in range(40)]
        assert results[14].msg_id.endswith("FFFF") and results[15].msg_id.endswith("0000")


def test_reserve_gives_the_ids_next_id_gives() -> None:
    a = UniqKeyGenerator(ip="2001:db8::1", pid=77, clock=FakeClock(T0), counter_start=5)
    b = UniqKeyGenerator(ip="2001:db8::1", pid=77, clock=FakeClock(T0), counter_start=5)
    head, first = a.reserve(3)
    assert first == 5
    assert [head + f"{first + i:04X}" for i in range(3)] == [b.next_id() for _ in range(3)]
    assert a.next_id() == b.next_id()
