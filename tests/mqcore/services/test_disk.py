"""The disk guard (``disk.guard_step``): puts refused over the warning ratio with the usage
in the health, accepted again below it, the cleanup runner woken meanwhile; an append's own
refusal for lack of space lifted once the disk has room. Driven with a fake probe."""

from __future__ import annotations

from pathlib import Path

from mqcore.message import Message
from mqcore.services import disk
from mqcore.store import MessageStore, PutStatus
from mqcore.store.sharing.progress import Slot
from tests.mqcore.services.conftest import SMALL


def test_over_the_warning_ratio_puts_are_refused_and_cleanup_is_woken(tmp_path: Path) -> None:
    usage = {"ratio": 0.93}
    woken: list[bool] = []
    with MessageStore(tmp_path, SMALL) as store:
        result = disk.guard_step(
            store, probe=lambda _p: usage["ratio"], on_full=lambda: woken.append(True)
        )
        assert result.detail["disk_full"] and not result.detail["writable"]
        assert woken == [True]
        assert "CommitLog partition is 93% used" in store.unwritable_reason
        refused = store.put_message(Message("Orders", b"x"))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        [condition] = store.health.conditions()
        assert condition.id == "disk-full" and condition.summary.startswith(
            "disk full: puts refused ("
        )
        assert condition.detail["reasons"]["disk"].startswith("disk full: the CommitLog partition")
        usage["ratio"] = 0.50
        result = disk.guard_step(
            store, probe=lambda _p: usage["ratio"], on_full=lambda: woken.append(True)
        )
        assert not result.detail["disk_full"] and store.writable and woken == [True]
        assert store.health.conditions() == []
        assert store.put_message(Message("Orders", b"y")).ok


def test_the_consume_queue_partition_counts_too(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        disk.guard_step(store, probe=lambda path: 0.95 if "consumequeue" in path else 0.2)
        assert (
            not store.writable and "ConsumeQueue partition is 95% used" in store.unwritable_reason
        )


def test_room_on_the_disk_lifts_an_append_s_refusal_for_lack_of_space(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        store.set_writable(False, "disk full: reserving 16384 bytes failed", source="space")
        disk.guard_step(store, probe=lambda _p: 0.95)
        assert store.refusal_sources == {"space", "disk"}  # still full: both stay
        disk.guard_step(store, probe=lambda _p: 0.40)
        assert store.writable  # an append will try to reserve again
        # A refusal the guard does not own stays.
        store.set_writable(False, "disk full: reput paused", source="reput")
        disk.guard_step(store, probe=lambda _p: 0.40)
        assert store.refusal_sources == {"reput"}


def test_a_broker_s_guard_leaves_the_shared_disk_flags_to_the_worker(tmp_path: Path) -> None:
    broker = MessageStore(tmp_path, SMALL, role="broker").open()
    try:
        assert broker.progress is not None
        disk.guard_step(broker, probe=lambda _p: 0.95)
        assert not broker.writable
        assert broker.progress.get(Slot.DISK_FLAGS) == 0  # the worker's cleanup writes it
    finally:
        broker.close()
