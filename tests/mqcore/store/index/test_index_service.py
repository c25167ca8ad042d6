"""IndexService: keys per message, rolling, newest-first queries, load and cleanup (spec 4, 6.5)."""

from __future__ import annotations

import dataclasses
import os
import random
import threading
import time
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import StoreNotWritableError
from mqcore.store.index.index_file import IndexFile
from mqcore.store.index.index_service import IndexColumns, IndexService, QueryResult, file_name_for

T0 = 1_700_000_000_000
ALL = (0, 2**62)  # a time range covering everything


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


def local_name(ms: int) -> str:
    s, milli = divmod(ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(s)) + f"{milli:03d}"


def service(
    root: Path, clock: FakeClock, *, slots: int = 11, entries: int = 100, **kw: object
) -> IndexService:
    svc = IndexService(str(root), slots, entries, clock, **kw)  # type: ignore[arg-type]
    svc.load(True, 0)
    return svc


def entries_of(f: IndexFile) -> list[tuple[int, int]]:
    """(key_hash, phys_offset) of every written entry, in put order."""
    return [(f.entry(i).key_hash, f.entry(i).phys_offset) for i in range(1, f.index_count)]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


# ---------------------------------------------------------------- keys per message


def test_keys_uniq_first_then_each_nonempty_key(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock)
    n = svc.build_index("TopicTest", 100, T0, "UNIQ1", " a b  c ", 0)
    assert n == 4
    (f,) = svc.files
    assert entries_of(f) == [
        (key_hash("TopicTest#UNIQ1"), 100),
        (key_hash("TopicTest#a"), 100),
        (key_hash("TopicTest#b"), 100),
        (key_hash("TopicTest#c"), 100),
    ]
    for key in ("UNIQ1", "a", "b", "c"):
        assert svc.query("TopicTest", key, 10, *ALL).phys_offsets == [100]
    assert svc.query("TopicTest", "", 10, *ALL).phys_offsets == []
    assert svc.query("Other", "a", 10, *ALL).phys_offsets == []
    svc.close()


def test_hash_with_cached_topic_prefix_matches_full_key(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock, entries=200)
    cases = [
        ("标签", "😀"),
        ("TopicTest", "OrderID188"),
        ("t", ""),
        ("t", "x" * 2000),
        ("p", "lygenelubricants"),
    ]
    offset = 0
    for topic, key in cases:
        offset += 10
        svc.build_index(topic, offset, T0, key, None, 0)
    (f,) = svc.files
    assert [h for h, _ in entries_of(f)] == [key_hash(f"{t}#{k}") for t, k in cases]
    svc.close()


def key_with_min_value_hash(prefix: str) -> str:
    """A 7-unit key such that Java hash(prefix + key) == Integer.MIN_VALUE."""
    hp = java_hash(prefix) & 0xFFFFFFFF
    rest = (2**31 - hp * 31**7) % 2**32
    units = []
    for power in range(6, -1, -1):
        unit, rest = divmod(rest, 31**power)
        units.append(unit)
    assert all(u < 0xD800 for u in units)
    return "".join(map(chr, units))


def test_min_value_hash_through_prefix_is_zero(tmp_path: Path, clock: FakeClock) -> None:
    key = key_with_min_value_hash("TopicTest#")
    assert java_hash("TopicTest#" + key) == -(2**31)
    svc = service(tmp_path, clock)
    svc.build_index("TopicTest", 0, T0, key, None, 0)
    assert svc.files[0].entry(1).key_hash == 0
    assert svc.files[0].slot(0) == 1
    assert svc.query("TopicTest", key, 5, *ALL).phys_offsets == [0]
    svc.close()


def test_no_keys_still_creates_the_file(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock)
    assert svc.build_index("T", 0, T0, None, None, 0) == 0
    assert svc.build_index("T", 1, T0, None, "", 0) == 0
    assert [f.name for f in svc.files] == [local_name(T0)]
    assert os.listdir(tmp_path / "index") == [local_name(T0)]
    svc.close()


@pytest.mark.parametrize(
    ("tran", "indexed"),
    [(0x0, True), (0x4, True), (0x8, True), (0xC, False), (0xC | 0x1 | 0x2, False), (0x5, True)],
)
def test_rollback_messages_are_skipped(
    tmp_path: Path, clock: FakeClock, tran: int, indexed: bool
) -> None:
    svc = service(tmp_path, clock)
    svc.build_index("T", 10, T0, "U", "k", tran)
    assert svc.query("T", "k", 10, *ALL).phys_offsets == ([10] if indexed else [])
    svc.close()


