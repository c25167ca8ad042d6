"""CommitLog record codec (spec 1.1-1.5, 3.1, 5.5, 6.1) against the spec's tables."""

from __future__ import annotations

import dataclasses
import mmap
import struct
import zlib
from collections.abc import Callable
from ipaddress import IPv4Address, IPv6Address
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.errors import CorruptRecordError, MessageIllegalError, ValidationError
from mqcore.format import record as F
from mqcore.format.body_crc import body_crc
from mqcore.format.hashing import java_string_hash
from mqcore.format.msgid import HostAddress, encode_host
from mqcore.format.properties import decode_properties, encode_properties
from mqcore.format.record import (
    Blank,
    Corrupt,
    DispatchRequest,
    NeedMore,
    Valid,
    check_record,
    decode_dispatch,
    decode_record,
    encode_blank,
    encode_record,
    parse_delay_levels,
    record_size,
)
from mqcore.message import MessageExt

BORN = HostAddress("192.168.0.10", 54321)
STORE = HostAddress("10.0.0.5", 10911)
BORN6 = HostAddress("2001:db8::10", 54321)
STORE6 = HostAddress("2001:db8::5", 10911)
PROPS = {
    "KEYS": "order-1 customer-2",
    "UNIQ_KEY": "C0A8000130391B6D35860A1B2C3D0001",
    "TAGS": "TagA",
}


