"""Crash safety of the upload (spec 10): a dispatcher process killed with SIGKILL in the
middle of uploads, several times, then a fresh dispatcher: the tier ends complete, without
duplicates, byte for byte the local records, every key indexed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mqcore.message import Message
from mqcore.store import MessageStore
from mqcore.tiered import PosixBackend, SegmentId, SegmentType
from mqcore.tiered.dispatcher import upload_step
from mqcore.tiered.storage import TieredStorage
from tests.mqcore.tiered.world import EAGER, SMALL, TOPIC

REPO = Path(__file__).resolve().parents[3]
COUNT = 3000

#: The dispatcher process: uploads in small steps forever (until killed).
CHILD = textwrap.dedent(
    """
    import sys
    from mqcore.store import MessageStore
    from mqcore.tiered import PosixBackend
    from mqcore.tiered.dispatcher import upload_step
    from mqcore.tiered.storage import TieredStorage
    from tests.mqcore.tiered.world import EAGER, SMALL

    root, tier_root = sys.argv[1], sys.argv[2]
    store = MessageStore(root, SMALL, readonly=True).open()
    tier = TieredStorage(PosixBackend(tier_root, "c", "b"), root, EAGER)
    print("ready", flush=True)
    while True:
        result = upload_step(store, tier, force=True, max_messages=40)
        assert not result.errors, result.errors
    """
)


def local_records(store: MessageStore, queue_id: int) -> list[bytes | None]:
    queue = store.queues.get(TOPIC, queue_id)
    assert queue is not None
    out: list[bytes | None] = []
    offset = 0
    while units := queue.units(offset, 1000):
        out += [store.commit_log.read(u.phys_offset, u.size) for u in units]
        offset = units[-1].queue_offset + 1
    return out


def committed(tier_root: Path, root: Path) -> int:
    tier = TieredStorage(PosixBackend(tier_root, "c", "b"), root, EAGER, readonly=True)
    return sum(p.commit_offset for q in tier.queues() if (p := tier.metadata.get(*q)))


@pytest.mark.slow
def test_killed_uploads_resume_complete_without_duplicates(tmp_path: Path) -> None:
    root, tier_root = tmp_path / "store", tmp_path / "tier"
    with MessageStore(root, SMALL) as store:
        for i in range(COUNT):
            store.put_message(
                Message(TOPIC, os.urandom(20 + i % 300), keys=[f"k{i}", f"x{i}"]), queue_id=i % 3
            )
    rng = random.Random(8)
    env = os.environ | {"PYTHONPATH": str(REPO)}
    progress = [0]
    for _kill in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(tier_root)],
            stdout=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        # Kill at a random moment once this run has uploaded something (a loaded machine
        # must not turn every kill into a kill before the first upload).
        deadline = time.monotonic() + 60
        while committed(tier_root, root) <= progress[-1] and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.15))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        progress.append(committed(tier_root, root))
    assert progress == sorted(set(progress))  # every run uploaded something ...
    assert progress[-1] < COUNT  # ... and was killed before the end

    with MessageStore(root, SMALL, readonly=True) as store:
        tier = TieredStorage(PosixBackend(tier_root, "c", "b"), root, EAGER)
        while upload_step(store, tier, force=True).progressed:
            pass
        for queue_id in range(3):
            flat = tier.flat_file(TOPIC, queue_id)
            assert flat is not None
            local = local_records(store, queue_id)
            assert len(local) == COUNT // 3
            assert (flat.min_offset, flat.commit_offset) == (0, len(local))
            assert [raw for _, raw in flat.entries(0, 2000)] == local
            # The backend holds exactly the committed bytes: no duplicated tail anywhere.
            progress_saved = tier.metadata.get(TOPIC, queue_id)
            assert progress_saved is not None
            for kind, table in (
                (SegmentType.COMMIT_LOG, progress_saved.commit_log_segments),
                (SegmentType.CONSUME_QUEUE, progress_saved.consume_queue_segments),
            ):
                on_disk = tier.backend.list_segments(TOPIC, queue_id, kind)
                assert on_disk == sorted(table)
                for base in on_disk:
                    size = tier.backend.size(SegmentId(TOPIC, queue_id, kind, base))
                    assert size == table[base].size
        for i in range(0, COUNT, 37):
            for key in (f"k{i}", f"x{i}"):
                hits = tier.key_index.lookup(TOPIC, i % 3, key, 0, 2**62)
                assert [h.queue_offset for h in hits] == [i // 3], key
