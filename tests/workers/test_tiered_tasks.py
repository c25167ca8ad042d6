"""Tiered storage on Celery: the tasks, their beat entries, and a real worker uploading while
the test process (the broker) reads through the tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.services import inline
from mqcore.store import MessageStore
from mqcore.store.files.service_lock import ServiceLock
from mqcore.tiered import PosixBackend
from mqcore.tiered.config import ReadStrategy, TieredConfig
from mqcore.tiered.storage import TieredStorage
from mqcore.tiered.tiered_store import TieredMessageStore
from tests.workers import test_services_worker as base
from tests.workers.test_services_worker import Workers, client, put_batch, wait_for

# The real-worker fixtures (private Redis database, store directory, worker processes).
redis_db = base.redis_db
store_dir = base.store_dir
workers = base.workers
broker = base.broker


def test_beat_schedules_the_tier_tasks_only_when_tiered(monkeypatch: pytest.MonkeyPatch) -> None:
    from mqcore.services import tiered
    from workers.app import beat_schedule

    monkeypatch.delenv("CAIRN_TIERED_BACKEND", raising=False)
    assert not any(name.startswith("cairn-tiered") for name in beat_schedule())
    monkeypatch.setenv("CAIRN_TIERED_BACKEND", "posix")
    schedule = beat_schedule()
    assert schedule["cairn-tiered-upload"]["task"] == "cairn.tiered_upload"
    assert schedule["cairn-tiered-upload"]["schedule"] == tiered.UPLOAD_INTERVAL_S
    assert schedule["cairn-tiered-retention"]["task"] == "cairn.tiered_retention"
    assert schedule["cairn-tiered-retention"]["schedule"] == 3600.0


def test_tasks_skip_when_off_or_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.tasks import tiered_retention_task, tiered_upload_task

    store = tmp_path / "store"
    monkeypatch.setenv("CAIRN_STORE_DIR", str(store))
    monkeypatch.setenv("CAIRN_TIERED_BACKEND", "none")
    assert tiered_upload_task(str(store))["status"] == "skipped"
    monkeypatch.setenv("CAIRN_TIERED_BACKEND", "posix")
    monkeypatch.setenv("CAIRN_TIERED_PATH", str(tmp_path / "tier"))
    lock = ServiceLock(store, "tiered")
    assert lock.try_acquire()  # an inline broker, say
    try:
        for task in (tiered_upload_task, tiered_retention_task):
            result = task(str(store))
            assert result["status"] == "skipped" and "lock held" in result["reason"]
    finally:
        lock.release()
    assert tiered_upload_task(str(store))["status"] == "ok"
    assert tiered_retention_task(str(store))["status"] == "ok"


@pytest.mark.slow
@pytest.mark.redis
def test_a_worker_uploads_and_the_broker_reads_the_tier(
    workers: Workers, broker: MessageStore, redis_db: str, store_dir: Path, tmp_path: Path
) -> None:
    tier_root = tmp_path / "tier"
    workers.start(
        "tier",
        CAIRN_TIERED_BACKEND="posix",
        CAIRN_TIERED_PATH=str(tier_root),
        CAIRN_TIERED_GROUP_COMMIT_TIMEOUT_MS="0",
        CAIRN_REPUT_ENSURE_S="1",
    )
    put_batch(broker, 0, 400)
    reader = TieredMessageStore(
        broker,
        TieredStorage(
            PosixBackend(tier_root, broker.config.cluster_name, broker.config.broker_name),
            store_dir,
            TieredConfig(read_strategy=ReadStrategy.FORCE),
            readonly=True,
            refresh_interval_s=0,
        ),
    )
    tasks = client(redis_db)

    def uploaded() -> bool:
        # Beat sends one every few seconds; ask for one more to be quick.
        tasks.send_task("cairn.tiered_upload", kwargs={"store_dir": str(store_dir)})
        status = {(q.topic, q.queue_id): q for q in reader.queue_status()}
        return len(status) == 4 and all(q.commit_offset == 100 for q in status.values())

    wait_for(uploaded, "the worker's upload", workers)
    got = reader.get_messages("", "Orders", 1, 0, 10)
    assert got.source == "tier"
    assert [m.body for m in got.messages] == [f"order {i}".encode() for i in range(1, 40, 4)]
    [found] = reader.query_by_key("Orders", "K123", 0, 2**62)
    assert found.body == b"order 123"
    services = inline.services_status(broker, [])["services"]
    assert services["tiered_upload"]["last_result"]["status"] in ("ok", "skipped")
