"""The broker role's start: the CommitLog recovered alone, a new generation published."""

from __future__ import annotations

import struct
from pathlib import Path

from mqcore.format.layout import MESSAGE_MAGIC_CODE_V1
from mqcore.message import Message
from mqcore.store import MessageStore
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.sharing.progress import Slot
from mqcore.store.sharing.writer_open import recover_commit_log
from tests.mqcore.store.sharing.conftest import SMALL, put_orders


def derived_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for sub in ("consumequeue", "index")
        for p in sorted((root / sub).rglob("*"))
        if p.is_file()
    }


def test_an_empty_log_recovers_to_nothing(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        assert store.progress is not None
        report = recover_commit_log(
            store.progress,
            store.commit_log,
            Checkpoint(tmp_path / "checkpoint"),
            last_exit_ok=True,
            check_crc=True,
        )
    assert report.stop_reason == "empty CommitLog"
    assert report.end_offset == 0


def test_a_torn_tail_is_cut_and_the_derived_files_are_left_alone(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_orders(store, 12)
        end = store.commit_log.max_offset
    before = derived_bytes(tmp_path)
    segment = tmp_path / "commitlog" / f"{0:020d}"
    with segment.open("r+b") as f:  # the head of a record whose copy never finished
        f.seek(end)
        f.write(struct.pack(">ii", 300, MESSAGE_MAGIC_CODE_V1) + b"\x07" * 40)
    (tmp_path / "abort").touch()  # and the writer died
    with MessageStore(tmp_path, SMALL, role="broker") as broker:
        assert broker.recovery is not None
        assert broker.recovery.end_offset == end == broker.commit_log.max_offset
        progress = broker.follower.progress
        assert progress.get(Slot.RECOVERED_END) == end
        assert progress.get(Slot.LAST_EXIT_OK) == 0
        # Dispatch restarts where the published REPUT_OFFSET says, within the recovered log.
        assert broker.reput_offset == min(progress.get(Slot.REPUT_OFFSET), end)
        assert derived_bytes(tmp_path) == before
        assert broker.max_offset("Orders", 0) == 6  # the standalone store's units, followed
    assert segment.read_bytes()[end : end + 48] == bytes(48)


def test_the_next_queue_offsets_follow_the_log_not_only_the_queues(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, role="broker") as broker:
        put_orders(broker, 8)  # nobody dispatches: no ConsumeQueue unit is written
    with MessageStore(tmp_path, SMALL, role="broker") as broker:
        assert broker.max_offset("Orders", 0) == 0
        result = broker.put_message(Message("Orders", b"after restart"), 0)
        assert result.queue_offset == 4  # not 0: the records in the log count
