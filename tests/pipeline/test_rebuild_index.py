"""Index building on Spark: ConsumeQueue and IndexFile files byte-identical to reput's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.jobs.rebuild_index import run_rebuild_index
from tests.pipeline.conftest import SMALL, ForeignStore

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_rebuilt_files_equal_what_reput_wrote(spark: Any, mq_store: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    report = run_rebuild_index(mq_store, tmp_path, config=SMALL, spark=spark, progress=lines.append)
    reput_queues = files(mq_store / "consumequeue")
    assert len(reput_queues) > 6  # several queues, several rolled files each
    assert files(tmp_path / "consumequeue") == reput_queues
    # IndexFiles are named by creation time; their contents must match one for one.
    reput_index = list(files(mq_store / "index").values())
    assert len(reput_index) > 3
    assert list(files(tmp_path / "index").values()) == reput_index
    assert report.index_files == len(reput_index) and report.records == 1500
    assert any("segment" in line for line in lines) and not (tmp_path / ".rebuild").exists()


def test_foreign_store_matches_mqcore_recovery(
    spark: Any, foreign_store: ForeignStore, tmp_path: Path
) -> None:
    """A RocketMQ store has no derived files: rebuild them, then compare with mqcore's own."""
    import shutil

    from mqcore.store import MessageStore, StoreConfig

    copy = tmp_path / "store"
    shutil.copytree(foreign_store.root, copy)
    config = StoreConfig(
        commitlog_file_size=32 * 1024,
        consume_queue_file_entries=100,
        index_hash_slots=50,
        index_max_entries=300,
    )
    run_rebuild_index(copy, tmp_path / "rebuilt", config=config, spark=spark)
    with MessageStore(copy, config):  # recovery after the abort file re-dispatches everything
        pass
    assert files(tmp_path / "rebuilt" / "consumequeue") == files(copy / "consumequeue")
    assert list(files(tmp_path / "rebuilt" / "index").values()) == list(
        files(copy / "index").values()
    )


def test_refuses_a_non_empty_output(spark: Any, mq_store: Path, tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "x").write_text("x")
    with pytest.raises(FileExistsError, match="fresh directory"):
        run_rebuild_index(mq_store, tmp_path, config=SMALL, spark=spark)