def test_dedupe_below_newest_end_phys_offset(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock)
    svc.build_index("T", 500, T0, None, "k", 0)
    assert svc.build_index("T", 499, T0, None, "k", 0) == 0
    assert svc.build_index("T", 500, T0, None, "k", 0) == 1  # equal is not below (RocketMQ)
    assert svc.query("T", "k", 10, *ALL).phys_offsets == [500, 500]
    svc.close()


def test_dedupe_after_restart(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock)
    messages = [(i * 100, T0 + i * 1000, f"U{i}", f"k{i % 3}") for i in range(10)]
    for phys, ts, uniq, keys in messages:
        svc.build_index("T", phys, ts, uniq, keys, 0)
    svc.close()
    again = service(tmp_path, clock)
    (f,) = again.files
    assert f.index_count == 21
    # Reput replays everything after a restart: only the message at end_phys_offset is
    # indexed again.
    for phys, ts, uniq, keys in messages:
        again.build_index("T", phys, ts, uniq, keys, 0)
    assert f.index_count == 23
    assert again.query("T", "U5", 10, *ALL).phys_offsets == [500]
    assert again.query("T", "U9", 10, *ALL).phys_offsets == [900, 900]
    again.close()


# ---------------------------------------------------------------- rolling


def test_rolls_when_full_with_begin_end_quirk(tmp_path: Path, clock: FakeClock) -> None:
    filled: list[int] = []
    svc = service(tmp_path, clock, entries=4, on_file_filled=filled.append)  # 3 keys per file
    svc.build_index("T", 0, T0, "U0", "a", 0)
    svc.build_index("T", 100, T0 + 7_000, "U1", None, 0)
    assert len(svc.files) == 1 and svc.files[0].is_full
    assert filled == [] and svc.last_filled_end_timestamp == 0
    clock.advance(10)
    svc.build_index("T", 200, T0 + 9_500, "U2", "a", 0)  # rolls before its first key
    first, second = svc.files
    assert filled == [T0 + 7_000] and svc.last_filled_end_timestamp == T0 + 7_000
    assert second.name == local_name(T0 + 10)
    # The new file started with begin = end = the full file's end values, so its first
    # entry's time_diff is (T0 + 9.5 s - (T0 + 7 s)) / 1000 = 2; then begin resets.
    assert second.entry(1).time_diff == 2
    assert second.entry(2).time_diff == 0
    assert (second.begin_timestamp, second.begin_phys_offset) == (T0 + 9_500, 200)
    assert (second.end_timestamp, second.end_phys_offset) == (T0 + 9_500, 200)
    # The full file is on disk with its final header.
    reopened = IndexFile.open(first.path, 11, 4, readonly=True)
    assert (reopened.index_count, reopened.end_timestamp) == (4, T0 + 7_000)
    reopened.close()
    svc.close()


def test_rolled_file_header_before_first_put(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock, entries=2)  # 1 key per file
    svc.build_index("T", 40, T0 + 3_000, None, "a", 0)
    svc.build_index("T", 40, T0 + 3_000, None, None, 0)  # no keys: only rolls
    first, second = svc.files
    assert (second.begin_timestamp, second.end_timestamp) == (T0 + 3_000, T0 + 3_000)
    assert (second.begin_phys_offset, second.end_phys_offset) == (40, 40)
    assert second.index_count == 1
    svc.close()


def test_same_millisecond_names_bump_by_one_ms(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock, entries=2)
    for i in range(3):
        svc.build_index("T", i, T0, None, "a", 0)  # clock never moves
    assert [f.name for f in svc.files] == [local_name(T0), local_name(T0 + 1), local_name(T0 + 2)]
    clock.set(T0 - 3_600_000)  # local time going back (DST): still after the newest name
    svc.build_index("T", 3, T0, None, "a", 0)
    assert svc.files[-1].name == local_name(T0 + 3)
    assert [f.name for f in svc.files] == sorted(f.name for f in svc.files)
    svc.close()


def test_name_bump_across_second_boundary(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 999)
    svc = service(tmp_path, clock, entries=2)
    svc.build_index("T", 0, T0, None, "a", 0)
    svc.build_index("T", 1, T0, None, "a", 0)
    assert [f.name for f in svc.files] == [local_name(T0 + 999), local_name(T0 + 1000)]
    svc.close()


def test_file_name_for_is_local_time() -> None:
    assert file_name_for(T0 + 123) == local_name(T0 + 123)
    assert len(file_name_for(T0)) == 17


# ---------------------------------------------------------------- query across files