def fields(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict(
        topic="TopicTest",
        queue_id=3,
        flag=7,
        queue_offset=1234,
        phys_offset=1 << 30,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        born_host=BORN,
        store_timestamp=1_700_000_000_123,
        store_host=STORE,
        reconsume_times=2,
        prepared_transaction_offset=99,
        body=b"Hello RocketMQ",
        properties=encode_properties(PROPS),
    )
    values.update(overrides)
    return values


def record(**overrides: Any) -> bytes:
    return encode_record(**fields(**overrides))


def buffers(data: bytes) -> list[Any]:
    """The same bytes as every buffer type the decoders accept."""
    mapped = mmap.mmap(-1, max(len(data), 1))
    mapped[: len(data)] = data
    return [data, bytearray(data), memoryview(data), mapped]


# --- constants ---------------------------------------------------------------------------------


def test_magic_codes_and_constants() -> None:
    assert F.MESSAGE_MAGIC_CODE == F.MESSAGE_MAGIC_CODE_V1 == -626843481
    assert F.MESSAGE_MAGIC_CODE & 0xFFFFFFFF == 0xDAA320A7
    assert F.MESSAGE_MAGIC_CODE_V2 == -626843477
    assert F.MESSAGE_MAGIC_CODE_V2 & 0xFFFFFFFF == 0xDAA320AB
    assert F.BLANK_MAGIC_CODE == -875286124
    assert F.BLANK_MAGIC_CODE & 0xFFFFFFFF == 0xCBD43194
    assert F.END_FILE_MIN_BLANK_LENGTH == 8
    assert F.CRC32_RESERVED_LEN == 20
    assert F.MIN_RECORD_SIZE == 91
    assert F.PHYS_OFFSET_POSITION == 28
    assert F.store_timestamp_position(0) == 56
    assert F.store_timestamp_position(F.BORNHOST_V6_FLAG) == 68


def test_sysflag_helpers() -> None:
    assert F.transaction_type(0x4 | 0x1) == F.TRANSACTION_PREPARED_TYPE
    assert F.reset_transaction_type(0x4 | 0x1, F.TRANSACTION_COMMIT_TYPE) == 0x9
    assert F.reset_transaction_type(0xC, F.TRANSACTION_NOT_TYPE) == 0
    assert F.born_host_is_v6(0x10) and not F.born_host_is_v6(0x20)
    assert F.store_host_is_v6(0x20) and not F.store_host_is_v6(0x10)
    assert F.compression_type(0x1) == F.COMPRESSION_ZLIB  # legacy: type bits 0
    assert F.compression_type(0x1 | 0x100) == F.COMPRESSION_LZ4
    assert F.compression_type(0x1 | 0x200) == F.COMPRESSION_ZSTD


# --- layout (spec 1.2 field offsets) -----------------------------------------------------------


def test_v1_ipv4_field_offsets() -> None:
    data = record()
    body, topic, props = b"Hello RocketMQ", b"TopicTest", encode_properties(PROPS)

    def at(fmt: str, offset: int) -> Any:
        return struct.unpack_from(">" + fmt, data, offset)[0]

    assert at("i", 0) == len(data) == 91 + len(body) + len(topic) + len(props)
    assert at("i", 4) == F.MESSAGE_MAGIC_CODE
    assert at("i", 8) == body_crc(body) == 1774740973
    assert at("i", 12) == 3
    assert at("i", 16) == 7
    assert at("q", 20) == 1234
    assert at("q", 28) == 1 << 30
    assert at("i", 36) == 0
    assert at("q", 40) == 1_700_000_000_000
    assert data[48:56] == bytes([192, 168, 0, 10]) + (54321).to_bytes(4, "big")
    assert at("q", 56) == 1_700_000_000_123
    assert data[64:72] == bytes([10, 0, 0, 5]) + (10911).to_bytes(4, "big")
    assert at("i", 72) == 2
    assert at("q", 76) == 99
    assert at("i", 84) == len(body)
    assert data[88 : 88 + len(body)] == body
    t = 88 + len(body)
    assert data[t] == len(topic) and data[t + 1 : t + 1 + len(topic)] == topic
    p = t + 1 + len(topic)
    assert at("h", p) == len(props) and data[p + 2 :] == props


@pytest.mark.parametrize(
    ("born", "store", "sys_flag", "store_ts_at", "reconsume_at"),
    [
        (BORN6, STORE, 0x10, 68, 84),
        (BORN, STORE6, 0x20, 56, 84),
        (BORN6, STORE6, 0x30, 68, 96),
    ],
)
def test_ipv6_hosts_shift_offsets(
    born: HostAddress, store: HostAddress, sys_flag: int, store_ts_at: int, reconsume_at: int
) -> None:
    data = record(born_host=born, store_host=store, sys_flag=0x1)
    assert struct.unpack_from(">i", data, 36)[0] == sys_flag | 0x1
    assert struct.unpack_from(">q", data, store_ts_at)[0] == 1_700_000_000_123
    assert struct.unpack_from(">i", data, reconsume_at)[0] == 2
    assert len(data) == record_size(14, 9, len(encode_properties(PROPS)), sys_flag=sys_flag)
    born_width = 20 if sys_flag & 0x10 else 8
    assert data[48 : 48 + born_width] == encode_host(born)
    store_at = store_ts_at + 8
    assert data[store_at:reconsume_at] == encode_host(store)
    message = decode_record(data, 0)
    assert (message.born_host, message.store_host) == (born, store)


def test_ipv6_bits_are_cleared_for_ipv4_hosts() -> None:
    data = record(sys_flag=0x30 | 0x8)
    assert struct.unpack_from(">i", data, 36)[0] == 0x8


def test_v2_for_long_topic() -> None:
    topic = "T" * 200
    data = record(topic=topic)
    assert struct.unpack_from(">i", data, 4)[0] == F.MESSAGE_MAGIC_CODE_V2
    t = 88 + 14
    assert struct.unpack_from(">h", data, t)[0] == 200
    assert data[t + 2 : t + 202] == topic.encode()
    assert len(data) == 92 + 14 + 200 + len(encode_properties(PROPS))
    assert len(data) == record_size(14, 200, len(encode_properties(PROPS)), v2=True)
    assert decode_record(data, 0).topic == topic
    assert decode_record(data, 0).magic_code == F.MESSAGE_MAGIC_CODE_V2
    dispatch = decode_dispatch(data, 0, len(data))
    assert isinstance(dispatch, DispatchRequest) and dispatch.topic == topic


def test_version_chosen_by_utf8_length() -> None:
    assert struct.unpack_from(">i", record(topic="T" * 127), 4)[0] == F.MESSAGE_MAGIC_CODE
    assert struct.unpack_from(">i", record(topic="T" * 128), 4)[0] == F.MESSAGE_MAGIC_CODE_V2
    # 43 three-byte characters = 129 bytes: V2 although only 43 characters
    data = record(topic="标" * 43)
    assert struct.unpack_from(">i", data, 4)[0] == F.MESSAGE_MAGIC_CODE_V2
    assert decode_record(data, 0).topic == "标" * 43


def test_record_size_formula() -> None:
    assert record_size(0, 0, 0) == 91
    assert record_size(100, 9, 50) == 91 + 159
    assert record_size(0, 0, 0, v2=True) == 92
    assert record_size(0, 0, 0, sys_flag=0x10) == 103
    assert record_size(0, 0, 0, sys_flag=0x20) == 103
    assert record_size(0, 0, 0, sys_flag=0x30, v2=True) == 116
    assert record_size(0, 0, 0, sys_flag=0x1 | 0x4) == 91  # other bits do not matter


def test_empty_body_and_no_properties() -> None:
    data = record(body=b"", properties=b"")
    assert len(data) == 91 + 9
    assert struct.unpack_from(">i", data, 8)[0] == 0
    assert check_record(data, 0, len(data)) == Valid(len(data), 1 << 30, 1_700_000_000_123)
    message = decode_record(data, 0)
    assert message.body == b"" and message.properties == {}


# --- independent check: a record built by hand from the spec table -----------------------------


def hand_built_record() -> bytes:
    """Built field by field from spec 1.2 with plain struct calls, not with the encoder."""
    body = b"123456789"
    topic = "标签Topic".encode()
    props = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02"
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 20 + 8 + 8 + 4 + 8 + 4 + 9 + 1 + len(topic) + 2
    total += len(props)
    parts = [
        struct.pack(">i", total),  # TOTALSIZE
        struct.pack(">I", 0xDAA320A7),  # MAGICCODE V1
        struct.pack(">i", 1274296614),  # BODYCRC: masked CRC of b"123456789"
        struct.pack(">i", 5),  # QUEUEID
        struct.pack(">i", -1),  # FLAG
        struct.pack(">q", 77),  # QUEUEOFFSET
        struct.pack(">q", 4096),  # PHYSICALOFFSET
        struct.pack(">i", 0x10 | 0x8),  # SYSFLAG: IPv6 born host, commit
        struct.pack(">q", 1_600_000_000_000),  # BORNTIMESTAMP
        bytes.fromhex("20010db8000000000000000000000001") + struct.pack(">i", 40000),
        struct.pack(">q", 1_600_000_000_500),  # STORETIMESTAMP
        bytes([127, 0, 0, 1]) + struct.pack(">i", 10911),  # STOREHOST (IPv4)
        struct.pack(">i", 1),  # RECONSUMETIMES
        struct.pack(">q", 2048),  # PREPARED_TRANSACTION_OFFSET
        struct.pack(">i", len(body)),
        body,
        struct.pack(">b", len(topic)),
        topic,
        struct.pack(">h", len(props)),
        props,
    ]
    data = b"".join(parts)
    assert len(data) == total
    return data


def test_decode_hand_built_record() -> None:
    data = hand_built_record()
    message = decode_record(data, 0)
    assert message == MessageExt(
        store_size=len(data),
        magic_code=-626843481,
        body_crc=1274296614,
        queue_id=5,
        flag=-1,
        queue_offset=77,
        phys_offset=4096,
        sys_flag=0x18,
        born_timestamp=1_600_000_000_000,
        born_host=HostAddress("2001:db8::1", 40000),
        store_timestamp=1_600_000_000_500,
        store_host=HostAddress("127.0.0.1", 10911),
        reconsume_times=1,
        prepared_transaction_offset=2048,
        body=b"123456789",
        topic="标签Topic",
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"},
    )
    assert check_record(data, 0, len(data)) == Valid(len(data), 4096, 1_600_000_000_500)
    dispatch = decode_dispatch(data, 0, len(data))
    assert dispatch == DispatchRequest(
        topic="标签Topic",
        queue_id=5,
        queue_offset=77,
        phys_offset=4096,
        size=len(data),
        tags_code=2598919,
        store_timestamp=1_600_000_000_500,
        keys="k1 k2",
        uniq_key="ABC",
        sys_flag=0x18,
        prepared_transaction_offset=2048,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"},
    )


def test_encoder_reproduces_hand_built_record() -> None:
    data = hand_built_record()
    assert (
        encode_record(
            topic="标签Topic",
            queue_id=5,
            flag=-1,
            queue_offset=77,
            phys_offset=4096,
            sys_flag=0x8,
            born_timestamp=1_600_000_000_000,
            born_host=HostAddress("2001:db8::1", 40000),
            store_timestamp=1_600_000_000_500,
            store_host=HostAddress("127.0.0.1", 10911),
            reconsume_times=1,
            prepared_transaction_offset=2048,
            body=b"123456789",
            properties=b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02",
        )
        == data
    )


# --- blank record ------------------------------------------------------------------------------


def test_blank_record() -> None:
    blank = encode_blank(1000)
    assert blank == struct.pack(">ii", 1000, -875286124)
    assert encode_blank(8) == struct.pack(">ii", 8, -875286124)
    with pytest.raises(ValueError):
        encode_blank(7)
    tail = blank + bytes(992)
    for buf in buffers(tail):
        assert check_record(buf, 0, len(tail)) == Blank()
        assert decode_dispatch(buf, 0, len(tail)) == Blank()
    # The size field is ignored, whatever it holds, and 8 bytes are enough.
    assert check_record(struct.pack(">ii", -5, F.BLANK_MAGIC_CODE), 0, 8) == Blank()
    with pytest.raises(CorruptRecordError, match="blank"):
        decode_record(tail, 0)


# --- check_record: failure kinds (spec 5.5) ----------------------------------------------------


def test_valid_on_every_buffer_type() -> None:
    data = b"\x00" * 5 + record() + b"\xff" * 3
    size = len(record())
    for buf in buffers(data):
        assert check_record(buf, 5, len(data)) == Valid(size, 1 << 30, 1_700_000_000_123)
        assert decode_record(buf, 5).store_size == size
        result = decode_dispatch(buf, 5, len(data))
        assert isinstance(result, DispatchRequest) and result.size == size


def test_truncated_record_needs_more() -> None:
    data = record()
    for cut in range(len(data)):
        needed = 8 if cut < 8 else len(data)
        for check in (check_record, decode_dispatch):
            assert check(data, 0, cut) == NeedMore(needed), cut
        with pytest.raises(CorruptRecordError, match="truncated"):
            decode_record(data[:cut], 0)
    assert check_record(data, 0, len(data)) == Valid(len(data), 1 << 30, 1_700_000_000_123)


def test_zero_filled_tail_is_corrupt_with_size_zero() -> None:
    zeros = bytes(4096)
    result = check_record(zeros, 0, len(zeros))
    assert isinstance(result, Corrupt) and result.size == 0
    assert "magic" in result.detail
    assert decode_dispatch(zeros, 0, len(zeros)) == result
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_record(zeros, 0)


def test_crc_mismatch() -> None:
    data = bytearray(record())
    data[88] ^= 0x01  # first body byte
    result = check_record(data, 0, len(data))
    assert isinstance(result, Corrupt) and result.size == 0 and "CRC" in result.detail
    assert isinstance(check_record(data, 0, len(data), check_crc=False), Valid)
    assert isinstance(decode_dispatch(data, 0, len(data)), DispatchRequest)  # reput: no CRC
    data = bytearray(record())
    data[8] ^= 0x40  # the stored CRC itself
    assert isinstance(check_record(data, 0, len(data)), Corrupt)


def test_length_mismatch_reports_totalsize() -> None:
    good = record()
    longer = bytearray(good + b"\x00" * 16)
    struct.pack_into(">i", longer, 0, len(good) + 16)
    for check in (check_record, decode_dispatch):
        result = check(longer, 0, len(longer))
        assert isinstance(result, Corrupt), result
        assert result.size == len(good) + 16 and "length mismatch" in result.detail
    with pytest.raises(CorruptRecordError, match="length mismatch"):
        decode_record(longer, 0)


@pytest.mark.parametrize(
    ("offset", "fmt", "value"),
    [
        (84, ">i", 15),  # BODYLENGTH one too many
        (84, ">i", 13),  # one too few
        (84, ">i", -1),  # negative
        (84, ">i", 1 << 20),  # past the record
        (88 + 14 + 1 + 9, ">h", 1),  # PROPERTIESLENGTH wrong
        (88 + 14 + 1 + 9, ">h", -3),  # negative
    ],
)
def test_field_lengths_not_adding_up(offset: int, fmt: str, value: int) -> None:
    data = bytearray(record())
    struct.pack_into(fmt, data, offset, value)
    for result in (
        check_record(data, 0, len(data), check_crc=False),
        decode_dispatch(data, 0, len(data)),
    ):
        assert isinstance(result, Corrupt) and result.size == len(data), result
    # With the CRC on, a body length that still fits changes the CRC'd bytes, and RocketMQ
    # checks the CRC before the formula: then it is a CRC failure (size 0).
    assert isinstance(check_record(data, 0, len(data)), Corrupt)


def test_negative_v1_topic_length_stops() -> None:
    data = bytearray(record())
    data[88 + 14] = 0x80  # -128 as a signed byte: Java throws, RocketMQ returns -1
    for check in (check_record, decode_dispatch):
        result = check(data, 0, len(data))
        assert isinstance(result, Corrupt) and result.size == 0


def test_impossible_totalsize_stops() -> None:
    data = bytearray(record())
    for total in (0, -1, 10, 90):
        struct.pack_into(">i", data, 0, total)
        result = check_record(data, 0, len(data))
        assert isinstance(result, Corrupt) and result.size == 0


def test_huge_totalsize_needs_more() -> None:
    data = bytearray(record())
    struct.pack_into(">i", data, 0, 2**31 - 1)
    assert check_record(data, 0, len(data)) == NeedMore(2**31 - 1)


def test_walk_a_segment() -> None:
    """Records, a blank, then zeros: what reput and recovery see at the end of a file."""
    records = [record(queue_offset=i, phys_offset=0) for i in range(5)]
    used = sum(map(len, records))
    segment = b"".join(records) + encode_blank(1024 - used) + bytes(1024 - used - 8)
    pos, offsets = 0, []
    while True:
        result = decode_dispatch(segment, pos, len(segment))
        if not isinstance(result, DispatchRequest):
            break
        offsets.append(result.queue_offset)
        pos += result.size
    assert offsets == [0, 1, 2, 3, 4] and pos == used and result == Blank()


# --- decode_record / decode_dispatch content ---------------------------------------------------


def test_decode_record_fields() -> None:
    data = record()
    message = decode_record(data, 0)
    assert message.store_size == len(data)
    assert message.magic_code == F.MESSAGE_MAGIC_CODE
    assert message.body_crc == body_crc(b"Hello RocketMQ")
    assert (message.queue_id, message.flag, message.queue_offset) == (3, 7, 1234)
    assert (message.phys_offset, message.sys_flag) == (1 << 30, 0)
    assert (message.born_timestamp, message.born_host) == (1_700_000_000_000, BORN)
    assert (message.store_timestamp, message.store_host) == (1_700_000_000_123, STORE)
    assert (message.reconsume_times, message.prepared_transaction_offset) == (2, 99)
    assert (message.body, message.topic, message.properties) == (
        b"Hello RocketMQ",
        "TopicTest",
        PROPS,
    )
    assert decode_record(data, 0, read_body=False).body == b""
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.topic = "x"  # type: ignore[misc]
    assert type(message) is MessageExt


def test_decode_record_limit_and_file_name() -> None:
    data = record()
    with pytest.raises(CorruptRecordError) as info:
        decode_record(data, 0, limit=50, file="00000000000000000000")
    assert info.value.file == "00000000000000000000" and info.value.position == 0


def test_decode_dispatch_fields() -> None:
    data = record()
    result = decode_dispatch(data, 0, len(data))
    assert isinstance(result, DispatchRequest) and type(result) is DispatchRequest
    assert result == DispatchRequest(
        topic="TopicTest",
        queue_id=3,
        queue_offset=1234,
        phys_offset=1 << 30,
        size=len(data),
        tags_code=java_string_hash("TagA"),
        store_timestamp=1_700_000_000_123,
        keys="order-1 customer-2",
        uniq_key=PROPS["UNIQ_KEY"],
        sys_flag=0,
        prepared_transaction_offset=99,
        properties=PROPS,
    )
    assert result.transaction_type == F.TRANSACTION_NOT_TYPE
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.size = 1  # type: ignore[misc]


def test_dispatch_without_properties() -> None:
    data = record(properties=b"", sys_flag=F.TRANSACTION_PREPARED_TYPE)
    result = decode_dispatch(data, 0, len(data))
    assert isinstance(result, DispatchRequest)
    assert (result.tags_code, result.keys, result.uniq_key, result.properties) == (
        0,
        None,
        None,
        {},
    )
    assert result.transaction_type == F.TRANSACTION_PREPARED_TYPE


def test_dispatch_tag_codes_are_java_hashes() -> None:
    for tags in ("TagA", "标签", "😀", "t" * 40):
        data = record(properties=encode_properties({"TAGS": tags}))
        result = decode_dispatch(data, 0, len(data))
        assert isinstance(result, DispatchRequest) and result.tags_code == java_string_hash(tags)
    data = record(properties=encode_properties({"TAGS": ""}))
    result = decode_dispatch(data, 0, len(data))
    assert isinstance(result, DispatchRequest) and result.tags_code == 0


@pytest.mark.parametrize(
    ("delay", "expected_extra_ms"),
    [
        ("1", 1000),
        ("3", 10_000),
        ("18", 7_200_000),
        ("99", 7_200_000),  # clamped to the highest level
        ("+2", 5000),  # Integer.parseInt accepts a sign
        ("0", None),
        ("-1", None),
        ("abc", None),  # Java throws here; we keep the tag hash
        ("", None),
    ],
)
def test_schedule_topic_tag_code_is_deliver_time(delay: str, expected_extra_ms: int | None) -> None:
    props = {"TAGS": "TagA", "DELAY": delay, "REAL_TOPIC": "T", "REAL_QID": "0"}
    data = record(topic=F.SCHEDULE_TOPIC, properties=encode_properties(props))
    result = decode_dispatch(data, 0, len(data))
    assert isinstance(result, DispatchRequest)
    if expected_extra_ms is None:
        assert result.tags_code == java_string_hash("TagA")
    else:
        assert result.tags_code == 1_700_000_000_123 + expected_extra_ms


def test_delay_only_applies_to_schedule_topic() -> None:
    data = record(properties=encode_properties({"TAGS": "TagA", "DELAY": "3"}))
    result = decode_dispatch(data, 0, len(data))
    assert isinstance(result, DispatchRequest) and result.tags_code == 2598919


def test_custom_delay_levels() -> None:
    levels = parse_delay_levels("2s 1d")
    data = record(topic=F.SCHEDULE_TOPIC, properties=encode_properties({"DELAY": "5"}))
    result = decode_dispatch(data, 0, len(data), delay_levels_ms=levels)
    assert (
        isinstance(result, DispatchRequest) and result.tags_code == 1_700_000_000_123 + 86_400_000
    )


def test_parse_delay_levels() -> None:
    assert F.DEFAULT_DELAY_LEVELS_MS == (
        1000, 5000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
        420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
    )  # fmt: skip
    assert parse_delay_levels(F.DEFAULT_DELAY_LEVELS) == F.DEFAULT_DELAY_LEVELS_MS
    assert parse_delay_levels(" 1s 2m 3h 4d ") == (1000, 120_000, 10_800_000, 345_600_000)
    for bad in ("", "1x", "s", "1s  2s", "1.5s", "1S", "１s"):
        with pytest.raises(ValidationError) as info:
            parse_delay_levels(bad)
        assert (info.value.field, info.value.rule) == ("messageDelayLevel", "format")


# --- encoder errors ----------------------------------------------------------------------------


def test_encode_rejects_oversized_properties() -> None:
    with pytest.raises(MessageIllegalError) as info:
        record(properties=b"x" * 32768)
    assert (info.value.field, info.value.rule) == ("properties", "max_size")
    assert len(record(properties=b"a\x01" + b"x" * 32764 + b"\x02")) > 32767


def test_encode_rejects_out_of_range_fields() -> None:
    with pytest.raises(MessageIllegalError) as info:
        record(queue_id=2**31)
    assert info.value.rule == "field_range"
    with pytest.raises(MessageIllegalError):
        record(queue_offset=2**63)


def test_encode_rejects_bad_topics() -> None:
    with pytest.raises(MessageIllegalError) as info:
        record(topic="a\ud800")
    assert info.value.rule == "utf8"
    with pytest.raises(MessageIllegalError) as info:
        record(topic="t" * 32768)
    assert info.value.rule == "max_length"


def test_encode_rejects_bad_hosts() -> None:
    with pytest.raises(ValidationError):
        record(born_host=HostAddress("nope", 1))


# --- property-based round trips ----------------------------------------------------------------

_prop_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=20
)


