"""``manage.py rebuildindex``: offline, beside a running broker, on damaged files, and killed."""

from __future__ import annotations

import io
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from mqcore.message import Message
from mqcore.services import inline
from mqcore.services.index_build import load_job
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.recovery.geometry import infer_geometry
from mqcore.store.recovery.verify import check_store
from tests.conftest import free_port, wait_for_port
from tests.mqcore.services.conftest import SMALL, drain, put_many
from tests.support.manage import REPO, SHARED_SETTINGS, broker_env, start_runbroker
from tests.support.store_oracle import Oracle, assert_all_found


def found(store: MessageStore, keys: range) -> list[int]:
    return [i for i in keys if store.query_by_key("Orders", f"K{i}", 0, 2**62)]


def test_offline_rebuild_of_a_lost_index_and_of_the_queues(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 400)
    shutil.rmtree(tmp_path / "index")
    out = io.StringIO()
    call_command("rebuildindex", store=str(tmp_path), step_bytes=8192, stdout=out)
    assert "Index rebuilt: 400 records." in out.getvalue()
    assert "100.0%" in out.getvalue()
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    call_command("rebuildindex", store=str(tmp_path), queues=True, stdout=io.StringIO())
    with MessageStore(tmp_path, SMALL) as store:
        assert found(store, range(0, 400, 17)) == list(range(0, 400, 17))
        assert drain(store, "Orders", 1) == [f"order {i}".encode() for i in range(1, 400, 2)]
    assert not (tmp_path / "rebuild" / "consumequeue").exists()
    assert check_store(tmp_path, infer_geometry(tmp_path)).ok


def test_rebuild_beside_a_running_broker(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, SMALL).open()
    loops = inline.build_service_loops(store)
    for loop in loops:
        loop.start()
    try:
        put_many(store, 300)
        with pytest.raises(CommandError, match="stop it to rebuild the ConsumeQueues"):
            call_command("rebuildindex", store=str(tmp_path), queues=True, stdout=io.StringIO())
        out = io.StringIO()
        call_command("rebuildindex", store=str(tmp_path), wait=60, stdout=out)
        assert "building the index beside it" in out.getvalue()
        assert "Index rebuilt: 300 records." in out.getvalue()
        assert found(store, range(0, 300, 7)) == list(range(0, 300, 7))
    finally:
        for loop in loops:
            loop.stop()
        store.close()