def fill_three_files(root: Path, clock: FakeClock) -> IndexService:
    """9 messages with key "k" at 1 s apart, 3 per file (4 entries: 1 unused)."""
    svc = service(root, clock, entries=4)
    for i in range(9):
        clock.advance(5)
        svc.build_index("T", i * 100, T0 + i * 1000, None, "k", 0)
    assert len(svc.files) == 3
    return svc


def test_query_newest_first_across_files(tmp_path: Path, clock: FakeClock) -> None:
    svc = fill_three_files(tmp_path, clock)
    result = svc.query("T", "k", 100, *ALL)
    assert result == QueryResult([800, 700, 600, 500, 400, 300, 200, 100, 0], T0 + 8000, 800)
    assert svc.query("T", "k", 4, *ALL).phys_offsets == [800, 700, 600, 500]
    svc.close()


def test_query_time_window_and_stop_after_older_file(tmp_path: Path, clock: FakeClock) -> None:
    svc = fill_three_files(tmp_path, clock)
    # Headers: [T0 .. T0+2s], [T0+3s .. T0+5s], [T0+6s .. T0+8s]. Each rolled file's first
    # entry reads back 1 s late (the begin/end quirk): 300 reads as T0+4s, 600 as T0+7s.
    assert svc.query("T", "k", 64, T0 + 4000, T0 + 6000).phys_offsets == [500, 400, 300]
    assert svc.query("T", "k", 64, T0 + 1000, T0 + 2000).phys_offsets == [200, 100]
    assert svc.query("T", "k", 64, T0 + 8001, T0 + 9000).phys_offsets == []
    # 300 was stored at T0+3s but is not found there, exactly as in RocketMQ.
    assert svc.query("T", "k", 64, T0 + 3000, T0 + 3000).phys_offsets == []
    # The middle file is searched (its range covers begin) and its walk stops at 400
    # (older than begin); the newest file does not overlap; the oldest is never reached.
    assert svc.query("T", "k", 64, T0 + 4500, T0 + 4600).phys_offsets == []
    svc.close()


def test_query_stops_after_file_older_than_begin(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = fill_three_files(tmp_path, clock)
    oldest = svc.files[0]
    searched: list[str] = []
    original = IndexFile.select_by_hash

    def spy(
        self: IndexFile, key_hash: int, limit: int, begin_ms: int, end_ms: int, out: list[int]
    ) -> None:
        searched.append(self.name)
        original(self, key_hash, limit, begin_ms, end_ms, out)

    monkeypatch.setattr(IndexFile, "select_by_hash", spy)
    got = svc.query("T", "k", 64, T0 + 3500, 2**62).phys_offsets
    assert got == [800, 700, 600, 500, 400, 300]  # 300 reads as T0+4s (quirk)
    assert oldest.name not in searched and len(searched) == 2
    svc.close()


def test_query_caps_at_64(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock, entries=200)
    for i in range(100):
        svc.build_index("T", i, T0 + i, None, "k", 0)
    got = svc.query("T", "k", 1000, *ALL).phys_offsets
    assert got == list(range(99, 35, -1))
    svc.close()


def test_query_without_files(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock)
    assert svc.query("T", "k", 10, *ALL) == QueryResult([], 0, 0)


# ---------------------------------------------------------------- load


def test_abnormal_load_drops_files_newer_than_checkpoint(tmp_path: Path, clock: FakeClock) -> None:
    svc = fill_three_files(tmp_path, clock)
    names = [f.name for f in svc.files]
    svc.close()
    normal = IndexService(str(tmp_path), 11, 4, clock)
    assert normal.load(True, 0) == []
    assert [f.name for f in normal.files] == names
    normal.close()
    crashed = IndexService(str(tmp_path), 11, 4, clock)
    # Checkpoint says the first file (end T0+2s) was filled and flushed.
    assert crashed.load(False, T0 + 2000) == names[1:]
    assert [f.name for f in crashed.files] == names[:1]
    assert sorted(os.listdir(tmp_path / "index")) == names[:1]
    # Reput replays from before the checkpoint; messages already in file 1 are skipped.
    for i in range(9):
        crashed.build_index("T", i * 100, T0 + i * 1000, None, "k", 0)
    got = crashed.query("T", "k", 64, *ALL).phys_offsets
    assert got == [800, 700, 600, 500, 400, 300, 200, 200, 100, 0]
    crashed.close()


def test_load_ignores_foreign_names_and_missing_dir(tmp_path: Path, clock: FakeClock) -> None:
    svc = IndexService(str(tmp_path), 11, 100, clock)
    assert svc.load(True, 0) == [] and svc.files == []
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "notes.txt").write_text("x")
    (tmp_path / "index" / "2024010112000012").write_text("x")  # 16 digits
    assert svc.load(True, 0) == [] and svc.files == []


