"""What a start costs does not grow with the segment size, and a sparse segment larger than
its filesystem's free space opens.

Each store is opened in a child process (``python -c``, inheriting ``PYTHONPATH``) that
reports its own ``VmRSS`` from ``/proc/self/status``: recovery reads the bytes after the last
record with ``pread`` and ``SEEK_DATA/SEEK_HOLE``, so a 1 GiB segment holding ~8 MB costs
about what the 8 MB cost, and on a full tmpfs no read of a hole through the mapping can
raise SIGBUS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mqcore
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig

GIB = 1 << 30
MIB = 1 << 20
#: The brief's bound: RSS after opening the 8 MB store within this of an empty store's.
RSS_MARGIN = 64 * MIB

OPEN_AND_MEASURE = """
import json, sys
from pathlib import Path
from mqcore.store import MessageStore, StoreConfig

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

store = MessageStore(Path(sys.argv[1]), StoreConfig(commitlog_file_size=int(sys.argv[2]))).open()
after = rss()
got = store.get_messages("g", "cost", 0, 0, 32)
print(json.dumps({"rss": after, "end": store.commit_log.max_offset, "read": len(got.messages)}))
store.close()
"""


def fill(root: Path, segment_size: int, megabytes: int) -> int:
    """~``megabytes`` MB of 300-byte records; returns the CommitLog end."""
    with MessageStore(root, StoreConfig(commitlog_file_size=segment_size)) as store:
        body = b"c" * 200
        batches = megabytes * MIB // (500 * 300)
        for b in range(batches):
            msgs = [Message("cost", body, keys=[f"k{b}-{i}"]) for i in range(500)]
            store.put_messages(msgs, b % 4)
        return store.commit_log.max_offset


def open_in_child(root: Path, segment_size: int) -> subprocess.CompletedProcess[str]:
    """The child imports the ``mqcore`` this process imported (not the one its working
    directory or the installed package would give)."""
    source = str(Path(mqcore.__file__).resolve().parents[1])
    env = os.environ | {"PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", OPEN_AND_MEASURE, str(root), str(segment_size)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=root.parent,
    )


def measured(root: Path, segment_size: int) -> dict[str, int]:
    child = open_in_child(root, segment_size)
    assert child.returncode == 0, child.stderr[-3000:]
    result: dict[str, int] = json.loads(child.stdout)
    return result


@pytest.mark.slow
@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort"])
def test_rss_after_open_does_not_grow_with_the_segment_size(tmp_path: Path, crashed: bool):
    data = tmp_path / "data"
    end = fill(data, GIB, 8)
    assert 7 * MIB < end < 10 * MIB
    if crashed:
        (data / "abort").write_text("1")  # a full rescan of the segment
    empty = measured(tmp_path / "empty", GIB)
    opened = measured(data, GIB)
    assert opened["end"] == end and opened["read"] == 32
    assert opened["rss"] - empty["rss"] < RSS_MARGIN, (opened, empty)


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort"])
def test_a_segment_bigger_than_the_free_space_of_a_tmpfs_opens(
    small_tmpfs: Path, crashed: bool
) -> None:
    segment_size = 128 * MIB  # sparse: ~8 MB of it is written, the tmpfs has 64 MiB
    root = small_tmpfs / "store"
    end = fill(root, segment_size, 8)
    if crashed:
        (root / "abort").write_text("1")
    stat = os.statvfs(small_tmpfs)
    assert stat.f_bavail * stat.f_frsize < segment_size
    child = open_in_child(root, segment_size)
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])  # -7: SIGBUS
    opened = json.loads(child.stdout)
    assert opened["end"] == end and opened["read"] == 32
