"""Per-service locks: one runner per service, ``skipped`` for the others."""

from __future__ import annotations

import threading
from pathlib import Path

from mqcore.services import locks
from mqcore.store import MessageStore
from mqcore.store.files.service_lock import ServiceLock
from tests.mqcore.services.conftest import SMALL


def test_standalone_store_holds_the_continuous_services(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        assert locks.runs_here(store, "reput") and locks.holds(store, "flush")
        for service in ("reput", "flush", "cleanup"):
            assert not ServiceLock(tmp_path, service).try_acquire()
        assert locks.runs_here(store, "index")  # taken per run, not held all along
        locks.release(store, "index")
    for service in ("reput", "flush", "cleanup"):
        lock = ServiceLock(tmp_path, service)
        assert lock.try_acquire()
        lock.release()


def test_exclusive_gives_the_lock_back_and_reports_skipped(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, role="broker"):
        one = MessageStore(tmp_path, SMALL, role="services").open()
        two = MessageStore(tmp_path, SMALL, role="services").open()
        try:
            with (
                locks.exclusive(one, "flush") as held_one,
                locks.exclusive(two, "flush") as held_two,
            ):
                assert held_one and not held_two
                assert locks.skipped(two, "flush").detail["reason"].startswith("lock held by")
            with locks.exclusive(two, "flush") as held:
                assert held
        finally:
            one.close()
            two.close()


def test_one_runner_per_store_object_across_threads(tmp_path: Path) -> None:
    with (
        MessageStore(tmp_path, SMALL, role="broker"),
        MessageStore(tmp_path, SMALL, role="services") as worker,
    ):
        inside, release = threading.Event(), threading.Event()
        results: list[bool] = []

        def first() -> None:
            with locks.exclusive(worker, "flush") as held:
                results.append(held)
                inside.set()
                release.wait(5)

        thread = threading.Thread(target=first)
        thread.start()
        assert inside.wait(5)
        with locks.exclusive(worker, "flush") as held:
            assert not held  # same store object, same file lock: the thread slot decides
        release.set()
        thread.join(5)
        assert results == [True]


def test_broker_runs_no_service(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, role="broker") as broker:
        assert not locks.runs_here(broker, "reput")
        assert "Celery" in locks.skipped(broker, "reput").detail["reason"]
