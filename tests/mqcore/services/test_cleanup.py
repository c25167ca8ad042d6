"""Cleanup (spec 6.4, 6.5) driven by a FakeClock and a fake disk-usage probe."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.message import Message
from mqcore.services import cleanup, consumed, deletions, follow, reput
from mqcore.services.cleanup import CleanupState
from mqcore.services.deletions import Deletion
from mqcore.services.disk import Thresholds, usage_ratio
from mqcore.store import GetStatus, MessageStore, PutStatus, StoreConfig
from tests.mqcore.services.conftest import SMALL, drain, put_many, reput_all

HOUR_MS = 3_600_000


def config(clock: FakeClock, **changes: object) -> StoreConfig:
    """SMALL, deleting only outside the clock's current hour unless asked."""
    hour = time.localtime(clock.now_ms() / 1000).tm_hour
    defaults: dict[str, object] = {"delete_when": f"{(hour + 12) % 24:02d}"}
    return dataclasses.replace(SMALL, **(defaults | changes))


def commitlog_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "commitlog").iterdir())


def age(store: MessageStore, count: int, hours: float, clock: FakeClock) -> None:
    """Make the first ``count`` CommitLog files ``hours`` old by the fake clock."""
    then = (clock.now_ms() - hours * HOUR_MS) / 1000
    for mapped in store.commit_log.segments.files[:count]:
        os.utime(mapped.path, (then, then))


