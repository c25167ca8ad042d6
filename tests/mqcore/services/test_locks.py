"""Per-service locks: one runner per service, ``skipped`` for the others."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mqcore.errors import StoreLockedError
from mqcore.services import locks
from mqcore.store import MessageStore
from mqcore.store.files.service_lock import ServiceLock, ServiceLocks
from tests.mqcore.services.conftest import SMALL


def test_service_lock_is_exclusive_and_says_who_holds_it(tmp_path: Path) -> None:
    first, second = ServiceLock(tmp_path, "reput"), ServiceLock(tmp_path, "reput")
    assert first.try_acquire() and first.try_acquire()  # idempotent for its holder
    assert not second.try_acquire()
    assert first.holder().startswith(f"{os.getpid()} ")
    assert ServiceLock(tmp_path, "flush").try_acquire()  # another service: independent
    first.release()
    assert second.try_acquire()
    second.release()
    assert (tmp_path / "locks" / "reput").exists()


def test_service_locks_are_all_or_none(tmp_path: Path) -> None:
    taken = ServiceLock(tmp_path, "cleanup")
    assert taken.try_acquire()
    group = ServiceLocks(tmp_path, ("reput", "flush", "cleanup"))
    with pytest.raises(StoreLockedError, match="cleanup service"):
        group.acquire_all()
    assert ServiceLock(tmp_path, "reput").try_acquire()  # released again after the failure
    taken.release()


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
