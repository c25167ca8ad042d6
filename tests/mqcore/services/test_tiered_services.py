"""The tiered services inline: ``tiered_upload`` and ``tiered_retention`` loops join the
store's loops when a tier is given, upload on their own, and report where the others do."""

from __future__ import annotations

import time
from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.services import inline, tiered
from mqcore.store import MessageStore
from mqcore.tiered import MemoryBackend
from mqcore.tiered.storage import TieredStorage
from tests.mqcore.services.conftest import SMALL
from tests.mqcore.tiered.world import EAGER


def test_no_tier_no_tiered_loops(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        names = [loop.name for loop in inline.build_service_loops(store)]
    assert "tiered_upload" not in names and "tiered_retention" not in names


def test_inline_tiered_loops_upload_and_report(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        tier = TieredStorage(MemoryBackend(), tmp_path, EAGER)
        loops = inline.build_service_loops(
            store, probe=lambda _p: 0.1, tier=tier, upload_interval_s=3600
        )
        names = [loop.name for loop in loops]
        assert names == [
            "reput",
            "flush",
            "cleanup",
            "index",
            "disk_guard",
            "snapshot",
            "tiered_upload",
            "tiered_retention",
        ]
        by_name = {loop.name: loop for loop in loops}
        assert by_name["tiered_retention"].interval_s == tiered.RETENTION_INTERVAL_S
        for loop in loops:
            loop.start()
        try:
            for i in range(30):
                store.put_message(Message("Orders", f"order {i}".encode()), queue_id=0)
            deadline = time.monotonic() + 10
            flat = None
            while time.monotonic() < deadline:
                by_name["tiered_upload"].wake()  # the 1 h interval: only wake-ups upload
                flat = tier.flat_file("Orders", 0)
                if flat is not None and flat.commit_offset == 30:
                    break
                time.sleep(0.02)
            assert flat is not None and flat.commit_offset == 30  # 3 groups of 10
            status = inline.services_status(store, loops)
        finally:
            for loop in loops:
                loop.stop()
    upload = status["services"]["tiered_upload"]
    assert upload["runs"] >= 1 and upload["errors"] == 0
    assert upload["last_result"]["service"] == "tiered_upload"
    assert "messages_committed" in upload["last_result"]["detail"]
    assert "tiered_retention" in status["services"]


def test_steps_report_what_they_did(tmp_path: Path) -> None:
    clock = FakeClock()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        tier = TieredStorage(MemoryBackend(), tmp_path, EAGER, clock=clock)
        for i in range(5):
            store.put_message(Message("Orders", f"order {i}".encode()), queue_id=1)
        store.dispatch_until_caught_up()
        first = tiered.upload(store, tier)
        assert first.progressed and first.detail["messages_appended"] == 5
        assert first.detail["messages_committed"] == 0  # under every threshold
        forced = tiered.upload(store, tier, force=True)
        assert forced.detail["messages_committed"] == 5 and forced.status == "ok"
        assert not tiered.upload(store, tier).progressed
        kept = tiered.retention(tier, None)
        assert kept.service == "tiered_retention" and kept.detail["deleted_segments"] == []
