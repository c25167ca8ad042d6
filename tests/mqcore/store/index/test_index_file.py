"""IndexFile: byte layout, putKey and selectPhyOffset as RocketMQ does them (spec section 4)."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mqcore.errors import CorruptIndexError, StoreClosedError, StoreNotWritableError
from mqcore.store.index.index_file import (
    ENTRY,
    ENTRY_FIELD_OFFSETS,
    ENTRY_RESERVE_BYTES,
    HEADER,
    HEADER_FIELD_OFFSETS,
    SLOT,
    IndexFile,
    index_file_size,
)

T0 = 1_700_000_000_000  # a store timestamp (ms)


# ---------------------------------------------------------------- independent oracles


def java_hash(s: str) -> int:
    """Java String.hashCode, straight from spec section 0 (signed int32)."""
    b = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + (b[i] << 8 | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def key_hash(s: str) -> int:
    h = java_hash(s)
    return 0 if h == -(2**31) else abs(h)


def be(value: int, width: int) -> bytes:
    return value.to_bytes(width, "big", signed=True)


def header_bytes(
    begin_ts: int, end_ts: int, begin_phys: int, end_phys: int, slots: int, count: int
) -> bytes:
    return (
        be(begin_ts, 8)
        + be(end_ts, 8)
        + be(begin_phys, 8)
        + be(end_phys, 8)
        + be(slots, 4)
        + be(count, 4)
    )


def entry_bytes(h: int, phys: int, time_diff: int, prev: int) -> bytes:
    return be(h, 4) + be(phys, 8) + be(time_diff, 4) + be(prev, 4)


def raw(path: Path) -> bytes:
    return path.read_bytes()


def new_file(tmp_path: Path, slots: int = 7, entries: int = 50, **kw: int) -> IndexFile:
    return IndexFile.create(str(tmp_path / "20240101120000123"), slots, entries, **kw)


# ---------------------------------------------------------------- the oracle itself


def test_oracle_matches_spec_vectors() -> None:
    assert java_hash("TagA") == 2598919
    assert java_hash("polygenelubricants") == -(2**31)
    assert java_hash("TopicTest#OrderID188") == -1231271670
    assert java_hash("标签") == 857175
    assert java_hash("😀") == 1772899


# ---------------------------------------------------------------- layout


def test_struct_sizes_and_field_offsets_match_spec() -> None:
    assert (HEADER.size, ENTRY.size, SLOT.size) == (40, 20, 4)
    assert HEADER_FIELD_OFFSETS == {
        "begin_timestamp": 0,
        "end_timestamp": 8,
        "begin_phys_offset": 16,
        "end_phys_offset": 24,
        "hash_slot_count": 32,
        "index_count": 36,
    }
    assert ENTRY_FIELD_OFFSETS == {
        "key_hash": 0,
        "phys_offset": 4,
        "time_diff": 12,
        "prev_index": 16,
    }


def test_fresh_file_size_and_header(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=10)
    path = Path(f.path)
    assert os.path.getsize(path) == 40 + 7 * 4 + 10 * 20 == index_file_size(7, 10)
    data = raw(path)
    assert data[:40] == header_bytes(0, 0, 0, 0, 0, 1)
    assert data[40:] == bytes(len(data) - 40)
    assert (f.index_count, f.hash_slot_count, f.begin_timestamp, f.end_timestamp) == (1, 0, 0, 0)
    assert not f.is_full
    f.close()


def test_first_put_bytes_at_exact_offsets(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=10)
    key = "TopicTest#OrderID188"
    assert f.put_key(key, 1234, T0)
    data = raw(Path(f.path))  # no flush: the shared mapping already holds every change
    h = key_hash(key)
    assert h == 1231271670
    slot = h % 7
    expected = bytearray(40 + 7 * 4 + 10 * 20)
    expected[0:40] = header_bytes(T0, T0, 1234, 1234, 1, 2)
    expected[40 + slot * 4 : 40 + slot * 4 + 4] = be(1, 4)
    entries = 40 + 7 * 4
    # entry 0 is never used: the first entry is entry 1, and its time_diff is 0.
    expected[entries + 20 : entries + 40] = entry_bytes(h, 1234, 0, 0)
    assert data == bytes(expected)
    f.close()


def test_second_put_same_slot_links_chain_and_time_diff(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=1, entries=10)  # one slot: everything collides
    f.put_key("T#a", 100, T0)
    f.put_key("T#b", 200, T0 + 2_999)  # 2.999 s -> 2
    f.put_key("T#c", 300, T0 - 5_000)  # before begin -> clamped to 0
    f.flush()
    data = raw(Path(f.path))
    assert data[:40] == header_bytes(T0, T0 - 5_000, 100, 300, 1, 4)
    assert data[40:44] == be(3, 4)
    base = 44
    assert data[base + 20 : base + 40] == entry_bytes(key_hash("T#a"), 100, 0, 0)
    assert data[base + 40 : base + 60] == entry_bytes(key_hash("T#b"), 200, 2, 1)
    assert data[base + 60 : base + 80] == entry_bytes(key_hash("T#c"), 300, 0, 2)
    assert f.hash_slot_count == 1  # only the first put found the slot empty
    f.close()


def test_time_diff_clamped_to_int_max(tmp_path: Path) -> None:
    f = new_file(tmp_path)
    f.put_key("k", 1, T0)
    f.put_key("k", 2, T0 + (2**31 + 5) * 1000)
    assert f.entry(2).time_diff == 2**31 - 1
    f.close()


def test_default_size_file_spec_vectors(tmp_path: Path) -> None:
    # The one full-size file of the suite: 420,000,040 bytes, sparse.
    path = tmp_path / "20240101120000123"
    f = IndexFile.create(str(path), 5_000_000, 20_000_000)
    assert os.path.getsize(path) == 420_000_040
    assert f.put_key("polygenelubricants", 10, T0)
    assert f.put_key("TopicTest#OrderID188", 20, T0 + 1000)
    f.flush()
    entries = 40 + 5_000_000 * 4
    assert entries == 20_000_040
    with open(path, "rb") as fh:
        fh.seek(40)
        assert fh.read(4) == be(1, 4)  # "polygenelubricants" -> hash MIN_VALUE -> 0 -> slot 0
        fh.seek(40 + 1_271_670 * 4)
        assert fh.read(4) == be(2, 4)
        fh.seek(entries + 20)
        assert fh.read(40) == entry_bytes(0, 10, 0, 0) + entry_bytes(1231271670, 20, 1, 0)
        fh.seek(0)
        assert fh.read(40) == header_bytes(T0, T0 + 1000, 10, 20, 2, 3)
    # Header, slot table and one chunk of entries reserved (space.py); the rest a hole.
    assert os.stat(path).st_blocks * 512 < 20_000_040 + 2 * ENTRY_RESERVE_BYTES
    assert f.select_phys_offsets("TopicTest#OrderID188", 10, 0, 2**62) == [20]
    assert f.select_phys_offsets("polygenelubricants", 10, 0, 2**62) == [10]
    f.destroy()
    assert not path.exists()


# ---------------------------------------------------------------- index count rule


def test_index_count_starts_at_one_and_zero_on_disk_reads_as_one(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=10)
    path = Path(f.path)
    f.close()
    data = bytearray(raw(path))
    data[36:40] = be(0, 4)  # RocketMQ leaves 0 here until the first put or flush
    path.write_bytes(bytes(data))
    g = IndexFile.open(str(path), 7, 10)
    assert g.index_count == 1
    assert g.select_phys_offsets("x", 5, 0, 2**62) == []
    g.put_key("x", 7, T0)
    assert g.entry(1) == g.entry(1)
    assert g.entry(1).phys_offset == 7
    assert g.entry(0).phys_offset == 0
    assert g.index_count == 2
    g.close()


def test_full_file_refuses_puts(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=3, entries=4)
    assert [f.put_key(f"k{i}", i, T0) for i in range(4)] == [True, True, True, False]
    assert f.is_full and f.index_count == 4
    assert f.end_phys_offset == 2
    f.close()


# ---------------------------------------------------------------- collisions vs oracle


def test_collisions_against_oracle(tmp_path: Path) -> None:
    rng = random.Random(7)
    f = new_file(tmp_path, slots=7, entries=400)
    keys = [f"T#key{i}" for i in range(40)] + ["T#Aa", "T#BB"]  # Aa and BB: equal Java hash
    oracle: dict[int, list[tuple[int, int]]] = {}
    ts = T0
    for phys in range(0, 399 * 100, 100):
        key = rng.choice(keys)
        ts += rng.randrange(0, 3000)
        assert f.put_key(key, phys, ts)
        oracle.setdefault(key_hash(key), []).append((phys, ts))
    assert f.is_full
    assert f.hash_slot_count == len({h % 7 for h in oracle})
    for key in keys:
        expected_all = [p for p, _ in reversed(oracle.get(key_hash(key), []))]
        assert f.select_phys_offsets(key, 1000, 0, 2**62) == expected_all
        assert f.select_phys_offsets(key, 3, 0, 2**62) == expected_all[:3]
    # Only hashes are compared: "Aa" finds "BB"'s messages too.
    assert f.select_phys_offsets("T#Aa", 1000, 0, 2**62) == f.select_phys_offsets(
        "T#BB", 1000, 0, 2**62
    )
    assert f.check() == []
    f.close()


def test_time_range_filter_is_inclusive_and_second_grained(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=50)
    f.put_key("k", 0, T0)
    f.put_key("k", 1, T0 + 1_500)  # stored as time_diff 1 -> reads back as T0 + 1000
    f.put_key("k", 2, T0 + 3_000)
    f.put_key("k", 3, T0 + 5_000)
    assert f.select_phys_offsets("k", 10, T0 + 1_000, T0 + 3_000) == [2, 1]
    assert f.select_phys_offsets("k", 10, T0 + 1_001, T0 + 3_000) == [2]
    assert f.select_phys_offsets("k", 10, T0, T0) == [0]
    assert f.select_phys_offsets("k", 10, T0 + 6_000, T0 + 9_000) == []
    assert f.select_phys_offsets("k", 0, 0, 2**62) == []
    f.close()


def test_walk_stops_at_first_entry_older_than_begin(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=50)
    f.put_key("k", 0, T0)
    f.put_key("k", 1, T0 + 100_000)  # in range
    f.put_key("k", 2, T0 + 1_000)  # newest entry, but older than begin: the walk stops here
    assert f.select_phys_offsets("k", 10, T0 + 50_000, T0 + 200_000) == []
    assert f.select_phys_offsets("k", 10, T0, T0 + 200_000) == [2, 1, 0]
    f.close()


def test_walk_stops_on_self_loop_and_out_of_range_prev(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=1, entries=10)
    for i in range(3):
        f.put_key("k", i, T0)
    path = Path(f.path)
    f.close()
    data = bytearray(raw(path))
    base = 44
    data[base + 3 * 20 + 16 : base + 3 * 20 + 20] = be(3, 4)  # entry 3 -> itself
    path.write_bytes(bytes(data))
    g = IndexFile.open(str(path), 1, 10)
    assert g.select_phys_offsets("k", 10, 0, 2**62) == [2]
    g.close()
    data[base + 3 * 20 + 16 : base + 3 * 20 + 20] = be(9, 4)  # beyond index_count
    path.write_bytes(bytes(data))
    g = IndexFile.open(str(path), 1, 10)
    assert g.select_phys_offsets("k", 10, 0, 2**62) == [2]
    g.close()
    data[base + 3 * 20 + 12 : base + 3 * 20 + 16] = be(-1, 4)  # negative time_diff
    path.write_bytes(bytes(data))
    g = IndexFile.open(str(path), 1, 10)
    assert g.select_phys_offsets("k", 10, 0, 2**62) == []
    g.close()


def test_chain_across_many_entries_and_reopen(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=2, entries=2000)
    for i in range(1000):
        f.put_key("T#hot" if i % 2 else f"T#cold{i}", i, T0 + i * 10)
    path = f.path
    f.close()
    g = IndexFile.open(path, 2, 2000)
    assert (g.index_count, g.begin_phys_offset, g.end_phys_offset) == (1001, 0, 999)
    for i in range(1000, 1999):
        g.put_key("T#hot" if i % 2 else f"T#cold{i}", i, T0 + i * 10)
    expected = [i for i in range(1998, -1, -1) if i % 2]
    assert g.select_phys_offsets("T#hot", 5000, 0, 2**62) == expected
    assert g.check() == []
    g.close()


# ---------------------------------------------------------------- new-file-after-full quirk


def test_file_after_full_borrows_begin_for_first_time_diff(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=10, prev_end_phys_offset=500, prev_end_timestamp=T0)
    assert raw(Path(f.path))[:40] == header_bytes(T0, T0, 500, 500, 0, 1)
    f.put_key("k", 600, T0 + 5_500)
    f.put_key("k", 700, T0 + 8_000)
    assert (f.begin_timestamp, f.begin_phys_offset) == (T0 + 5_500, 600)
    assert f.entry(1).time_diff == 5  # against the borrowed begin T0
    assert f.entry(2).time_diff == 2  # against the reset begin T0 + 5.5 s
    f.flush()
    assert raw(Path(f.path))[:40] == header_bytes(T0 + 5_500, T0 + 8_000, 600, 700, 1, 3)
    # So the first entry reads back 5 s late (T0 + 5.5 s + 5 s), the second one right.
    assert f.select_phys_offsets("k", 10, T0 + 7_500, T0 + 10_500) == [700, 600]
    assert f.select_phys_offsets("k", 10, T0 + 5_500, T0 + 6_000) == []
    f.close()


def test_zero_prev_values_leave_header_zero(tmp_path: Path) -> None:
    f = new_file(tmp_path, prev_end_phys_offset=0, prev_end_timestamp=0)
    assert raw(Path(f.path))[:40] == header_bytes(0, 0, 0, 0, 0, 1)
    f.close()


# ---------------------------------------------------------------- open, readonly, lifetime


def test_open_wrong_size_is_corrupt(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=10)
    f.close()
    with pytest.raises(CorruptIndexError):
        IndexFile.open(f.path, 7, 11)


def test_open_count_beyond_capacity_is_corrupt(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=10)
    f.close()
    data = bytearray(raw(Path(f.path)))
    data[36:40] = be(11, 4)
    Path(f.path).write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError):
        IndexFile.open(f.path, 7, 10)


def test_create_refuses_existing_file_and_bad_dimensions(tmp_path: Path) -> None:
    f = new_file(tmp_path)
    with pytest.raises(FileExistsError):
        new_file(tmp_path)
    with pytest.raises(ValueError):
        IndexFile.create(str(tmp_path / "x"), 7, 1)
    with pytest.raises(ValueError):
        IndexFile.create(str(tmp_path / "y"), 0, 10)
    f.close()


def test_readonly_open_reads_but_refuses_writes(tmp_path: Path) -> None:
    f = new_file(tmp_path)
    f.put_key("k", 5, T0)
    f.close()
    g = IndexFile.open(f.path, 7, 50, readonly=True)
    assert g.select_phys_offsets("k", 5, 0, 2**62) == [5]
    with pytest.raises(StoreNotWritableError):
        g.put_key("k", 6, T0)
    g.flush()  # nothing to do
    g.close()


def test_closed_file_refuses_everything(tmp_path: Path) -> None:
    f = new_file(tmp_path)
    f.put_key("k", 5, T0)
    f.close()
    f.close()  # idempotent
    assert f.closed
    with pytest.raises(StoreClosedError):
        f.put_key("k", 6, T0)
    with pytest.raises(StoreClosedError):
        f.flush()
    with pytest.raises(StoreClosedError):
        f.entry(1)
    assert f.select_phys_offsets("k", 5, 0, 2**62) == []


def test_destroy_waits_for_reader_before_unmapping(tmp_path: Path) -> None:
    f = new_file(tmp_path)
    f.put_key("k", 5, T0)
    assert f._hold()  # a reader in the middle of a walk
    f.destroy()
    assert not Path(f.path).exists()
    assert not f._mm.closed  # still mapped for that reader
    out: list[int] = []
    f._select_held(key_hash("k"), 5, 0, 2**62, out)
    assert out == [5]
    f._release()
    assert f._mm.closed


# ---------------------------------------------------------------- one writer, many readers


def test_concurrent_readers_never_see_foreign_or_partial_entries(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=3, entries=6000)
    keys = [f"T#k{i}" for i in range(5)]
    owner = {i: keys[i % 5] for i in range(5999)}
    done = threading.Event()
    errors: list[str] = []

    def reader(key: str) -> None:
        while not done.is_set():
            got = f.select_phys_offsets(key, 10_000, 0, 2**62)
            if any(owner[p] != key for p in got) or got != sorted(got, reverse=True):
                errors.append(f"{key}: {got[:10]}")
                return

    threads = [threading.Thread(target=reader, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for i in range(5999):
        f.put_key(owner[i], i, T0 + i)
    done.set()
    for t in threads:
        t.join()
    assert errors == []
    assert f.select_phys_offsets(keys[0], 10_000, 0, 2**62) == list(range(5995, -1, -5))
    f.close()


# ---------------------------------------------------------------- put_entries (reput's batch path)


@pytest.mark.parametrize("seed", range(6))
def test_put_entries_writes_the_bytes_of_one_by_one_puts(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    slots, entries = rng.choice([(1, 30), (7, 40), (13, 25)])
    prev = rng.choice([(0, 0), (5_000, T0 - 3_000)])  # fresh, or rolled after a full file
    one = IndexFile.create(str(tmp_path / "one"), slots, entries,
                           prev_end_phys_offset=prev[0], prev_end_timestamp=prev[1])  # fmt: skip
    many = IndexFile.create(str(tmp_path / "many"), slots, entries,
                            prev_end_phys_offset=prev[0], prev_end_timestamp=prev[1])  # fmt: skip
    count = rng.randrange(entries + 10)
    hashes = [rng.choice([0, 2**31 - 1, rng.randrange(2**31)]) for _ in range(count)]
    phys = sorted(rng.randrange(10_000, 10**9) for _ in range(count))
    times = [
        T0 + rng.choice([0, 0, 1_500, rng.randrange(-10_000, 5 * 10**12)]) for _ in range(count)
    ]
    if prev[1] and count:
        times[0] = prev[1] + 4_000  # the first entry then resets begin within a run of equals
        times[1:2] = times[:1] * len(times[1:2])
    written_one = 0
    for h, p, t in zip(hashes, phys, times, strict=True):
        if not one.put_key_hash(h, p, t):
            break
        written_one += 1
    written_many = 0
    start = 0
    while start < count:  # in a few slices, as reput hands them over
        step = rng.randrange(1, 12)
        stop = min(count, start + step)
        done = many.put_entries(hashes[:stop], phys[:stop], times[:stop], start)
        written_many += done
        if done < stop - start:
            break
        start = stop
    assert written_many == written_one == min(count, entries - 1)
    assert many.put_entries(hashes, phys, times, count) == 0
    for attr in ("index_count", "hash_slot_count", "begin_timestamp", "end_timestamp",
                 "begin_phys_offset", "end_phys_offset"):  # fmt: skip
        assert getattr(many, attr) == getattr(one, attr), attr
    one.flush()
    many.flush()
    assert raw(Path(many.path)) == raw(Path(one.path))
    one.close()
    many.close()


def test_put_entries_read_only_and_closed(tmp_path: Path) -> None:
    f = new_file(tmp_path)
    f.close()
    with pytest.raises(StoreClosedError):
        f.put_entries([1], [2], [T0])
    ro = IndexFile.open(f.path, 7, 50, readonly=True)
    with pytest.raises(StoreNotWritableError):
        ro.put_entries([1], [2], [T0])
    ro.close()


@pytest.mark.parametrize("seed", range(8))
def test_bulk_put_entries_writes_the_bytes_of_one_by_one_puts(tmp_path: Path, seed: int) -> None:
    """Runs of ``index_bulk.BULK_MIN`` or more entries take the column passes: slot pairs
    inside a run, slots reused from earlier runs, a stale slot (above the entry count, as a
    crash leaves) that sends a run back to the loop, clamped time diffs, a full file."""
    rng = random.Random(seed)
    slots, entries = rng.choice([(1, 300), (97, 900), (5003, 2000)])
    prev = rng.choice([(0, 0), (5_000, T0 - 3_000)])
    one = IndexFile.create(str(tmp_path / "one"), slots, entries,
                           prev_end_phys_offset=prev[0], prev_end_timestamp=prev[1])  # fmt: skip
    many = IndexFile.create(str(tmp_path / "many"), slots, entries,
                            prev_end_phys_offset=prev[0], prev_end_timestamp=prev[1])  # fmt: skip
    if seed % 4 == 3:  # a stale slot value beyond the entry count, in both files
        stale = rng.randrange(slots)
        for f in (one, many):
            f._mm[40 + 4 * stale : 44 + 4 * stale] = (entries + 5).to_bytes(4, "big")
    count = entries + 50
    hashes = [rng.choice([rng.randrange(2**31), rng.randrange(50)]) for _ in range(count)]
    phys = sorted(rng.randrange(10_000, 10**9) for _ in range(count))
    times = sorted(
        T0 + rng.choice([0, 1_500, rng.randrange(-10_000, 5 * 10**12)]) for _ in range(count)
    )
    for h, p, t in zip(hashes, phys, times, strict=True):
        if not one.put_key_hash(h, p, t):
            break
    start = 0
    columns: tuple[Sequence[int], ...] = (hashes, phys, times)
    if seed % 2:  # reput hands over int64 arrays
        columns = tuple(np.array(column, np.int64) for column in columns)
    while start < count:
        stop = min(count, start + rng.choice([1, 40, 64, 300]))
        done = many.put_entries(*(column[:stop] for column in columns), start)
        if done < stop - start:
            break
        start = stop
    for attr in ("index_count", "hash_slot_count", "begin_timestamp", "end_timestamp",
                 "begin_phys_offset", "end_phys_offset"):  # fmt: skip
        assert getattr(many, attr) == getattr(one, attr), attr
    assert many.index_count == entries  # full
    for attr in ("end_timestamp", "end_phys_offset", "begin_timestamp", "begin_phys_offset"):
        assert type(getattr(many, attr)) is int, attr  # no numpy scalar in the header fields
    one.flush()
    many.flush()
    assert raw(Path(many.path)) == raw(Path(one.path))
    assert many.check() == one.check()
    one.close()
    many.close()