def run(
    store: MessageStore, clock: FakeClock, state: CleanupState, usage: float = 0.1
) -> dict[str, object]:
    result = cleanup.step(store, state, clock, probe=lambda _path: usage, first_delay_ms=0)
    assert result.status == "ok", result
    return result.detail


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(now_ms=time.time_ns() // 1_000_000)  # file ages are real mtimes


def test_expired_files_go_in_the_delete_hour_oldest_first(tmp_path: Path, clock: FakeClock) -> None:
    hour = time.localtime(clock.now_ms() / 1000).tm_hour
    with MessageStore(tmp_path, config(clock, delete_when=f"{hour:02d}"), clock=clock) as store:
        put_many(store, 600)
        reput_all(store)
        files = commitlog_names(tmp_path)
        assert len(files) >= 6
        age(store, 3, 73, clock)
        age_files = store.commit_log.segments.files
        os.utime(
            age_files[4].path, ((clock.now_ms() - 80 * HOUR_MS) / 1000,) * 2
        )  # after a fresh one
        queue_files_before = len(list((tmp_path / "consumequeue" / "Orders" / "0").iterdir()))
        index_files_before = len(store.index.files)

        detail = run(store, clock, CleanupState())

        assert detail["why"] == "delete_when"
        # The oldest three go; the fourth is fresh, so the (old) fifth stays: no holes.
        assert detail["deleted_commit_log_files"] == files[:3]
        assert commitlog_names(tmp_path) == files[3:]
        min_offset = store.commit_log.min_offset
        assert min_offset == int(files[3])
        # ConsumeQueue files wholly below the new minimum went, and min offsets moved.
        assert detail["deleted_queue_files"] > 0
        assert (
            len(list((tmp_path / "consumequeue" / "Orders" / "0").iterdir())) < queue_files_before
        )
        for queue_id in (0, 1):
            low = store.min_offset("Orders", queue_id)
            first = store.get_messages("g", "Orders", queue_id, low, 1).messages[0]
            assert first.phys_offset >= min_offset
            assert (
                store.get_messages("g", "Orders", queue_id, 0, 1).status
                is GetStatus.OFFSET_TOO_SMALL
            )
        assert detail["deleted_index_files"] == index_files_before - len(store.index.files) > 0
        assert all(f.end_phys_offset >= min_offset for f in store.index.files[:-1])


def test_outside_the_delete_hour_nothing_goes_unless_armed(
    tmp_path: Path, clock: FakeClock
) -> None:
    with MessageStore(tmp_path, config(clock), clock=clock) as store:
        put_many(store, 300)
        reput_all(store)
        age(store, 2, 100, clock)
        state = CleanupState()
        assert run(store, clock, state)["deleted_commit_log_files"] == []
        cleanup.request_manual_delete(state)
        detail = run(store, clock, state)
        assert detail["why"] == "manual"
        assert len(detail["deleted_commit_log_files"]) == 2
        assert state.manual_runs == cleanup.MANUAL_DELETE_RUNS - 1


def test_force_ratio_keeps_young_files_unless_the_operator_opted_in(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore(tmp_path, config(clock, delete_file_batch_max=2), clock=clock) as store:
        put_many(store, 600)
        reput_all(store)
        files = commitlog_names(tmp_path)
        state = CleanupState()
        with caplog.at_level(logging.WARNING, logger="mqcore.services.cleanup"):
            for _ in range(3):
                detail = run(store, clock, state, usage=0.86)  # over the 85 % force ratio
                assert detail["why"] == "disk" and detail["deleted_commit_log_files"] == []
        assert commitlog_names(tmp_path) == files  # nothing younger than 72 h goes
        held = str(detail["held_back"])
        assert files[0] in held and "younger than the retention" in held
        assert "CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED=true" in held
        said = [r.getMessage() for r in caplog.records if "forced cleanup keeps" in r.getMessage()]
        assert len(said) == 1  # logged when it starts, not on every run
        # 86 % is under the warning ratio: puts go on, so no condition is shown.
        assert store.writable and not store.health.conditions()


def test_force_ratio_with_the_opt_in_cleans_immediately_in_batches_never_the_last(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(clock, delete_file_batch_max=2, disk_clean_forcibly_unconsumed=True)
    audited: list[Deletion] = []
    with MessageStore(tmp_path, cfg, clock=clock) as store:
        put_many(store, 600)
        reput_all(store)
        files = commitlog_names(tmp_path)
        state = CleanupState()
        deleted: list[str] = []
        with caplog.at_level(logging.WARNING, logger="mqcore.services.cleanup"):
            for _ in range(len(files) + 2):
                detail = cleanup.step(
                    store,
                    state,
                    clock,
                    probe=lambda _p: 0.86,
                    first_delay_ms=0,
                    on_delete=audited.append,
                ).detail
                assert detail["why"] == "disk"
                assert len(detail["deleted_commit_log_files"]) <= 2
                assert detail["forced_deletions"] == detail["deleted_commit_log_files"]
                deleted += detail["deleted_commit_log_files"]
        assert deleted == files[:-1]
        assert commitlog_names(tmp_path) == files[-1:]
        assert store.writable  # 86 % is under the 90 % warning ratio
        assert drain(store, "Orders", 0, store.min_offset("Orders", 0))  # the last file's
        # Each deletion: logged with its range and why, audited, and a health problem.
        assert [d.file for d in audited] == deleted
        first = audited[0]
        assert (first.first_offset, first.end_offset) == (0, SMALL.commitlog_file_size)
        assert first.reason == "forced" and first.detail["disk_usage"] == 0.86
        logged = [
            r.getMessage() for r in caplog.records if "deleted CommitLog segment" in r.getMessage()
        ]
        assert len(logged) == len(deleted)
        assert f"{files[0]} (offsets 0..{SMALL.commitlog_file_size}): forced" in logged[0]
        problems = {p.id: p for p in store.health.problems()}
        assert set(problems) == {f"forced-cleanup:{name}" for name in deleted}
        assert "before the retention" in problems[f"forced-cleanup:{files[0]}"].summary


def test_under_pressure_expired_files_stay_while_a_group_still_needs_them(
    tmp_path: Path, clock: FakeClock
) -> None:
    with MessageStore(tmp_path, config(clock), clock=clock) as store:
        put_many(store, 600)
        reput_all(store)
        files = commitlog_names(tmp_path)
        age(store, 4, 100, clock)  # the first four are past the 72 h retention
        # billing consumed queue 0 whole, queue 1 up to its first message in the third file.
        queue = store.queues.get("Orders", 1)
        assert queue is not None
        units = [queue.unit_at(offset) for offset in range(queue.max_offset)]
        stop = next(
            u.queue_offset for u in units if u is not None and u.phys_offset >= int(files[2])
        )
        committed = [
            ("group billing", "Orders", 0, store.max_offset("Orders", 0)),
            ("group billing", "Orders", 1, stop),
        ]

        def needed() -> consumed.Needed | None:
            return consumed.lowest_needed(store, committed)

        state = CleanupState()
        detail = cleanup.step(
            store, state, clock, probe=lambda _p: 0.80, first_delay_ms=0, needed=needed
        ).detail
        assert detail["why"] == "disk"  # over 75 %: deletion at any hour, expired files only
        assert detail["deleted_commit_log_files"] == files[:2]  # the third holds unconsumed data
        held = str(detail["held_back"])
        assert files[2] in held and "group billing has not consumed Orders queue 1" in held
        # Once billing has consumed everything, the rest of the expired files go.
        committed[1] = ("group billing", "Orders", 1, store.max_offset("Orders", 1))
        detail = cleanup.step(
            store, state, clock, probe=lambda _p: 0.80, first_delay_ms=0, needed=needed
        ).detail
        assert detail["deleted_commit_log_files"] == files[2:4]
        assert detail["held_back"] == ""


def test_in_the_delete_hour_expired_files_go_consumed_or_not(
    tmp_path: Path, clock: FakeClock
) -> None:
    hour = time.localtime(clock.now_ms() / 1000).tm_hour
    with MessageStore(tmp_path, config(clock, delete_when=f"{hour:02d}"), clock=clock) as store:
        put_many(store, 300)
        reput_all(store)
        files = commitlog_names(tmp_path)
        age(store, 2, 100, clock)
        nobody_read = [("group late", "Orders", q, 0) for q in (0, 1)]
        audited: list[Deletion] = []
        detail = cleanup.step(
            store,
            CleanupState(),
            clock,
            probe=lambda _p: 0.10,
            first_delay_ms=0,
            needed=lambda: consumed.lowest_needed(store, nobody_read),
            on_delete=audited.append,
        ).detail
        assert detail["deleted_commit_log_files"] == files[:2]  # the retention is the contract
        assert [d.reason for d in audited] == ["expired", "expired"]
        assert audited[0].detail["age_hours"] >= 100
        assert not store.health.problems()  # only forced deletions are problems


def test_when_needs_cannot_be_worked_out_pressure_deletes_nothing_guarded(
    tmp_path: Path, clock: FakeClock
) -> None:
    with MessageStore(tmp_path, config(clock), clock=clock) as store:
        put_many(store, 300)
        reput_all(store)
        files = commitlog_names(tmp_path)
        age(store, 2, 100, clock)

        def broken() -> consumed.Needed | None:
            raise OSError("consumerOffset.json unreadable")

        detail = cleanup.step(
            store, CleanupState(), clock, probe=lambda _p: 0.95, first_delay_ms=0, needed=broken
        ).detail
        assert detail["deleted_commit_log_files"] == []
        assert commitlog_names(tmp_path) == files
        assert "unknown" in str(detail["held_back"])
        # The disk is full and cleanup cannot help: the health says why, and what to do.
        conditions = {c.id: c for c in store.health.conditions()}
        assert "disk full: puts refused" in conditions["disk-full"].summary
        assert "CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED" in conditions["cleanup-held-back"].summary


def test_max_used_ratio_deletes_only_expired_files(tmp_path: Path, clock: FakeClock) -> None:
    with MessageStore(tmp_path, config(clock), clock=clock) as store:
        put_many(store, 400)
        reput_all(store)
        age(store, 1, 73, clock)
        detail = run(store, clock, CleanupState(), usage=0.80)  # over 75 %, under 85 %
        assert detail["why"] == "disk"
        assert len(detail["deleted_commit_log_files"]) == 1


def test_disk_full_refuses_puts_until_cleanup_frees_space(tmp_path: Path, clock: FakeClock) -> None:
    usage = {"ratio": 0.95}
    cfg = config(clock, delete_file_batch_max=1, disk_clean_forcibly_unconsumed=True)
    with MessageStore(tmp_path, cfg, clock=clock) as store:
        put_many(store, 300)
        reput_all(store)
        state = CleanupState()
        # Deleting one file does not bring the (fake) disk under the warning ratio.
        detail = cleanup.step(
            store, state, clock, probe=lambda _p: usage["ratio"], first_delay_ms=0
        ).detail
        assert detail["disk_full"] and len(detail["deleted_commit_log_files"]) == 1
        assert not store.writable
        assert "disk full" in store.unwritable_reason and "90%" in store.unwritable_reason
        refused = store.put_message(Message("Orders", b"late"))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "disk full" in getattr(refused, "reason", "")
        [condition] = [c for c in store.health.conditions() if c.id == "disk-full"]
        assert condition.summary.startswith("disk full: puts refused (")

        # The next run deletes another file, after which the disk is fine: puts resume in
        # the same run, not ten seconds later.
        def probe(_path: str) -> float:
            return usage["ratio"]

        original = store.commit_log.segments.delete_first_files_while

        def delete_then_free(*args: object, **kwargs: object) -> int:
            count = original(*args, **kwargs)  # type: ignore[arg-type]
            usage["ratio"] = 0.5
            return count

        store.commit_log.segments.delete_first_files_while = delete_then_free  # type: ignore[method-assign]
        detail = cleanup.step(store, state, clock, probe=probe, first_delay_ms=0).detail
        assert not detail["disk_full"]
        assert store.writable and store.unwritable_reason == ""
        assert not store.health.conditions()
        assert store.put_message(Message("Orders", b"accepted")).ok


def test_the_disk_is_measured_at_once_but_deletion_waits_for_the_first_delay(
    tmp_path: Path, clock: FakeClock
) -> None:
    cfg = config(clock, disk_clean_forcibly_unconsumed=True)
    with MessageStore(tmp_path, cfg, clock=clock) as store:
        put_many(store, 300)
        state = CleanupState()
        first = cleanup.step(store, state, clock, probe=lambda _p: 0.99, first_delay_ms=60_000)
        assert first.detail["first_run_in_ms"] == 60_000 and first.detail["disk_full"]
        assert not store.writable  # measured from the first call
        assert "deleted_commit_log_files" not in first.detail
        clock.advance(60_000)
        later = cleanup.step(store, state, clock, probe=lambda _p: 0.99).detail
        assert later["disk_full"] and later["deleted_commit_log_files"]


def test_queues_are_cleaned_only_when_the_minimum_moved(tmp_path: Path, clock: FakeClock) -> None:
    with MessageStore(tmp_path, config(clock), clock=clock) as store:
        put_many(store, 100)
        reput_all(store)
        state = CleanupState()
        run(store, clock, state)
        assert state.last_min_offset == 0
        calls: list[int] = []
        store.queues.clean_expired = lambda offset: calls.append(offset) or 0  # type: ignore[method-assign]
        run(store, clock, state)
        assert calls == []


def test_thresholds_are_clamped_as_rocketmq_does() -> None:
    wild = StoreConfig(
        disk_max_used_space_ratio=99,
        disk_space_warning_level_ratio=99,
        disk_space_clean_forcibly_ratio=10,
    )
    assert Thresholds.of(wild) == Thresholds(max_used=0.95, warning=0.90, force=0.30)
    assert Thresholds.of(StoreConfig()) == Thresholds(max_used=0.75, warning=0.90, force=0.85)


def test_usage_ratio_measures_a_real_partition(tmp_path: Path) -> None:
    ratio = usage_ratio(str(tmp_path / "not" / "created" / "yet"))
    assert 0.0 <= ratio <= 1.0
    assert ratio == round(ratio, 2)  # RocketMQ rounds up to whole percent


def test_worker_cleanup_reaches_the_broker(tmp_path: Path, clock: FakeClock) -> None:
    """Celery mode: the worker unlinks files; the broker drops its mappings, moves its
    minimum and takes the disk-full flag, through the progress file."""
    cfg = config(clock, delete_file_batch_max=3, disk_clean_forcibly_unconsumed=True)
    broker = MessageStore(tmp_path, cfg, role="broker", clock=clock).open()
    worker = MessageStore(tmp_path, cfg, role="services", clock=clock).open()
    cleaner = MessageStore(tmp_path, cfg, role="services", clock=clock).open()
    try:
        put_many(broker, 600)
        reput_all(worker)
        follow.step(broker)
        files = commitlog_names(tmp_path)
        doomed = broker.commit_log.segments.files[0]

        detail = cleanup.step(
            cleaner,
            CleanupState(),
            clock,
            probe=lambda _p: 0.95,
            first_delay_ms=0,
            on_delete=deletions.journal_hook(tmp_path),
        ).detail

        assert detail["deleted_commit_log_files"] == files[:3]
        # The worker cannot write the audit log: the broker side drains its journal.
        audited: list[Deletion] = []
        assert deletions.drain_journal(tmp_path, audited.append) == 3
        assert [(d.file, d.reason) for d in audited] == [(name, "forced") for name in files[:3]]
        assert deletions.drain_journal(tmp_path, audited.append) == 0  # recorded once
        assert commitlog_names(tmp_path) == files[3:]
        assert detail["deleted_queue_files"] > 0 and detail["deleted_index_files"] > 0
        min_offset = int(files[3])
        for queue_dir in (tmp_path / "consumequeue" / "Orders").iterdir():
            for name in sorted(p.name for p in queue_dir.iterdir())[:-1]:
                last = (queue_dir / name).read_bytes()[-20:]
                assert int.from_bytes(last[:8], "big") >= min_offset  # nothing expired left
        # Disk full travels to the broker, which refuses puts with the reason.
        follow.step(broker)
        assert not broker.writable and "disk full" in broker.unwritable_reason
        assert broker.put_message(Message("Orders", b"x")).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert doomed.is_closed  # the broker unmapped the deleted file: space is back
        assert broker.commit_log.min_offset == int(files[3])
        low = broker.min_offset("Orders", 0)
        assert low > 0
        assert broker.get_messages("g", "Orders", 0, low, 1).messages[0].phys_offset >= int(
            files[3]
        )
        # The reput holder forgets the deleted files too, and carries on.
        run(cleaner, clock, CleanupState(), usage=0.10)
        follow.step(broker)
        assert broker.writable
        put_many(broker, 10, start=600)
        reput_all(worker)
        assert worker.commit_log.min_offset == int(files[3])
        assert drain(broker, "Orders", 0, low)[-1] == b"order 608"
    finally:
        cleaner.close()
        reput.release(worker)
        worker.close()
        broker.close()
