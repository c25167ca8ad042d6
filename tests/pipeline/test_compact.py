"""Archive compaction: fewer files, the same rows, a consistent key index, crash safety."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from django.core.management import call_command

import pipeline.jobs.compact as compact_module
from pipeline.archive_layout import (
    ArchiveFile,
    archive_files,
    live_files,
    partition_files,
    read_watermark,
)
from pipeline.archive_lookup import lookup
from pipeline.jobs.archive import run_archive
from pipeline.jobs.compact import compact_group, plan_groups, run_compact
from tests.pipeline.conftest import write_store

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def live_rows(out: Path) -> list[dict[str, Any]]:
    """Every row a reader sees (live message files), with topic and date, by phys_offset."""
    root = out / "archive"
    files = archive_files(root)
    dataset = ds.dataset(
        files, format="parquet", partitioning="hive", partition_base_dir=str(root / "messages")
    )
    rows = dataset.to_table().to_pylist()
    return sorted(rows, key=lambda r: r["phys_offset"])


def key_rows(out: Path) -> list[tuple[str, int, str]]:
    """(key, phys_offset, message file) of every live key row."""
    files = archive_files(out / "archive", "keys")
    table = ds.dataset(files, format="parquet").to_table(columns=["key", "phys_offset", "file"])
    return sorted(
        zip(
            table.column("key").to_pylist(),
            table.column("phys_offset").to_pylist(),
            table.column("file").to_pylist(),
            strict=True,
        )
    )


def all_files(out: Path, tree: str) -> list[Path]:
    return sorted(p for p in (out / "archive" / tree).rglob("*") if p.is_file())


def day_dirs(out: Path) -> list[Path]:
    return sorted(p.parent for p in (out / "archive" / "messages").rglob("*.parquet"))


@pytest.fixture
def fragmented(spark: Any, tmp_path: Path) -> Path:
    """An archive built by four incremental runs over split segments: many small files."""
    store, out = tmp_path / "store", tmp_path / "out"
    clock = write_store(store, 150)
    run_archive(store, out, spark=spark, max_partition_bytes=20_000)
    for first in (150, 300, 450):
        clock = write_store(store, 150, first=first, clock=clock)
        run_archive(store, out, spark=spark, max_partition_bytes=20_000)
    return out


def test_compaction_merges_files_and_keeps_every_row(spark: Any, fragmented: Path) -> None:
    out = fragmented
    rows_before, keys_before = live_rows(out), key_rows(out)
    files_before = len(all_files(out, "messages"))
    assert files_before > 3 * len(set(day_dirs(out)))  # several files per partition
    report = run_compact(out, spark=spark, keep_replaced_s=0)
    assert report.partitions == len(set(day_dirs(out))) and report.merged_files == files_before
    assert report.messages == len(rows_before)
    # One file per partition in each tree, nothing else left over, the very same rows.
    for tree in ("messages", "keys"):
        names = [p.name for p in all_files(out, tree)]
        assert len(names) == report.partitions and all(n.startswith("compact-") for n in names)
    assert live_rows(out) == rows_before
    keys_after = key_rows(out)
    assert [k[:2] for k in keys_after] == [k[:2] for k in keys_before]
    assert all(k[2].rsplit("/", 1)[1].startswith("compact-") for k in keys_after)
    hit = lookup(out, "Topic1", "order-4", 0, 2**62)
    assert len(hit) == 1 and hit[0]["archive_file"].rsplit("/", 1)[1].startswith("compact-")
    assert run_compact(out, spark=spark, keep_replaced_s=0).partitions == 0  # nothing to do


def test_compacted_file_is_compacted_again_with_new_runs(spark: Any, tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    clock = write_store(store, 200)
    run_archive(store, out, spark=spark, max_partition_bytes=20_000)
    run_compact(out, spark=spark, keep_replaced_s=0)
    write_store(store, 200, first=200, clock=clock)
    run_archive(store, out, spark=spark, max_partition_bytes=20_000)
    expected = live_rows(out)
    assert len(expected) == read_watermark(out / "archive").messages
    report = run_compact(out, spark=spark, keep_replaced_s=0)
    assert report.partitions > 0
    assert live_rows(out) == expected
    for directory in set(day_dirs(out)):
        (only,) = partition_files(directory)
        assert only.compacted and only.start == 0


def test_crash_before_the_commit_leaves_the_old_files_and_is_redone(
    spark: Any, fragmented: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, root = fragmented, fragmented / "archive"
    expected = live_rows(out)
    directory = day_dirs(out)[0]
    (group,) = plan_groups(live_files(root, directory), 1 << 30, 1 << 30)

    def crash(_path: Path) -> None:
        raise RuntimeError("simulated crash before the key file's rename")

    with monkeypatch.context() as m:
        m.setattr(compact_module, "_fsync", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            compact_group(root, [(str(f.path), f.start, f.end) for f in group])
    assert any(f.compacted for f in partition_files(directory))  # the merged message file
    assert live_rows(out) == expected  # ...is not committed: readers see the old files only
    report = run_compact(out, spark=spark, keep_replaced_s=0)
    assert report.deleted_files > len(group)  # the leftover and the replaced files
    assert live_rows(out) == expected
    assert all(p.name.startswith("compact-") for p in all_files(out, "keys"))
    assert not [p for p in (out / "archive").rglob(".tmp-*")]


def test_replaced_files_stay_until_their_time_and_are_never_read(
    spark: Any, fragmented: Path
) -> None:
    out = fragmented
    expected, keys_expected = live_rows(out), key_rows(out)
    before = all_files(out, "messages")
    report = run_compact(out, spark=spark, keep_replaced_s=3600)
    assert report.deleted_files == 0
    assert set(before) <= set(all_files(out, "messages"))  # still there for running readers
    assert live_rows(out) == expected  # but skipped: no duplicates
    assert [k[:2] for k in key_rows(out)] == [k[:2] for k in keys_expected]
    assert len(lookup(out, "Topic1", "order-4", 0, 2**62)) == 1
    assert run_compact(out, spark=spark, keep_replaced_s=0).deleted_files == 2 * len(before)
    assert live_rows(out) == expected


def _file(path: str, start: int, end: int, size: int, tmp_path: Path) -> ArchiveFile:
    real = tmp_path / path
    real.write_bytes(b"x" * size)
    return ArchiveFile(real, start, end, path.startswith("compact-"))


def test_plan_groups_keeps_runs_whole_and_skips_big_files(tmp_path: Path) -> None:
    a = _file("part-a", 0, 10, 100, tmp_path)
    b1 = _file("part-b1", 10, 20, 100, tmp_path)
    b2 = _file("part-b2", 10, 20, 100, tmp_path)
    big = _file("part-big", 20, 30, 5000, tmp_path)
    c = _file("part-c", 30, 40, 100, tmp_path)
    d = _file("part-d", 40, 50, 100, tmp_path)
    e = _file("part-e", 50, 60, 100, tmp_path)
    assert plan_groups([a, b1, b2, big, c, d, e], 1000, 10_000) == [[a, b1, b2], [c, d, e]]
    # A target that would cut between b1 and b2 starts a new group before the whole run.
    assert plan_groups([a, b1, b2, big, c, d, e], 1000, 250) == [[b1, b2], [c, d]]
    assert plan_groups([a, big, c], 1000, 10_000) == []


def test_compact_command(spark: Any, fragmented: Path) -> None:
    out = StringIO()
    call_command(
        "pipeline", "compact", "--out", str(fragmented), "--keep-replaced", "0", stdout=out
    )
    text = out.getvalue()
    assert "compact: done: " in text and "partitions to compact" in text
    assert "merged_files=" in text and all(
        p.name.startswith("compact-") for p in all_files(fragmented, "messages")
    )
