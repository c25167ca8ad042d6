"""The producer journal and snapshot formats, sans I/O: round trips, torn tails, damage."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_listener.producer_journal import (
    ENTRY_HEAD,
    FILE_HEAD,
    JOURNAL_MAGIC,
    SNAPSHOT_MAGIC,
    Abandoned,
    Batch,
    End,
    Entry,
    IdsIssued,
    Intent,
    JournalFormatError,
    decode_entries,
    decode_file_head,
    decode_snapshot,
    encode_entry,
    encode_file_head,
    encode_snapshot,
)

i64 = st.integers(-(2**63), 2**63 - 1)
u64 = st.integers(0, 2**64 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i16 = st.integers(-(2**15), 2**15 - 1)
u31 = st.integers(0, 2**31 - 1)
topics = st.text(min_size=1, max_size=60)

batches = st.builds(
    Batch,
    intent_id=u64,
    producer_id=i64,
    epoch=i16,
    partition=i32,
    first_sequence=i32,
    record_count=i32,
    base_offset=i64,
    first_phys=i64,
    log_end=i64,
    topic=topics,
)
intents = st.builds(
    Intent,
    intent_id=u64,
    producer_id=i64,
    epoch=i16,
    partition=i32,
    first_sequence=i32,
    record_count=i32,
    log_start=i64,
    first_crc=u31,
    last_crc=u31,
    topic=topics,
    born_host=st.binary(max_size=20),
)
entries = st.one_of(
    batches,
    intents,
    st.builds(IdsIssued, i64),
    st.builds(Abandoned, u64),
)

BATCH = Batch(7, 99, 0, 3, 10, 5, 120, 4096, 9000, "shop|orders")
INTENT = Intent(
    8, 99, 0, 3, 15, 2, 9000, 123, 456, "shop|orders", b"\x7f\x00\x00\x01\x00\x00\x04\xd2"
)


def journal(*items: Entry) -> bytes:
    return encode_file_head(JOURNAL_MAGIC, 3) + b"".join(map(encode_entry, items))


@given(st.lists(entries, max_size=20))
def test_entries_round_trip(items: list[Entry]) -> None:
    data = journal(*items)
    decoded = decode_entries(data, FILE_HEAD.size)
    assert decoded.entries == items and decoded.damage is None and decoded.end == len(data)


def test_file_head() -> None:
    assert decode_file_head(encode_file_head(JOURNAL_MAGIC, 42), JOURNAL_MAGIC) == 42
    with pytest.raises(JournalFormatError, match="magic"):
        decode_file_head(encode_file_head(SNAPSHOT_MAGIC, 1), JOURNAL_MAGIC)
    with pytest.raises(JournalFormatError, match="version 9"):
        decode_file_head(FILE_HEAD.pack(JOURNAL_MAGIC, 9, 1), JOURNAL_MAGIC)
    with pytest.raises(JournalFormatError, match="shorter"):
        decode_file_head(b"CKPJ", JOURNAL_MAGIC)


def test_every_cut_of_the_last_entry_is_a_torn_tail() -> None:
    data = journal(BATCH, INTENT)
    last_start = len(journal(BATCH))
    for cut in range(last_start, len(data)):
        decoded = decode_entries(data[:cut], FILE_HEAD.size)
        assert decoded.entries == [BATCH] and decoded.damage is None, cut
        assert decoded.end == last_start and decoded.torn_bytes == cut - last_start


def test_zeros_after_the_entries_are_a_clean_end() -> None:
    decoded = decode_entries(journal(BATCH) + bytes(100), FILE_HEAD.size)
    assert decoded.entries == [BATCH] and decoded.damage is None and decoded.torn_bytes == 100


def test_a_bad_crc_on_the_last_entry_is_a_torn_write_elsewhere_damage() -> None:
    data = bytearray(journal(BATCH, INTENT))
    data[-1] ^= 1  # the last entry's pages reached the disk in part
    torn = decode_entries(bytes(data), FILE_HEAD.size)
    assert torn.entries == [BATCH] and torn.damage is None
    data = bytearray(journal(BATCH, INTENT, Abandoned(8)))
    data[FILE_HEAD.size + ENTRY_HEAD.size + 5] ^= 1  # inside the first entry
    damaged = decode_entries(bytes(data), FILE_HEAD.size)
    assert (
        damaged.entries == [] and damaged.damage == f"entry at byte {FILE_HEAD.size}: CRC mismatch"
    )


def test_garbage_after_the_entries_is_damage() -> None:
    decoded = decode_entries(journal(BATCH) + struct.pack(">II", 0, 5) + b"abc", FILE_HEAD.size)
    assert decoded.entries == [BATCH] and decoded.damage is not None


def test_an_entry_of_an_unknown_kind_is_damage_not_skipped() -> None:
    payload = b"\x63" + bytes(8)
    import zlib

    data = journal(BATCH) + ENTRY_HEAD.pack(len(payload), zlib.crc32(payload)) + payload
    decoded = decode_entries(data + journal(BATCH)[FILE_HEAD.size :], FILE_HEAD.size)
    assert decoded.entries == [BATCH] and "unknown entry kind 99" in str(decoded.damage)


def test_snapshot_round_trip_and_completeness() -> None:
    items: list[Entry] = [IdsIssued(1 << 40), BATCH, INTENT]
    data = encode_snapshot(5, items)
    assert decode_snapshot(data) == (5, items)
    end = encode_entry(End(3))
    with pytest.raises(JournalFormatError, match="incomplete"):
        decode_snapshot(data[: -len(end)])  # cut at an entry boundary: no END
    with pytest.raises(JournalFormatError):
        decode_snapshot(data[:-3])
    with pytest.raises(JournalFormatError, match="after the END"):
        decode_snapshot(data + encode_entry(BATCH))
    flipped = bytearray(data)
    flipped[FILE_HEAD.size + 10] ^= 0x40
    with pytest.raises(JournalFormatError, match="CRC"):
        decode_snapshot(bytes(flipped))
    with pytest.raises(JournalFormatError, match="magic"):
        decode_snapshot(journal(BATCH))
