"""``IndexFile.check``: the structural walk of one index file names each broken invariant."""

from __future__ import annotations

from pathlib import Path

from mqcore.store.index.index_file import HEADER, IndexFile
from tests.mqcore.store.index.test_index_file import T0, be, new_file, raw


def test_check_reports_structural_defects(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=20)
    for i in range(6):
        f.put_key(f"k{i % 3}", i, T0 + i * 1000)
    assert f.check() == []
    path = Path(f.path)
    f.close()
    data = bytearray(raw(path))
    entries = 40 + 7 * 4
    free_slot = next(s for s in range(7) if data[40 + s * 4 : 44 + s * 4] == bytes(4))
    data[40 + free_slot * 4 : 44 + free_slot * 4] = be(15, 4)  # slot beyond index_count 7
    data[entries + 5 * 20 + 16 : entries + 5 * 20 + 20] = be(6, 4)  # prev pointing forward
    data[entries + 4 * 20 + 12 : entries + 4 * 20 + 16] = be(-3, 4)  # negative time_diff
    path.write_bytes(bytes(data))
    g = IndexFile.open(str(path), 7, 20, readonly=True)
    defects = g.check()
    text = "\n".join(defects)
    assert f"slot {free_slot}: value 15" in text
    assert "entry 5: prev_index 6" in text
    assert "entry 4: negative time_diff -3" in text
    assert "hash_slot_count" in text  # the bogus slot is counted as occupied
    assert all(d.startswith(path.name + ": ") for d in defects)
    g.close()


def test_check_reports_header_ranges_running_backwards(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=20)
    for i in range(4):
        f.put_key(f"k{i}", 100 + i, T0 + i * 1000)
    path = Path(f.path)
    f.close()
    data = bytearray(raw(path))
    begin_ts, _end_ts, begin_phys, _end_phys, slots, count = HEADER.unpack_from(data, 0)
    HEADER.pack_into(data, 0, begin_ts, begin_ts - 1, begin_phys, begin_phys - 1, slots, count)
    path.write_bytes(bytes(data))
    g = IndexFile.open(str(path), 7, 20, readonly=True)
    text = "\n".join(g.check())
    g.close()
    assert f"header end_timestamp {begin_ts - 1} < begin_timestamp {begin_ts}" in text
    assert f"header end_phys_offset {begin_phys - 1} < begin_phys_offset {begin_phys}" in text


def test_check_reports_at_most_100_defects_and_counts_the_rest(tmp_path: Path) -> None:
    f = new_file(tmp_path, slots=7, entries=300)
    for i in range(250):
        f.put_key(f"k{i}", 100 + i, T0 + i)
    path = Path(f.path)
    f.close()
    data = bytearray(raw(path))
    entries = 40 + 7 * 4
    for index in range(1, 250):  # every entry's time_diff negative: 249 defects
        data[entries + index * 20 + 12 : entries + index * 20 + 16] = be(-1, 4)
    path.write_bytes(bytes(data))
    g = IndexFile.open(str(path), 7, 300, readonly=True)
    defects = g.check()
    g.close()
    assert len(defects) == 101
    assert defects[-1] == f"{path.name}: ... and 149 more defects"
