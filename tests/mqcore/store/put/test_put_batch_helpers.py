"""The batch helpers of the plain put path: offsetMsgIds made for a whole batch, the UNIQ_KEY
head reused within a millisecond, the bytes fast path of ``MappedFile.append``, and the
separator checks that send a plain batch to the general path."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.clock import FakeClock
from mqcore.errors import MessageIllegalError
from mqcore.format.msgid import (
    HostAddress,
    UniqKeyGenerator,
    create_offset_msg_id,
    create_offset_msg_ids,
    encode_host,
)
from mqcore.format.record import decode_record
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.files.mapped_file import MappedFile

T0 = 1_700_000_000_000
SMALL = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=50,
    index_hash_slots=7,
    index_max_entries=60,
)
HOSTS = (HostAddress("10.0.0.5", 10911), HostAddress("2001:db8::7", 1))


@given(
    st.sampled_from(HOSTS),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40),
)
def test_offset_msg_ids_are_the_single_ids(host: HostAddress, offsets: list[int]) -> None:
    assert create_offset_msg_ids(encode_host(host), offsets) == [
        create_offset_msg_id(host, o) for o in offsets
    ]


@pytest.mark.parametrize("count", [0, 1, 1023, 1024, 1025, 2500])
def test_offset_msg_ids_of_long_batches(count: int) -> None:
    offsets = [i * 4099 for i in range(count)]
    for host in HOSTS:
        ids = create_offset_msg_ids(encode_host(host), offsets)
        assert ids == [create_offset_msg_id(host, o) for o in offsets]


def test_reserve_reuses_the_head_within_a_millisecond_only() -> None:
    clock = FakeClock(T0)
    twin_clock = FakeClock(T0)
    gen = UniqKeyGenerator(ip="10.0.0.1", pid=1, clock=clock)
    twin = UniqKeyGenerator(ip="10.0.0.1", pid=1, clock=twin_clock)
    head, first = gen.reserve(2)
    again, second = gen.reserve(1)
    assert again is head and (first, second) == (0, 2)
    clock.advance(1)
    later, third = gen.reserve(1)
    assert later != head and third == 3
    expected = [twin.next_id() for _ in range(3)]
    twin_clock.advance(1)
    expected.append(twin.next_id())
    assert [head + "0000", head + "0001", again + "0002", later + "0003"] == expected


def test_append_counts_bytes_whatever_the_buffer_format(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / "00000000000000000000", 64)
    try:
        assert mf.append(b"abc") == 0
        wide = array("q", [1, 2])  # 2 items, 16 bytes
        assert mf.append(wide) == 3
        assert mf.wrote_position == 19
        assert mf.read(3, 16) == wide.tobytes()
    finally:
        mf.close()


@pytest.mark.parametrize(
    "bad",
    [
        Message("T", b"x", tags="A\x02B", keys="k"),  # tags and keys: the inlined encoding
        Message("T", b"x", tags="A", keys="k\x02"),
        Message("T", b"x", tags="A", keys=["k", "j\x02"]),
    ],
)
def test_a_separator_in_tags_or_keys_raises_and_writes_nothing(
    tmp_path: Path, bad: Message
) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        store.put_message(Message("T", b"validates the topic"))
        end = store.commit_log.max_offset
        with pytest.raises(MessageIllegalError) as info:
            store.put_messages([Message("T", b"ok", tags="A", keys="k"), bad])
        assert info.value.rule == "separator"
        assert store.commit_log.max_offset == end


def test_a_message_the_plain_loop_cannot_type_goes_the_general_way(tmp_path: Path) -> None:
    # A tag that is not a str fails the plain loop's separator test (TypeError): the batch
    # takes the general path, which formats it as encode_message_properties always did.
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        store.put_message(Message("T", b"validates the topic"))
        odd = Message("T", b"x", tags=7, keys="k")  # type: ignore[arg-type]
        [plain, result] = store.put_messages([Message("T", b"ok", tags="A", keys="k"), odd])
        assert (plain.queue_offset, result.queue_offset) == (1, 2)
        raw = store.commit_log.read(result.phys_offset, result.wrote_bytes)
        assert raw is not None
        record = decode_record(raw, 0)
        assert record.properties["TAGS"] == "7"
        assert record.properties["UNIQ_KEY"] == result.msg_id
        assert result.offset_msg_id == create_offset_msg_id(SMALL.store_host, result.phys_offset)
