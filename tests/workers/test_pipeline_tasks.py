"""The data pipeline's Celery tasks (archive, stats) and their place in the beat schedule.
The task bodies are called directly: no broker, no worker."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from mqcore.store.files.service_lock import ServiceLock


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CAIRN_STORE_DIR", str(tmp_path / "store"))
    for name in (
        "CAIRN_ARCHIVE_INTERVAL_S",
        "CAIRN_STATS_INTERVAL_S",
        "CAIRN_COMPACT_INTERVAL_S",
        "CAIRN_ARCHIVE_DIR",
    ):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_beat_schedules_the_pipeline_jobs(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.app import beat_schedule

    schedule = beat_schedule()
    assert schedule["cairn-pipeline-archive"]["task"] == "cairn.pipeline_archive"
    assert schedule["cairn-pipeline-archive"]["schedule"] == 3600.0
    assert schedule["cairn-pipeline-stats"]["task"] == "cairn.pipeline_stats"
    assert schedule["cairn-pipeline-stats"]["schedule"] == 300.0
    assert schedule["cairn-pipeline-compact"]["task"] == "cairn.pipeline_compact"
    assert schedule["cairn-pipeline-compact"]["schedule"] == 86400.0
    monkeypatch.setenv("CAIRN_ARCHIVE_INTERVAL_S", "120")
    monkeypatch.setenv("CAIRN_STATS_INTERVAL_S", "0")
    schedule = beat_schedule()
    assert schedule["cairn-pipeline-archive"]["schedule"] == 120.0
    assert schedule["cairn-pipeline-archive"]["options"] == {"expires": 120.0}
    assert "cairn-pipeline-stats" not in schedule
    assert {"cairn-reput", "cairn-flush", "cairn-cleanup", "cairn-index"} <= set(schedule)
    monkeypatch.setenv("CAIRN_STATS_INTERVAL_S", "-1")
    with pytest.raises(SystemExit, match="CAIRN_STATS_INTERVAL_S"):
        beat_schedule()


def test_archive_lands_in_the_configured_archive_dir(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers import settings

    assert settings.archive_out_dir() == settings.pipeline_dir()
    monkeypatch.setenv("CAIRN_ARCHIVE_DIR", str(env / "x" / "archive"))
    assert settings.archive_out_dir() == env / "x"  # run_archive writes <out>/archive
    monkeypatch.setenv("CAIRN_ARCHIVE_DIR", str(env / "arch"))
    assert settings.archive_out_dir() == env / "arch"  # <arch>/archive, found by lookups


def test_a_run_in_progress_makes_the_next_skip(env: Path) -> None:
    from workers.tasks import (
        pipeline_archive_task,
        pipeline_compact_task,
        pipeline_stats_task,
    )

    store = env / "store"
    tasks = (
        ("archive", pipeline_archive_task),
        ("stats", pipeline_stats_task),
        ("compact", pipeline_compact_task),
    )
    for job, task in tasks:
        lock = ServiceLock(store, f"pipeline-{job}")
        assert lock.try_acquire()
        try:
            result = task(str(store), str(env / "out"))
        finally:
            lock.release()
        assert result["status"] == "skipped" and str(os.getpid()) in result["reason"]
    assert not (env / "out").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_tasks_archive_and_count_a_small_store(spark: Any, env: Path) -> None:
    from tests.pipeline.conftest import message, write_store
    from workers.tasks import pipeline_archive_task, pipeline_stats_task

    store, out = env / "store", env / "out"
    write_store(store, 60)
    visible = sum(1 for i in range(60) if message(i).sys_flag & 0xC in (0x0, 0x8))
    result = pipeline_archive_task(str(store), str(out))
    assert result["status"] == "ok" and result["messages"] == visible
    assert json.loads((out / "archive" / "_watermark.json").read_text())["messages"] == visible
    assert list((out / "archive" / "messages").rglob("*.parquet"))
    again = pipeline_archive_task(str(store), str(out))  # incremental: nothing new
    assert again["status"] == "ok" and again["messages"] == 0
    stats = pipeline_stats_task(str(store), str(out))
    assert stats["status"] == "ok" and (out / "stats" / "stats.json").exists()
    lock = ServiceLock(store, "pipeline-archive")
    assert lock.try_acquire()  # released after the run
    lock.release()
