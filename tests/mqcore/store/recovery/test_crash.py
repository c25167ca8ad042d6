"""SIGKILL a writer at random points; every acknowledged message must survive the restart.

The writer (``crash_child.py``) runs in a subprocess and prints one line per message the store
acknowledged (PUT_OK). The parent reads a random number of lines, kills the child with
SIGKILL, and starts a new child on the same store (which recovers it) a few times over. At the
end, every acknowledged message must be found by queue offset, by key and by both ids, with its
body, and the offline check must find no defect.

SIGKILL loses no page-cache data, so under both flush modes every acknowledged message is on
disk from the kernel's point of view; what is tested is that recovery copes with a writer
stopped mid-record, mid-ConsumeQueue-unit, mid-index-put or mid-file-creation. (Power loss,
where sync flush matters, is simulated by test_recovery.py's torn tails.)
"""

from __future__ import annotations

import queue
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mqcore.store import GetStatus, MessageStore
from tests.mqcore.store.recovery.crash_child import body_for, config
from tests.support.store_oracle import ALL_TIME, REPO, run_cli

RUNS = 4  # killed runs per test
MAX_ACKS_PER_RUN = 150
LINE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Ack:
    run: int
    i: int
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    msg_id: str
    offset_msg_id: str

    @property
    def key(self) -> str:
        return f"{self.run}-{self.i}"


def parse(run: int, line: str) -> Ack | None:
    parts = line.split()
    if len(parts) != 9 or parts[0] != "ack":
        return None  # the last line may be cut short by the kill
    _, i, topic, queue_id, queue_offset, phys, size, msg_id, offset_msg_id = parts
    return Ack(
        run,
        int(i),
        topic,
        int(queue_id),
        int(queue_offset),
        int(phys),
        int(size),
        msg_id,
        offset_msg_id,
    )


def run_and_kill(root: Path, flush: str, run: int, acks_wanted: int) -> list[Ack]:
    """Start a writer, read ``acks_wanted`` acknowledgements, SIGKILL it; return all acks."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.mqcore.store.recovery.crash_child",
            str(root),
            flush,
            str(run * 31 + 7),
            str(run),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # EOF

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    acks: list[Ack] = []
    try:
        opened = lines.get(timeout=LINE_TIMEOUT_S)
        assert opened is not None and opened.startswith("open"), _stderr(proc)
        while len(acks) < acks_wanted:
            line = lines.get(timeout=LINE_TIMEOUT_S)
            assert line is not None, _stderr(proc)
            ack = parse(run, line)
            assert ack is not None, line
            acks.append(ack)
    finally:
        proc.send_signal(signal.SIGKILL)  # a no-op if it already exited
        proc.wait(timeout=LINE_TIMEOUT_S)
        reader.join(timeout=LINE_TIMEOUT_S)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    # Lines already in the pipe were acknowledged before the kill, too.
    while (line := lines.get_nowait()) is not None:
        ack = parse(run, line)
        if ack is not None:
            acks.append(ack)
    assert proc.returncode == -signal.SIGKILL
    return acks


def _stderr(proc: subprocess.Popen[str]) -> str:
    """What a writer that closed its stdout (so it exited) said on stderr."""
    proc.wait(timeout=LINE_TIMEOUT_S)
    assert proc.stderr is not None
    return f"the writer exited with {proc.returncode}: {proc.stderr.read()}"


def assert_acks_present(store: MessageStore, acks: list[Ack]) -> None:
    for a in acks:
        got = store.get_messages("g", a.topic, a.queue_id, a.queue_offset, 1)
        assert got.status is GetStatus.FOUND, (a, got.status)
        m = got.messages[0]
        assert (m.phys_offset, m.store_size, m.queue_offset) == (
            a.phys_offset,
            a.size,
            a.queue_offset,
        )
        assert m.body == body_for(a.run, a.i)
        assert m.keys == (a.key,) and m.msg_id == a.msg_id and m.offset_msg_id == a.offset_msg_id
        found = store.query_by_key(a.topic, a.key, *ALL_TIME)
        assert [f.phys_offset for f in found] == [a.phys_offset], a
    for a in acks[::9]:  # id lookups walk every topic's index: a sample is enough
        by_offset, by_uniq = store.view_by_id(a.offset_msg_id), store.view_by_id(a.msg_id)
        assert by_offset is not None and by_offset.phys_offset == a.phys_offset
        assert by_uniq is not None and by_uniq.phys_offset == a.phys_offset


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_sigkill_loses_no_acknowledged_message(tmp_path: Path, flush: str) -> None:
    rng = random.Random(flush)
    deadline = time.monotonic() + 60
    acks: list[Ack] = []
    for run in range(RUNS):
        acks += run_and_kill(tmp_path, flush, run, rng.randint(0, MAX_ACKS_PER_RUN))
        assert (tmp_path / "abort").exists()
        if time.monotonic() > deadline:
            break
    assert len(acks) > 50
    with MessageStore(tmp_path, config(flush)) as store:
        report = store.recovery
        assert report is not None and not report.last_exit_ok
        store.dispatch_until_caught_up()
        assert_acks_present(store, acks)
    assert not (tmp_path / "abort").exists()
    result = run_cli("check", tmp_path, "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "summary: OK, no defect" in result.stdout
