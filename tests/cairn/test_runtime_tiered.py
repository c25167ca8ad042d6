"""The runtime with tiered storage on: the broker reads through the tier, the upload loop
runs, ``tier_status`` reports each queue; off by default."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from cairn.runtime import BrokerRuntime
from mqcore.broker import OutgoingMessage, PullStatus
from mqcore.services import cleanup
from mqcore.services.cleanup import CleanupState
from mqcore.services.config import ServicesConfig
from mqcore.store import StoreConfig
from mqcore.tiered.tiered_store import TieredMessageStore
from tests.mqcore.tiered.world import EAGER

#: Forced cleanup may delete unconsumed local segments: they are in the tier.
SMALL = StoreConfig(
    commitlog_file_size=8 * 1024,
    consume_queue_file_entries=16,
    disk_clean_forcibly_unconsumed=True,
)
QUIET = ServicesConfig(clean_first_delay_ms=3_600_000)  # the test runs cleanup itself


def runtime(tmp_path: Path, **options: object) -> BrokerRuntime:
    return BrokerRuntime(
        store_dir=tmp_path / "store",
        services_mode="inline",
        store_config=SMALL,
        services_config=QUIET,
        **options,  # type: ignore[arg-type]
    )


def test_tiered_storage_is_off_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_TIERED_BACKEND", raising=False)
    rt = runtime(tmp_path)
    rt.start()
    try:
        assert rt.tiered is None and rt.tier_status() == []
        assert rt.broker is not None and rt.broker.reader is rt.store
        assert not any(loop.name.startswith("tiered") for loop in rt.loops)
    finally:
        rt.stop()


def test_runtime_uploads_and_serves_cold_offsets(tmp_path: Path) -> None:
    rt = runtime(
        tmp_path,
        tiered_backend="posix",
        tiered_path=tmp_path / "tier",
        tiered_config=dataclasses.replace(EAGER, group_commit_timeout_ms=0),
    )
    rt.start()
    try:
        broker, store = rt.broker, rt.store
        assert broker is not None and store is not None
        assert isinstance(rt.tiered, TieredMessageStore) and broker.reader is rt.tiered
        assert {"tiered_upload", "tiered_retention"} <= {loop.name for loop in rt.loops}
        broker.admin.create_topic("orders", read_queue_nums=1, write_queue_nums=1)
        bodies = [f"message {i} ".encode() * 20 for i in range(150)]
        for i, body in enumerate(bodies):
            broker.send("orders", [OutgoingMessage(body, keys=[f"k{i}"])])
        upload = next(loop for loop in rt.loops if loop.name == "tiered_upload")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            upload.wake()
            [status] = rt.tier_status() or [None]
            if status is not None and status["lag"] == 0 and status["commit_offset"] == 150:
                break
            time.sleep(0.05)
        assert status == {
            "topic": "orders",
            "queue_id": 0,
            "tier_min_offset": 0,
            "dispatch_offset": 150,
            "commit_offset": 150,
            "local_max_offset": 150,
            "lag": 0,
            "size_bytes": status["size_bytes"],
        }
        assert status["size_bytes"] > sum(len(b) for b in bodies)
        state = CleanupState()
        while len(store.commit_log.segments.files) > 1:
            cleanup.step(store, state, rt.clock, probe=lambda _p: 0.86, first_delay_ms=0)
        cleanup.step(store, state, rt.clock, probe=lambda _p: 0.1, first_delay_ms=0)
        assert store.min_offset("orders", 0) > 100
        got, offset = [], 0
        while (result := broker.pull(None, "orders", 0, offset, 32)).status is PullStatus.FOUND:
            got += [m.body for m in result.messages]
            offset = result.next_offset
        assert got == bodies
        assert broker.list_offsets("orders", 0, "earliest") == 0
        health = rt.health()
        assert health["tiered"] is True
        assert "tiered_upload" in health["service_state"]
    finally:
        rt.stop()
    assert rt.tiered is None
