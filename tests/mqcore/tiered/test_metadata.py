"""tieredStoreMetadata.json: round trip, fastjson text, atomic write with .bak, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.errors import StoreError
from mqcore.metadata.jsonfile import loads_fastjson
from mqcore.tiered import QueueProgress, SegmentMeta, SegmentStatus, TieredMetadataStore


def progress(topic: str = "TopicTest", queue_id: int = 0, commit: int = 42) -> QueueProgress:
    return QueueProgress(
        topic,
        queue_id,
        min_offset=0,
        dispatch_offset=commit + 3,
        commit_offset=commit,
        update_timestamp=1_700_000_000_123,
        commit_log_segments={
            0: SegmentMeta(0, 4096, SegmentStatus.SEALED, 1, 2, 3, 4),
            4096: SegmentMeta(4096, 100, SegmentStatus.NEW, 5, 6, 7, 0),
        },
        consume_queue_segments={0: SegmentMeta(0, commit * 20, SegmentStatus.NEW, 1, 2, 3, 0)},
    )


def test_round_trip_and_file_shape(tmp_path: Path) -> None:
    store = TieredMetadataStore(tmp_path)
    assert store.load().queues() == []
    store.put(progress())
    store.put(progress("%RETRY%group", 3, commit=7))
    store.save()
    path = tmp_path / "config" / "tieredStoreMetadata.json"
    text = path.read_text()
    assert text.startswith('{\n\t"commitLogSegmentTable":{')
    assert not text.endswith("\n")
    doc = loads_fastjson(text)
    queue = doc["queueMetadataTable"]["TopicTest"][0]
    assert queue["queue"] == {"queueId": 0, "topic": "TopicTest"}
    assert (queue["maxOffset"], queue["commitOffset"], queue["dispatchOffset"]) == (42, 42, 45)
    seg = doc["commitLogSegmentTable"]["TopicTest/0"][0]
    assert (seg["type"], seg["status"], seg["size"], seg["path"]) == (0, 1, 4096, "TopicTest/0")
    assert doc["consumeQueueSegmentTable"]["TopicTest/0"][0]["type"] == 1
    loaded = TieredMetadataStore(tmp_path).load()
    assert loaded.queues() == [("%RETRY%group", 3), ("TopicTest", 0)]
    assert loaded.get("TopicTest", 0) == progress()
    assert loaded.get("%RETRY%group", 3) == progress("%RETRY%group", 3, commit=7)
    assert loaded.get("TopicTest", 1) is None


def test_get_and_put_copy(tmp_path: Path) -> None:
    store = TieredMetadataStore(tmp_path)
    p = progress()
    store.put(p)
    p.commit_offset = 999
    got = store.get("TopicTest", 0)
    assert got is not None and got.commit_offset == 42
    got.commit_log_segments.clear()
    again = store.get("TopicTest", 0)
    assert again is not None and len(again.commit_log_segments) == 2
    store.remove("TopicTest", 0)
    assert store.get("TopicTest", 0) is None


def test_second_save_keeps_a_backup_and_a_bad_file_falls_back(tmp_path: Path) -> None:
    store = TieredMetadataStore(tmp_path)
    store.put(progress(commit=10))
    store.save()
    store.put(progress(commit=20))
    store.save()
    path = store.path
    bak = Path(str(path) + ".bak")
    assert bak.exists()
    path.write_text('{"queueMetadataTable":{"TopicTest":{0:{"queue":{}}}}}')  # wrong shape
    loaded = TieredMetadataStore(tmp_path).load()
    got = loaded.get("TopicTest", 0)
    assert got is not None and got.commit_offset == 10  # the backup: an earlier full save
    assert Path(str(path) + ".corrupt").exists()


def test_both_unreadable_raises(tmp_path: Path) -> None:
    store = TieredMetadataStore(tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_text("{not json")
    Path(str(store.path) + ".bak").write_text("{also not json")
    with pytest.raises(StoreError):
        store.load()
