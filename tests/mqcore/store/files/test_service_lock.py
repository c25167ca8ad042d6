"""Per-service lock files, ``<root>/locks/<service>``: one holder each, taken all or none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mqcore.errors import StoreLockedError
from mqcore.store.files.service_lock import ServiceLock, ServiceLocks


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
