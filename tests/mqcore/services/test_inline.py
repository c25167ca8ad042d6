"""The broker process's wiring: which loops run per CAIRN_SERVICES, and the status it shows."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mqcore.format.record import DispatchRequest
from mqcore.message import Message
from mqcore.services import inline, reput
from mqcore.services.config import ServicesConfig
from mqcore.store import MessageStore
from tests.mqcore.services.conftest import SMALL, put_many, reput_all


def test_store_role_per_mode() -> None:
    assert inline.store_role("inline") == "standalone"
    assert inline.store_role("celery") == "broker"
    with pytest.raises(ValueError):
        inline.store_role("both")


def test_inline_loops_make_messages_consumable(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, role=inline.store_role("inline")) as store:
        loops = inline.build_service_loops(store, probe=lambda _p: 0.1)
        names = [loop.name for loop in loops]
        assert names == ["reput", "flush", "cleanup", "index", "disk_guard", "snapshot"]
        dispatched = threading.Event()
        store.add_listener(lambda r: dispatched.set() if r.queue_offset == 9 else None)
        for loop in loops:
            loop.start()
        try:
            put_many(store, 20)
            assert dispatched.wait(5)
            status = inline.services_status(store, loops)
        finally:
            for loop in loops:
                loop.stop()
        assert status["mode"] == "inline"
        assert set(status["services"]) == {
            "reput", "flush", "cleanup", "index", "disk_guard", "snapshot",
        }  # fmt: skip
        assert status["services"]["reput"]["runs"] >= 1
        assert status["writable"] and status["unwritable_reason"] == ""
        assert status["progress"]["generation"] == 1


def test_celery_mode_broker_runs_the_follow_disk_guard_and_snapshot_loops(
    tmp_path: Path,
) -> None:
    broker = MessageStore(tmp_path, SMALL, role=inline.store_role("celery")).open()
    worker = MessageStore(tmp_path, SMALL, role="services").open()
    try:
        loop, guard, snapshot = inline.build_service_loops(
            broker, services=ServicesConfig(follow_interval_ms=3_600_000)
        )
        assert (loop.name, guard.name, snapshot.name) == ("follow", "disk_guard", "snapshot")
        seen: list[DispatchRequest] = []
        last = threading.Event()
        broker.add_listener(lambda r: (seen.append(r), last.set() if len(seen) == 30 else None))
        loop.start()
        try:
            put_many(broker, 30)
            reput_all(worker)
            loop.wake()  # what the Redis subscriber does when the worker reports progress
            assert last.wait(5)
        finally:
            loop.stop()
        assert [r.queue_offset for r in seen] == [i // 2 for i in range(30)]
        status = inline.services_status(broker, [loop])
        assert status["mode"] == "celery"
        assert status["services"]["follow"]["lag_bytes"] == 0
        assert status["lag_bytes"]["reput"] == 0
        assert status["progress"]["reput_offset"] == broker.commit_log.max_offset
    finally:
        reput.release(worker)
        worker.close()
        broker.close()


def test_no_loops_for_a_worker_store(tmp_path: Path) -> None:
    with (
        MessageStore(tmp_path, SMALL, role="broker"),
        MessageStore(tmp_path, SMALL, role="services") as worker,
    ):
        with pytest.raises(ValueError):
            inline.build_service_loops(worker)
        assert worker.put_message(Message("T", b"x")).status.name == "SERVICE_NOT_AVAILABLE"