def test_readonly_service_loads_and_queries_but_never_writes(
    tmp_path: Path, clock: FakeClock
) -> None:
    fill_three_files(tmp_path, clock).close()
    ro = IndexService(str(tmp_path), 11, 4, clock, readonly=True)
    ro.load(False, 0)  # would drop all three: read-only leaves them on disk
    assert ro.files == [] and len(os.listdir(tmp_path / "index")) == 3
    ro.load(True, 0)
    assert ro.query("T", "k", 2, *ALL).phys_offsets == [800, 700]
    with pytest.raises(StoreNotWritableError):
        ro.build_index("T", 900, T0, None, "k", 0)
    with pytest.raises(StoreNotWritableError):
        ro.destroy_all()
    ro.close()


# ---------------------------------------------------------------- cleanup


def test_delete_expired_never_deletes_the_last_file(tmp_path: Path, clock: FakeClock) -> None:
    svc = fill_three_files(tmp_path, clock)  # end phys offsets 200, 500, 800
    names = [f.name for f in svc.files]
    assert svc.delete_expired(200) == 0
    assert svc.delete_expired(201) == 1
    assert [f.name for f in svc.files] == names[1:]
    assert svc.delete_expired(10_000) == 1
    assert [f.name for f in svc.files] == names[2:]
    assert svc.delete_expired(10_000) == 0
    assert sorted(os.listdir(tmp_path / "index")) == names[2:]
    assert svc.query("T", "k", 64, *ALL).phys_offsets == [800, 700, 600]
    svc.close()


def test_delete_expired_stops_at_first_live_file(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock, entries=2)
    for phys in (100, 50, 300, 400):  # 50 rolls a new file, then is skipped (dedupe)
        svc.build_index("T", phys, T0, None, "a", 0)
    assert [f.end_phys_offset for f in svc.files] == [100, 300, 400]
    assert svc.delete_expired(250) == 1  # 100 < 250 deleted; 300 stops the scan
    assert [f.end_phys_offset for f in svc.files] == [300, 400]
    svc.close()


def test_destroy_all(tmp_path: Path, clock: FakeClock) -> None:
    svc = fill_three_files(tmp_path, clock)
    svc.destroy_all()
    assert svc.files == [] and os.listdir(tmp_path / "index") == []
    assert svc.last_filled_end_timestamp == 0
    svc.build_index("T", 0, T0, None, "k", 0)  # starts over
    assert svc.query("T", "k", 64, *ALL).phys_offsets == [0]
    svc.close()


# ---------------------------------------------------------------- check


def test_check_sound_and_corrupt(tmp_path: Path, clock: FakeClock) -> None:
    svc = fill_three_files(tmp_path, clock)
    assert svc.check() == []
    target = svc.files[1]
    svc.close()
    data = bytearray(Path(target.path).read_bytes())
    entries = 40 + 11 * 4
    data[entries + 2 * 20 + 16 : entries + 2 * 20 + 20] = (7).to_bytes(4, "big")
    Path(target.path).write_bytes(bytes(data))
    ro = IndexService(str(tmp_path), 11, 4, clock, readonly=True)
    ro.load(True, 0)
    defects = ro.check()
    assert defects and all(d.startswith(target.name + ": ") for d in defects)
    assert any("entry 2: prev_index 7" in d for d in defects)
    ro.close()


# ---------------------------------------------------------------- one writer, readers, cleanup


def test_queries_while_writer_rolls_and_cleanup_deletes(tmp_path: Path, clock: FakeClock) -> None:
    svc = service(tmp_path, clock, slots=5, entries=30)
    done = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        while not done.is_set():
            got = svc.query("T", "even", 64, *ALL).phys_offsets
            if any(p % 2 for p in got) or got != sorted(got, reverse=True):
                errors.append(str(got))
                return

    def cleaner() -> None:
        while not done.is_set():
            files = svc.files
            if len(files) > 3:
                svc.delete_expired(files[-3].end_phys_offset)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    threads.append(threading.Thread(target=cleaner))
    for t in threads:
        t.start()
    for i in range(1000):
        clock.advance(1)
        svc.build_index("T", i, T0 + i, None, "even" if i % 2 == 0 else "odd", 0)
    done.set()
    for t in threads:
        t.join()
    assert errors == []
    assert svc.query("T", "even", 3, *ALL).phys_offsets == [998, 996, 994]
    assert svc.check() == []
    svc.close()


# ---------------------------------------------------------------- build_index_many (reput's path)


@dataclasses.dataclass(frozen=True)
class Msg:
    topic: str
    phys_offset: int
    store_timestamp: int
    uniq_key: str | None
    keys: str | None
    sys_flag: int


