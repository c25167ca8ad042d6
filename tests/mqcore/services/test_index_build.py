"""Index building: side builds installed by the reput holder, offline queue rebuilds, the
Spark hand-off seam."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import StoreError
from mqcore.services import follow, index_build, reput
from mqcore.services.index_build import BuildRequest, IndexBuildJob
from mqcore.store import MessageStore
from mqcore.store.consume_queue import CQ_UNIT
from mqcore.store.index.index_service import IndexService
from mqcore.store.sharing.progress import Slot
from tests.mqcore.services.conftest import SMALL, drain, put_many, reput_all


def keys_found(store: MessageStore, keys: range) -> list[int]:
    return [i for i in keys if store.query_by_key("Orders", f"K{i}", 0, 2**62)]


def lose_index(root: Path) -> None:
    shutil.rmtree(root / "index")


def test_lost_index_is_rebuilt_with_progress(tmp_path: Path) -> None:
    clock = FakeClock()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        put_many(store, 500)
    lose_index(tmp_path)
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        assert keys_found(store, range(0, 500, 50)) == []  # recovery leaves it lost
        reports: list[IndexBuildJob] = []
        job = index_build.rebuild(store, clock, max_bytes=8 * 1024, on_progress=reports.append)
        assert job.state == "installed"
        fractions = [r.done_fraction for r in reports]
        assert len(reports) > 3 and fractions == sorted(fractions) and fractions[-1] == 1.0
        assert job.records == 500
        assert keys_found(store, range(500)) == list(range(500))
        assert store.progress is not None and store.progress.get(Slot.INDEX_GENERATION) == 1
        # The store goes on indexing into the installed files.
        put_many(store, 10, start=500)
        reput_all(store)
        assert keys_found(store, range(500, 510)) == list(range(500, 510))
    with MessageStore(tmp_path, SMALL, clock=clock) as store:  # and it survives a restart
        assert keys_found(store, range(0, 510, 7)) == list(range(0, 510, 7))


def test_range_rebuild_keeps_older_files_untouched(tmp_path: Path) -> None:
    clock = FakeClock()
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        for start in range(0, 800, 100):
            clock.advance(1000)  # distinct index file names
            put_many(store, 100, start=start)
            reput_all(store)
        files = store.index.files
        assert len(files) >= 4
        keep = files[:2]
        kept = {f.name: Path(f.path).read_bytes() for f in keep}
        middle = keep[-1].end_phys_offset + 1
        # Damage the later files: their entries go, the files stay.
        for f in files[2:]:
            with open(f.path, "r+b") as raw:
                raw.seek(40)
                raw.write(bytes(SMALL.index_hash_slots * 4))
        assert keys_found(store, range(600, 800, 10)) == []
        clock.advance(1000)
        job = index_build.rebuild(store, clock, from_offset=middle)
        assert job.kept_files == list(kept)
        assert job.from_offset >= middle - 1
        for name, data in kept.items():
            assert (tmp_path / "index" / name).read_bytes() == data
        assert keys_found(store, range(0, 800, 9)) == list(range(0, 800, 9))


def test_reput_installs_a_build_made_by_another_store(tmp_path: Path) -> None:
    """Celery mode: a worker's index task builds aside while reput goes on; the reput
    holder installs it; the broker's queries switch to it."""
    clock = FakeClock()
    broker = MessageStore(tmp_path, SMALL, role="broker", clock=clock).open()
    worker = MessageStore(tmp_path, SMALL, role="services", clock=clock).open()
    builder = MessageStore(tmp_path, SMALL, role="services", clock=clock).open()
    try:
        put_many(broker, 300)
        reput_all(worker)
        clock.advance(1000)
        index_build.start(builder, clock)
        first = index_build.step(builder, clock, max_bytes=4 * 1024)
        assert first.progressed and first.detail["job"]["state"] == "building"
        put_many(broker, 50, start=300)  # reput goes on meanwhile
        reput_all(worker)
        while index_build.step(builder, clock, max_bytes=4 * 1024).progressed:
            pass
        assert index_build.load_job(tmp_path).state == "ready"  # type: ignore[union-attr]
        put_many(broker, 20, start=350)
        result = reput.step(worker)
        assert result.detail["index_installed"]
        reput_all(worker)
        follow.step(broker)
        assert keys_found(broker, range(0, 370, 3)) == list(range(0, 370, 3))
        assert index_build.load_job(tmp_path).state == "installed"  # type: ignore[union-attr]
        assert not (tmp_path / "rebuild" / "index").exists()
        # A second build may start once the first is installed, but not while one runs.
        index_build.start(builder, clock)
        with pytest.raises(StoreError, match="already building"):
            index_build.start(builder, clock)
    finally:
        builder.close()
        reput.release(worker)
        worker.close()
        broker.close()


