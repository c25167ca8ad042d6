"""The CommitLog pre-fault thread (``prefault.py``): pages ahead of the writer are populated
without a byte written, the records are those of a store without it, it follows rolls, it
stops on close, and a missing or failing ``madvise`` only disables it."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import ValidationError
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.files.libc import MADV_POPULATE_WRITE, map_address
from mqcore.store.files.libc import madvise as libc_madvise
from mqcore.store.files.prefault import Prefaulter, start_prefaulter
from mqcore.store.files.segments import MappedFileQueue
from mqcore.store.recovery.geometry import infer_geometry
from mqcore.store.recovery.verify import check_store

T0 = 1_700_000_000_000
PAGE = mmap.PAGESIZE
SEGMENT = 64 * 1024


def _config(prefault: int) -> StoreConfig:
    return StoreConfig(
        commitlog_file_size=SEGMENT,
        consume_queue_file_entries=50,
        index_hash_slots=7,
        index_max_entries=60,
        commitlog_prefault_bytes=prefault,
    )


def _batch(start: int, count: int) -> list[Message]:
    return [
        Message(topic="T", body=bytes([i % 251]) * 300, tags="a", keys=f"k{i}", born_timestamp=T0)
        for i in range(start, start + count)
    ]


def _populate_supported() -> bool:
    madvise = libc_madvise()
    if madvise is None:
        return False
    buf = mmap.mmap(-1, PAGE)
    try:
        return madvise(map_address(buf), PAGE, MADV_POPULATE_WRITE) == 0
    finally:
        buf.close()


needs_populate = pytest.mark.skipif(
    not _populate_supported(), reason="madvise(MADV_POPULATE_WRITE) needs Linux >= 5.14"
)


def _queue(tmp_path: Path) -> MappedFileQueue:
    queue = MappedFileQueue(tmp_path / "commitlog", SEGMENT)
    queue.load()
    return queue


@needs_populate
def test_step_populates_ahead_of_the_writer_without_writing(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    segment = queue.last_or_create(0)
    segment.append(b"\x01" * 1000)
    prefaulter = Prefaulter(queue, 5 * PAGE, chunk_bytes=2 * PAGE)
    steps = [prefaulter.step() for _ in range(4)]
    # From the page holding the write position to 5 pages past it, two pages a step.
    assert steps == [True, True, False, False]
    assert prefaulter.populated_bytes == 5 * PAGE + 1000  # [0, 1000 + 5 pages)
    assert prefaulter.enabled
    # Woken again once the writer has used half of the window.
    assert prefaulter.trigger == 1000 + 5 * PAGE - 5 * PAGE // 2
    assert segment.read(0, 1000) == b"\x01" * 1000
    assert not any(segment.buffer[1000:SEGMENT])  # the tail stays zeros
    queue.close()
    assert (tmp_path / "commitlog" / f"{0:020d}").read_bytes()[1000:] == bytes(SEGMENT - 1000)


@needs_populate
def test_step_follows_the_last_segment_and_stops_at_its_end(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    first = queue.last_or_create(0)
    first.append(b"\x02" * (SEGMENT - PAGE))
    prefaulter = Prefaulter(queue, 4 * PAGE)
    assert prefaulter.step() is False  # one page left in the file: populated at once
    assert prefaulter.populated_bytes == PAGE
    assert prefaulter.trigger == SEGMENT - 1  # the next segment's first append wakes it
    first.fill_to_end(b"\x00" * 8)
    second = queue.last_or_create(0)
    second.append(b"\x03" * 10)
    assert SEGMENT + 10 > prefaulter.trigger
    assert prefaulter.step() is False
    assert prefaulter.populated_bytes == PAGE + 4 * PAGE + 10
    assert not any(second.buffer[10:])
    queue.close()


def test_a_failing_madvise_disables_it(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    queue.last_or_create(0).append(b"\x01" * 10)
    calls: list[tuple[int, int]] = []

    def failing(address: int, length: int, advice: int) -> int:
        calls.append((length, advice))
        return -1  # EINVAL on a kernel before 5.14

    prefaulter = Prefaulter(queue, 4 * PAGE, madvise=failing)
    assert prefaulter.step() is False
    assert not prefaulter.enabled
    assert prefaulter.step() is False
    assert calls == [(4 * PAGE + 10, MADV_POPULATE_WRITE)]  # tried once, from page 0
    queue.close()


def test_a_closed_segment_is_skipped_not_disabled(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    queue.last_or_create(0).append(b"\x01" * 10)
    calls: list[int] = []

    def counting(address: int, length: int, advice: int) -> int:
        calls.append(length)
        return 0

    prefaulter = Prefaulter(queue, 4 * PAGE, madvise=counting)
    queue.close()
    assert prefaulter.step() is False
    assert prefaulter.enabled
    assert calls == []  # never called on an unmapped file


def test_records_are_those_of_a_store_without_it(tmp_path: Path) -> None:
    contents = []
    for prefault in (0, 8 * PAGE):
        root = tmp_path / f"p{prefault}"
        with MessageStore(root, _config(prefault), clock=FakeClock(T0)) as store:
            assert (store.prefaulter is not None) == (prefault > 0)
            for i in range(0, 600, 30):  # ~190 KB: rolls over three segments
                results = store.put_messages(_batch(i, 30))
                assert all(r.ok for r in results)
                if store.prefaulter is not None:
                    store.prefaulter.step()  # as the thread would, whenever it runs
            thread = store.prefaulter
        assert thread is None or not thread.alive  # stopped by close
        report = check_store(root, infer_geometry(root))
        assert report.ok, report.defects
        files = sorted((root / "commitlog").iterdir())
        assert len(files) >= 3
        contents.append([f.read_bytes() for f in files])
    assert contents[0] == contents[1]


def test_readonly_and_disabled_stores_run_no_thread(tmp_path: Path) -> None:
    with MessageStore(tmp_path, _config(0)) as store:
        store.put_messages(_batch(0, 3))
        assert store.prefaulter is None
    with MessageStore(tmp_path, _config(8 * PAGE), readonly=True) as reader:
        assert reader.prefaulter is None


def test_config_rejects_a_negative_window() -> None:
    with pytest.raises(ValidationError):
        StoreConfig(commitlog_prefault_bytes=-1)


def test_the_window_is_capped_at_a_sixteenth_of_a_segment(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    started = start_prefaulter(queue, _config(1 << 30))
    assert started is not None and started.ahead_bytes == SEGMENT // 16 and started.alive
    started.stop()
    assert not started.alive
    # A window under a page (a tiny segment) runs no thread.
    tiny = StoreConfig(commitlog_file_size=8 * PAGE, commitlog_prefault_bytes=1 << 30)
    assert start_prefaulter(queue, tiny) is None
    queue.close()