def random_messages(rng: random.Random, count: int) -> list[Msg]:
    keys = [None, "", "a", " a b  c ", "order-1", "标签 😀", "k" * 40, "x y"]
    uniqs = [None, "", "C0A8000130391B6D35860A1B2C3D0001", "UNIQ1"]
    out = []
    phys = 0
    for i in range(count):
        phys += rng.randrange(1, 500)
        out.append(
            Msg(
                rng.choice(["TopicTest", "t", "标签"]),
                phys,
                T0 + i * rng.randrange(0, 3000),
                rng.choice(uniqs) if rng.random() < 0.5 else f"{i:032X}",
                rng.choice(keys) if rng.random() < 0.6 else f"ORDER-{i:08d}",
                rng.choice([0, 0, 0, 0x4, 0x8, 0xC, 0x1]),
            )
        )
    return out


def file_bytes(svc: IndexService) -> list[tuple[str, bytes]]:
    out = []
    for f in svc.files:
        f.flush()
        out.append((f.name, Path(f.path).read_bytes()))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_build_index_many_equals_one_by_one(tmp_path: Path, clock: FakeClock, seed: int) -> None:
    rng = random.Random(seed)
    entries = rng.choice([2, 5, 9, 60])
    filled_a: list[int] = []
    filled_b: list[int] = []
    a = service(tmp_path / "a", clock, entries=entries, on_file_filled=filled_a.append)
    b = service(tmp_path / "b", clock, entries=entries, on_file_filled=filled_b.append)
    messages = random_messages(rng, rng.randrange(1, 60))
    head = rng.randrange(len(messages))  # indexed one by one in both, then replayed from
    replay = rng.randrange(head + 1)  # an earlier message: dedupe below end_phys_offset
    for m in messages[:head]:
        a.build_index(m.topic, m.phys_offset, m.store_timestamp, m.uniq_key, m.keys, m.sys_flag)
        b.build_index(m.topic, m.phys_offset, m.store_timestamp, m.uniq_key, m.keys, m.sys_flag)
    written_a = sum(
        a.build_index(m.topic, m.phys_offset, m.store_timestamp, m.uniq_key, m.keys, m.sys_flag)
        for m in messages[replay:]
    )
    written_b = 0
    rest = messages[replay:]
    while rest:
        step = rng.randrange(1, 40)
        written_b += b.build_index_many(rest[:step])
        rest = rest[step:]
    assert written_b == written_a
    assert file_bytes(b) == file_bytes(a)
    assert filled_b == filled_a
    a.close()
    b.close()


@pytest.mark.parametrize("seed", range(12))
def test_build_index_columns_equal_one_by_one(tmp_path: Path, clock: FakeClock, seed: int) -> None:
    """Reput's column runs: keyed (UNIQ_KEY and a business key), keyless (UNIQ_KEY alone,
    a keyless Kafka record) and mixed runs, rolling files, give one-by-one's bytes."""
    rng = random.Random(seed)
    entries = rng.choice([5, 60, 5000])
    a = service(tmp_path / "a", clock, entries=entries)
    b = service(tmp_path / "b", clock, entries=entries)
    kind = seed % 3
    messages = []
    phys = 0
    for i in range(rng.randrange(40, 300)):
        phys += rng.randrange(100, 400)
        keyed = kind == 0 or (kind == 2 and rng.random() < 0.5)
        key = f"ORDER-{i:08d}" if keyed else None
        messages.append(Msg("TopicTest", phys, T0 + i * 7, f"{i:032X}", key, 0))
    for m in messages:
        a.build_index(m.topic, m.phys_offset, m.store_timestamp, m.uniq_key, m.keys, m.sys_flag)
    rest = messages
    while rest:
        step = rng.choice([1, 48, 64, 500])
        run = rest[:step]
        columns = IndexColumns(
            [m.topic for m in run],
            [m.phys_offset for m in run],
            [m.store_timestamp for m in run],
            [m.uniq_key for m in run],
            [m.keys for m in run],
            [m.sys_flag for m in run],
        )
        b.build_index_many(columns)
        rest = rest[step:]
    assert file_bytes(b) == file_bytes(a)
    a.close()
    b.close()


def test_build_index_many_without_messages_creates_nothing(
    tmp_path: Path, clock: FakeClock
) -> None:
    svc = service(tmp_path, clock)
    assert svc.build_index_many([]) == 0
    assert svc.files == []
    assert svc.build_index_many([Msg("T", 0, T0, None, None, 0)]) == 0
    assert [f.name for f in svc.files] == [local_name(T0)]  # as build_index does
    svc.close()