def _not_ipv4_mapped(address: IPv4Address | IPv6Address) -> bool:
    return not (isinstance(address, IPv6Address) and address.ipv4_mapped is not None)


_hosts = st.builds(
    HostAddress,
    st.ip_addresses(v=4).map(str) | st.ip_addresses(v=6).filter(_not_ipv4_mapped).map(str),
    st.integers(0, 65535),
)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_records = st.fixed_dictionaries(
    {
        "topic": st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
        "queue_id": _int32,
        "flag": _int32,
        "queue_offset": _int64,
        "phys_offset": _int64,
        "sys_flag": _int32,
        "born_timestamp": _int64,
        "born_host": _hosts,
        "store_timestamp": _int64,
        "store_host": _hosts,
        "reconsume_times": _int32,
        "prepared_transaction_offset": _int64,
        "body": st.binary(max_size=300),
        "properties": st.dictionaries(_prop_text, _prop_text, max_size=6),
    }
)


@given(_records)
def test_record_round_trip(values: dict[str, Any]) -> None:
    props = values["properties"]
    values = dict(values, properties=encode_properties(props))
    data = encode_record(**values)
    topic_bytes = values["topic"].encode()
    v6_flags = (0x10 if ":" in values["born_host"].ip else 0) | (
        0x20 if ":" in values["store_host"].ip else 0
    )
    sys_flag = (values["sys_flag"] & ~0x30) | v6_flags
    assert len(data) == record_size(
        len(values["body"]),
        len(topic_bytes),
        len(values["properties"]),
        sys_flag=sys_flag,
        v2=len(topic_bytes) > 127,
    )
    message = decode_record(data, 0)
    for name in values:
        if name not in ("properties", "sys_flag"):
            assert getattr(message, name) == values[name], name
    assert message.sys_flag == sys_flag
    assert message.properties == props
    assert message.body_crc == zlib.crc32(values["body"]) & 0x7FFFFFFF
    assert check_record(data, 0, len(data)) == Valid(
        len(data), values["phys_offset"], values["store_timestamp"]
    )
    dispatch = decode_dispatch(data, 0, len(data))
    assert isinstance(dispatch, DispatchRequest)
    assert dispatch == F._decode_dispatch_general(data, 0, len(data), F.DEFAULT_DELAY_LEVELS_MS)
    assert (dispatch.topic, dispatch.size, dispatch.properties) == (
        values["topic"],
        len(data),
        props,
    )
    assert (dispatch.keys, dispatch.uniq_key) == (props.get("KEYS"), props.get("UNIQ_KEY"))