def test_a_directory_without_a_commitlog(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no CommitLog"):
        call_command("rebuildindex", store=str(tmp_path), stdout=io.StringIO())


def test_cut_short_queue_and_index_files_are_no_traceback(tmp_path: Path) -> None:
    """A cut ConsumeQueue file and a cut IndexFile: the index rebuild runs (and says which
    queue is damaged), ``--queues`` rebuilds the rest; nothing raises."""
    oracle = Oracle()
    with MessageStore(tmp_path, SMALL) as store:
        for i in range(300):
            oracle.put(store, Message("Orders", f"order {i}".encode(), keys=[f"K{i}"]), i % 2)
    os.truncate(sorted((tmp_path / "consumequeue" / "Orders" / "0").iterdir())[1], 77)
    os.truncate(sorted((tmp_path / "index").iterdir())[0], 1234)
    out = io.StringIO()
    call_command("rebuildindex", store=str(tmp_path), stdout=out)
    assert "Orders/0 are damaged" in out.getvalue()
    call_command("rebuildindex", store=str(tmp_path), queues=True, stdout=io.StringIO())
    with MessageStore(tmp_path, SMALL) as store:
        assert store.rebuilding_queues == {} and store.index_damage == ""
        assert_all_found(store, oracle, ids_every=10)
    assert check_store(tmp_path, infer_geometry(tmp_path)).ok


def test_an_unreadable_store_is_one_line(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 10)
    segment = sorted((tmp_path / "commitlog").iterdir())[0]
    with open(segment, "ab") as f:
        f.write(b"\0" * 100)  # longer than the configured segment size
    with pytest.raises(CommandError, match="cannot open the store .*: .*length"):
        call_command("rebuildindex", store=str(tmp_path), queues=True, stdout=io.StringIO())


# -- killed at random moments (real processes) -------------------------------------------

GEOMETRY = {
    "CAIRN_COMMITLOG_FILE_SIZE": str(256 * 1024),
    "CAIRN_CQ_FILE_ENTRIES": "500",
    "CAIRN_INDEX_HASH_SLOTS": "997",
    "CAIRN_INDEX_MAX_ENTRIES": "3000",
}
KILL_CONFIG = StoreConfig(
    commitlog_file_size=256 * 1024,
    consume_queue_file_entries=500,
    index_hash_slots=997,
    index_max_entries=3000,
)
TOPICS = ("orders", "payments")


def fill_acked(root: Path, count: int, oracle: Oracle, start: int = 0) -> None:
    """``count`` acknowledged messages in batches over two topics and four queues."""
    with MessageStore(root, KILL_CONFIG) as store:
        for first in range(start, start + count, 50):
            topic, queue_id = TOPICS[first // 50 % 2], first // 100 % 4
            batch = [
                Message(topic, b"m%d " % i + b"x" * (i % 300), tags=f"T{i % 3}", keys=[f"k{i}"])
                for i in range(first, first + 50)
            ]
            oracle.put_batch(store, batch, queue_id)


def rebuildindex(root: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **GEOMETRY)
    for name in SHARED_SETTINGS:
        env.pop(name, None)
    return subprocess.Popen(
        [sys.executable, "manage.py", "rebuildindex", "--store", str(root), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill_after_start(proc: subprocess.Popen[str], marker: str, delay_s: float) -> str:
    """SIGKILL ``proc`` ``delay_s`` after it printed ``marker``, unless it ended first."""
    assert proc.stdout is not None
    seen = ""
    while marker not in seen:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    try:
        rest, _ = proc.communicate(timeout=delay_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=60)
    return seen + rest


def seconds_between(proc: subprocess.Popen[str], first: str, second: str) -> float:
    """How long after printing ``first`` ``proc`` printed ``second`` (it runs to its end)."""
    assert proc.stdout is not None
    started = None
    for line in proc.stdout:
        if first in line:
            started = time.monotonic()
        if second in line and started is not None:
            took = time.monotonic() - started
            proc.communicate(timeout=120)
            return took
    raise AssertionError(f"no {second!r} after {first!r}")


def assert_check(root: Path, *, may_be_unfinished: bool) -> None:
    """``check`` is clean, or (``may_be_unfinished``) names the unfinished rebuild: it never
    says OK for a store whose files are half built."""
    report = check_store(root, infer_geometry(root))
    if report.ok:
        return
    assert may_be_unfinished, report.defects[:5]
    assert any("rebuild" in line for line in report.defects), report.defects[:5]


@pytest.mark.slow
def test_killing_offline_rebuild_queues_at_random_moments(tmp_path: Path) -> None:
    oracle = Oracle()
    fill_acked(tmp_path, 30_000, oracle)
    # How long the rebuild itself takes on this machine now: the kills land within it.
    proc = rebuildindex(tmp_path, "--queues", "--step-bytes", "32768")
    duration = seconds_between(proc, "Rebuilding", "Rebuilt from")
    rng = random.Random(17)
    outcomes = []
    for run in range(5):
        proc = rebuildindex(tmp_path, "--queues", "--step-bytes", "32768")
        out = kill_after_start(proc, "Rebuilding", rng.uniform(0.0, 0.9 * duration))
        assert "Traceback" not in out, out
        finished = "Rebuilt from" in out
        assert_check(tmp_path, may_be_unfinished=not finished)
        outcomes.append(finished)
        if run % 2:  # the next start settles what the kill left ...
            with MessageStore(tmp_path, KILL_CONFIG):
                pass
        else:  # ... or the next run does
            done = rebuildindex(tmp_path, "--queues")
            out, _ = done.communicate(timeout=300)
            assert done.returncode == 0 and "Rebuilt from" in out, out
        assert_check(tmp_path, may_be_unfinished=False)
        fill_acked(tmp_path, 500, oracle, start=30_000 + 500 * run)
    assert outcomes.count(False) >= 3, f"too few kills landed mid-rebuild: {outcomes}"
    with MessageStore(tmp_path, KILL_CONFIG) as store:
        assert store.rebuilding_queues == {} and store.index_damage == ""
        assert_all_found(store, oracle, ids_every=97)


@pytest.mark.slow
def test_killing_online_rebuild_beside_a_running_broker(tmp_path: Path) -> None:
    """``rebuildindex`` (the index, online) killed at random moments while the broker runs:
    the broker's rebuild service finishes each build, nothing acknowledged is lost."""
    oracle = Oracle()
    store_dir = tmp_path / "store"
    fill_acked(store_dir, 12_000, oracle)
    port = free_port()
    env = broker_env(tmp_path, port, 0, drop=SHARED_SETTINGS, **GEOMETRY)
    log = tmp_path / "broker.log"
    with log.open("ab") as out:
        broker = start_runbroker(env, out)
    try:
        wait_for_port(port, 60, broker)
        rng = random.Random(5)
        for _ in range(3):
            proc = rebuildindex(store_dir, "--step-bytes", "16384", "--wait", "120")
            text = kill_after_start(proc, "building the index beside it", rng.uniform(0, 1.5))
            assert "Traceback" not in text, text
            deadline = time.monotonic() + 120
            while (job := load_job(store_dir)) is None or job.state != "installed":
                assert time.monotonic() < deadline, (job, log.read_text()[-3000:])
                time.sleep(0.1)
    finally:
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(60) == 0, log.read_text(errors="replace")[-4000:]
    assert_check(store_dir, may_be_unfinished=False)
    with MessageStore(store_dir, KILL_CONFIG) as store:
        assert_all_found(store, oracle, ids_every=97)
