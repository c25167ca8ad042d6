"""Archive job and archive key lookup: idempotent re-runs, crash safety, lookup beyond retention."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

import pipeline.jobs.archive as archive_module
from mqcore.clock import FakeClock
from mqcore.store import MessageStore
from pipeline.archive_layout import read_watermark
from pipeline.archive_lookup import lookup
from pipeline.jobs.archive import run_archive
from tests.pipeline.conftest import SMALL, START_MS, TX_PREPARED, TX_ROLLBACK, message, write_store

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def archived(out: Path) -> list[tuple[str, int]]:
    """(topic, phys_offset) of every committed archived row, sorted."""
    root = out / "archive"
    committed = read_watermark(root).phys_offset
    files = [
        p
        for p in (root / "messages").rglob("part-*.parquet")
        if int(p.name.split("-")[1]) < committed
    ]
    table = ds.dataset([str(p) for p in files], format="parquet", partitioning="hive").to_table(
        columns=["topic", "phys_offset"]
    )
    return sorted(
        zip(table.column("topic").to_pylist(), table.column("phys_offset").to_pylist(), strict=True)
    )


def visible(first: int, last: int) -> int:
    return sum(
        1 for i in range(first, last) if message(i).sys_flag not in (TX_PREPARED, TX_ROLLBACK)
    )


def test_incremental_runs_are_idempotent(spark: Any, tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    clock = write_store(store, 400)
    first = run_archive(store, out, spark=spark, max_partition_bytes=30_000)
    assert first.messages == visible(0, 400) and first.records == 400
    again = run_archive(store, out, spark=spark)
    assert again.messages == 0 and again.partitions == 0
    write_store(store, 300, first=400, clock=clock)  # the broker went on writing
    third = run_archive(store, out, spark=spark)
    assert third.start_offset == first.end_offset and third.messages == visible(400, 700)
    rows = archived(out)
    assert len(rows) == len(set(rows)) == visible(0, 700)
    assert read_watermark(out / "archive").messages == visible(0, 700)
    # Spark SQL reads the archive as a partitioned table (topic and date from the paths).
    frame = spark.read.parquet(str(out / "archive" / "messages"))
    assert {"topic", "date", "body", "keys"} <= set(frame.columns)


def test_crash_before_commit_then_rerun_gives_the_exact_set(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    clock = write_store(store, 300)
    run_archive(store, out, spark=spark)
    write_store(store, 300, first=300, clock=clock)

    def crash(*_args: object) -> None:
        raise RuntimeError("simulated crash before the watermark commit")

    with monkeypatch.context() as m:
        m.setattr(archive_module, "write_watermark", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            run_archive(store, out, spark=spark)
    leftovers = [p for p in (out / "archive" / "messages").rglob("*.parquet")]
    assert len(leftovers) > len(
        [p for p in leftovers if int(p.name.split("-")[1]) == 0]
    )  # partial output exists
    assert len(archived(out)) == visible(0, 300)  # but is not visible: not committed
    report = run_archive(store, out, spark=spark)
    assert report.removed_uncommitted > 0
    rows = archived(out)
    assert len(rows) == len(set(rows)) == visible(0, 600)


def test_lookup_beyond_retention(spark: Any, tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    write_store(store, 800)
    run_archive(store, out, spark=spark)
    key, topic = "order-1", "Topic1"  # message 1: in the oldest segment
    with MessageStore(store, SMALL, clock=FakeClock(START_MS + 10**7)) as live:
        before = live.query_by_key(topic, key, 0, 2**62)
        assert [m.phys_offset for m in before] == [message_phys(live, key, topic)]
        oldest = live.commit_log.segments.first()
        assert oldest is not None and oldest.base_offset == 0
    (store / "commitlog" / f"{0:020d}").unlink()  # cleanup, with the store closed
    with MessageStore(store, SMALL, clock=FakeClock(START_MS + 10**7)) as live:
        assert live.commit_log.min_offset > before[0].phys_offset
        assert live.query_by_key(topic, key, 0, 2**62) == []
    found = lookup(out, topic, key, START_MS, START_MS + 10**7, 10)
    assert len(found) == 1
    hit = found[0]
    assert (
        hit["archived"] is True
        and hit["topic"] == topic
        and hit["phys_offset"] == before[0].phys_offset
    )
    assert hit["body"] == before[0].body and hit["msg_id"] == before[0].msg_id
    assert hit["properties"] == before[0].properties and hit["keys"] == list(before[0].keys)
    # By UNIQ_KEY too, and honouring the time range and the limit.
    assert [m["phys_offset"] for m in lookup(out / "archive", topic, hit["msg_id"], 0, 2**62)] == [
        hit["phys_offset"]
    ]
    assert lookup(out, topic, key, hit["store_timestamp"] + 1, 2**62) == []
    common = lookup(out, topic, "customer-1", 0, 2**62, limit=3)
    assert len(common) == 3 and [m["store_timestamp"] for m in common] == sorted(
        m["store_timestamp"] for m in common
    )
    assert lookup(tmp_path / "no-archive", topic, key, 0, 1) == []


def message_phys(store: MessageStore, key: str, topic: str) -> int:
    return store.query_by_key(topic, key, 0, 2**62)[0].phys_offset


def test_cleanup_before_archiving_is_reported(spark: Any, tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    write_store(store, 500)
    shutil.copy(store / "commitlog" / f"{0:020d}", tmp_path / "kept")
    (store / "commitlog" / f"{0:020d}").unlink()
    report = run_archive(store, out, spark=spark)
    assert report.lost_bytes == 64 * 1024 and report.warnings
    assert report.start_offset == 64 * 1024