def test_builder_hand_off(tmp_path: Path) -> None:
    """The Spark seam: the first step hands the range to the builder, which writes index
    files into ``request.index_dir``; the rest goes as usual."""
    clock = FakeClock()
    requests: list[BuildRequest] = []
    with MessageStore(tmp_path, SMALL, clock=clock) as store:
        put_many(store, 300)
    lose_index(tmp_path)
    with MessageStore(tmp_path, SMALL, clock=clock) as store:

        def fake_spark(request: BuildRequest) -> int:
            requests.append(request)
            # Stand-in for the Spark job: index the range with mqcore's own writer.
            index = IndexService(
                Path(request.index_dir).parent, request.hash_slots, request.max_entries, clock
            )
            index.load(True, 0)
            for item in store.commit_log.iter_dispatch(
                request.from_offset, request.to_offset, 1 << 62, store.delay_levels_ms
            ):
                if not isinstance(item, int):
                    index.build_index(
                        item.topic, item.phys_offset, item.store_timestamp,
                        item.uniq_key, item.keys, item.sys_flag,
                    )  # fmt: skip
            index.close()
            request.progress(request.to_offset)
            return request.to_offset

        job = index_build.rebuild(store, clock, builder=fake_spark)
        assert job.state == "installed" and job.handed_off
        [request] = requests
        assert (request.from_offset, request.to_offset) == (0, store.commit_log.max_offset)
        assert request.index_dir == str(tmp_path / "rebuild" / "index")
        assert keys_found(store, range(0, 300, 11)) == list(range(0, 300, 11))


def test_offline_queue_rebuild(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 400)
        reput_all(store)
        queue = store.queues.get("Orders", 0)
        assert queue is not None
        first = queue.segments.first()
        assert first is not None
        first.write_at(5 * 20, CQ_UNIT.pack(12345, 99, 0) * 3)  # garbage units mid-queue
        progress: list[tuple[int, int]] = []
        total = index_build.rebuild_queues(
            store, on_progress=lambda done, end: progress.append((done, end)), max_bytes=4096
        )
        assert total == 400
        assert progress[-1][0] == progress[-1][1] == store.commit_log.max_offset
        assert drain(store, "Orders", 0) == [f"order {i}".encode() for i in range(0, 400, 2)]
        assert keys_found(store, range(0, 400, 13)) == list(range(0, 400, 13))


def test_offline_queue_rebuild_quarantines_a_record_gone_bad_and_keeps_every_offset(
    tmp_path: Path,
) -> None:
    """A record's TOTALSIZE flipped (+512) in the first segment after the start (so that
    the start check did not meet it): the offline rebuild's walk quarantines the record
    instead of skipping 512 more bytes of good records, and the rebuilt queue holds a blank
    at its offset and every other record at its own."""
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 400)
        reput_all(store)
    with MessageStore(tmp_path, SMALL) as store:
        queue = store.queues.get("Orders", 0)
        assert queue is not None
        unit = queue.unit_at(10)
        assert unit is not None and unit.phys_offset < SMALL.commitlog_file_size
        phys, size = unit.phys_offset, unit.size
        with open(tmp_path / "commitlog" / f"{0:020d}", "r+b") as f:
            f.seek(phys + 2)
            old = f.read(1)[0]
            f.seek(phys + 2)
            f.write(bytes([old ^ 0x02]))
        total = index_build.rebuild_queues(store, max_bytes=4096)
        assert total == 399
        [entry] = store.quarantine.ranges
        assert (entry.offset, entry.length, entry.found_by) == (phys, size, "rebuild")
        expected = [f"order {i}".encode() for i in range(0, 400, 2) if i != 20]
        assert drain(store, "Orders", 0) == expected
        assert drain(store, "Orders", 1) == [f"order {i}".encode() for i in range(1, 400, 2)]
        queue = store.queues.get("Orders", 0)
        assert queue is not None and queue.max_offset == 200
        assert keys_found(store, range(400)) == [i for i in range(400) if i != 20]


def test_queue_rebuild_needs_the_store_to_itself(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, role="broker") as broker:
        with pytest.raises(StoreError, match="stop the broker"):
            index_build.rebuild_queues(broker)
        with pytest.raises(StoreError):
            index_build.rebuild(broker, FakeClock())


def test_step_is_idle_without_a_job(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        result = index_build.step(store, FakeClock())
        assert not result.progressed and result.detail == {"job": None}
        assert not index_build.apply_ready(store)