@given(_records, st.integers(0, 400), st.integers(0, 255))
def test_corruption_never_raises_and_matches_general_path(
    values: dict[str, Any], index: int, xor: int
) -> None:
    """Any single-byte change gives a result kind (never an exception), same on both paths."""
    values = dict(values, properties=encode_properties(values["properties"]))
    data = bytearray(encode_record(**values))
    index %= len(data)
    data[index] ^= xor
    fast = decode_dispatch(data, 0, len(data))
    assert fast == F._decode_dispatch_general(data, 0, len(data), F.DEFAULT_DELAY_LEVELS_MS)
    checked = check_record(data, 0, len(data), check_crc=False)
    assert type(checked) is (Valid if isinstance(fast, DispatchRequest) else type(fast))
    if isinstance(fast, Corrupt | NeedMore | Blank):
        assert checked == fast


@given(st.binary(max_size=200))
def test_garbage_never_raises(data: bytes) -> None:
    check: Callable[..., object]
    for check in (check_record, decode_dispatch):
        result = check(data, 0, len(data))
        assert isinstance(result, Valid | Blank | NeedMore | Corrupt | DispatchRequest)
        if isinstance(result, Corrupt):
            assert result.size >= 0


def test_decode_properties_agrees_with_dispatch() -> None:
    raw = b"a\x011\x02\x01x\x02b\x01\x02c\x01\x01\x02"
    data = record(properties=raw)
    result = decode_dispatch(data, 0, len(data))
    assert isinstance(result, DispatchRequest)
    assert result.properties == decode_properties(raw) == {"a": "1", "c": "\x01"}
    assert decode_record(data, 0).properties == decode_properties(raw)
