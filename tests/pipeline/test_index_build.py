"""The Spark hand-off of index building: mqcore's side build handing the CommitLog to
``pipeline.index_build.build_index_files`` through the workers' seam."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from mqcore.clock import FakeClock
from mqcore.services import index_build
from mqcore.services.index_build import BuildRequest
from mqcore.store import MessageStore
from tests.mqcore.services.conftest import SMALL, put_many

pytestmark = [pytest.mark.spark, pytest.mark.slow]

COUNT = 600


def answers(store: MessageStore) -> list[list[tuple[int, bytes]]]:
    """What key queries return, for every key put (and one never put)."""
    return [
        [(m.phys_offset, m.body) for m in store.query_by_key("Orders", f"K{i}", 0, 2**62)]
        for i in [*range(COUNT), COUNT + 1]
    ]


def index_contents(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


def test_low_threshold_hands_the_build_to_spark(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline import index_build as spark_build
    from workers import tasks

    clock = FakeClock()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        put_many(store, COUNT)
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        expected, reput_files = answers(store), index_contents(tmp_path)
    assert len(reput_files) >= 2 and all(expected[:COUNT]) and expected[COUNT] == []
    shutil.rmtree(tmp_path / "index")

    monkeypatch.setenv("CAIRN_INDEX_SPARK_MIN_BYTES", "1")
    requests: list[BuildRequest] = []
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        assert not any(answers(store))  # the index is lost
        builder = tasks.spark_index_builder(store)
        assert builder is spark_build.build_index_files

        def recording(request: BuildRequest) -> int:
            requests.append(request)
            assert builder is not None
            return builder(request)

        job = index_build.rebuild(store, clock, max_bytes=1024, builder=recording)
        assert job.state == "installed" and job.handed_off and job.records == 0
        assert len(requests) == 1
        assert requests[0].to_offset == store.commit_log.confirm_offset
        assert answers(store) == expected
        assert not (tmp_path / "rebuild" / spark_build.SCRATCH).exists()
    assert index_contents(tmp_path) == reput_files  # the same bytes reput wrote


def test_default_threshold_keeps_the_build_in_process(tmp_path: Path) -> None:
    from workers import tasks

    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 10)
        assert tasks.spark_index_builder(store) is None


def test_a_range_not_from_the_log_start_is_declined(tmp_path: Path) -> None:
    from pipeline.index_build import build_index_files

    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 300)
        end = store.commit_log.confirm_offset
    request = BuildRequest(
        str(tmp_path), str(tmp_path / "side"), 1000, end, SMALL.commitlog_file_size,
        SMALL.index_hash_slots, SMALL.index_max_entries, lambda _offset: None,
    )  # fmt: skip
    assert build_index_files(request) == 1000
    assert not (tmp_path / "side").exists()
