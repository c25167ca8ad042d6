"""The store services on real Celery worker processes, over the session's private Redis.

The test process is the broker (a ``broker``-role store); the workers are started with
``celery -A workers worker`` exactly as the README says. They share the store directory,
the service lock files, the progress file and Redis, and nothing else.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from mqcore.format.record import DispatchRequest
from mqcore.message import Message
from mqcore.services import inline
from mqcore.store import GetStatus, MessageStore, StoreConfig
from mqcore.store.sharing.progress import Slot
from tests.conftest import REPO
from workers import events

pytestmark = [pytest.mark.slow, pytest.mark.redis]

CFG = StoreConfig(
    commitlog_file_size=256 * 1024,
    consume_queue_file_entries=1000,
    index_hash_slots=1009,
    index_max_entries=20_000,
)
_databases = itertools.count(1)


@pytest.fixture
def redis_db(redis_url: str) -> str:
    """A Redis database of its own (1..15), emptied, so queued tasks never leak between tests."""
    number = next(_databases) % 15 + 1
    url = redis_url.rsplit("/", 1)[0] + f"/{number}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


class Workers:
    """Celery worker processes started by a test, stopped (or killed) at its end."""

    def __init__(self, tmp_path: Path, redis_url: str, store_dir: Path) -> None:
        self.tmp_path, self.redis_url, self.store_dir = tmp_path, redis_url, store_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *, beat: bool = True, **env: str) -> subprocess.Popen[bytes]:
        full_env = dict(
            os.environ,
            CAIRN_REDIS_URL=self.redis_url,
            CAIRN_STORE_DIR=str(self.store_dir),
            CAIRN_BEAT_SCHEDULE_FILE=str(self.tmp_path / f"{name}-beat"),
            **env,
        )
        command = [
            sys.executable, "-m", "celery", "-A", "workers", "worker",
            "--pool=threads", "--concurrency=4", f"--hostname={name}@%h",
            "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        if beat:
            command.append("--beat")
        log = (self.tmp_path / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            command, cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.procs[name] = proc
        return proc

    def log_tail(self) -> str:
        return "\n".join(
            f"--- {name}\n" + (self.tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
            for name in self.procs
        )

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


@pytest.fixture
def workers(tmp_path: Path, redis_db: str, store_dir: Path) -> Iterator[Workers]:
    started = Workers(tmp_path, redis_db, store_dir)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def broker(store_dir: Path) -> Iterator[MessageStore]:
    store = MessageStore(store_dir, CFG, role=inline.store_role("celery")).open()
    try:
        yield store
    finally:
        store.close()


def client(redis_url: str) -> Celery:
    return Celery("cairn-test", broker=redis_url, backend=redis_url)


def wait_for(
    condition: Callable[[], bool], what: str, workers: Workers, timeout_s: float = 90
) -> None:
    """Poll ``condition`` (the workers are other processes) until it holds or time is up."""
    deadline = time.monotonic() + timeout_s
    tick = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n{workers.log_tail()}")
        tick.wait(0.01)


def bodies(store: MessageStore, queue_id: int) -> list[bytes]:
    found: list[bytes] = []
    offset = 0
    while True:
        got = store.get_messages("g", "Orders", queue_id, offset, 64)
        if got.status is not GetStatus.FOUND:
            return found
        found += [m.body for m in got.messages]
        offset = got.next_offset


def put_batch(store: MessageStore, start: int, count: int, queues: int = 4) -> None:
    for queue_id in range(queues):
        msgs = [
            Message("Orders", f"order {i}".encode(), keys=[f"K{i}"])
            for i in range(start, start + count)
            if i % queues == queue_id
        ]
        for chunk in range(0, len(msgs), 500):  # a batch must fit in one segment
            for result in store.put_messages(msgs[chunk : chunk + 500], queue_id):
                assert result.ok


def expected(total: int, queue_id: int, queues: int = 4) -> list[bytes]:
    return [f"order {i}".encode() for i in range(total) if i % queues == queue_id]


def progress_of(store: MessageStore, slot: Slot) -> int:
    assert store.progress is not None
    return store.progress.get(slot)


def test_messages_become_consumable_through_the_workers_reput(
    workers: Workers, broker: MessageStore, redis_db: str, store_dir: Path
) -> None:
    loops = inline.build_service_loops(broker)
    seen: list[DispatchRequest] = []
    all_seen = threading.Event()
    broker.add_listener(lambda r: (seen.append(r), all_seen.set() if len(seen) == 200 else None))
    subscriber = events.wake_on_events(redis_db, store_dir, loops)
    for loop in loops:
        loop.start()
    try:
        assert subscriber.subscribed.wait(30)
        worker = workers.start("solo", CAIRN_CLEAN_FIRST_DELAY_MS="0", CAIRN_REPUT_ENSURE_S="1")
        put_batch(broker, 0, 200)
        # The follow loop polls only once a minute here: only the worker's Redis event can
        # wake it in time, and it calls the listeners (long polls, live trace) once each.
        loops[0].interval_s = 60
        if not all_seen.wait(90):
            pytest.fail(f"listeners saw {len(seen)} of 200\n{workers.log_tail()}")
        assert sorted((r.queue_id, r.queue_offset) for r in seen) == sorted(
            (i % 4, i // 4) for i in range(200)
        )
        for queue_id in range(4):
            assert bodies(broker, queue_id) == expected(200, queue_id)
        [found] = broker.query_by_key("Orders", "K123", 0, 2**62)
        assert found.body == b"order 123"
        assert progress_of(broker, Slot.REPUT_HOLDER_PID) == worker.pid

        # Flush and cleanup run on the worker too, scheduled by beat.
        wait_for(
            lambda: (
                progress_of(broker, Slot.SERVICES_FLUSHED_OFFSET) == broker.commit_log.max_offset
            ),
            "the worker's flush",
            workers,
        )
        status = inline.services_status(broker, loops)
        wait_for(
            lambda: "cleanup" in inline.services_status(broker, loops)["services"],
            "a cleanup run",
            workers,
        )
        status = inline.services_status(broker, loops)
        assert status["mode"] == "celery"
        assert {"reput", "flush", "cleanup", "follow"} <= set(status["services"])
        assert status["services"]["flush"]["runner"].startswith(f"{worker.pid} ")
        assert status["services"]["cleanup"]["last_result"]["status"] == "ok"
        assert status["lag_bytes"] == {"reput": 0, "flush": 0, "follow": 0}
    finally:
        subscriber.stop()
        for loop in loops:
            loop.stop()


def test_killing_the_worker_mid_reput_loses_and_duplicates_nothing(
    workers: Workers, broker: MessageStore, redis_db: str
) -> None:
    # Small reput passes, so that the kill lands in the middle of the backlog.
    slow = {"CAIRN_REPUT_MAX_BYTES": "2048"}
    first = workers.start("first", beat=False, **slow)
    put_batch(broker, 0, 30_000)
    end = broker.commit_log.max_offset
    client(redis_db).send_task("cairn.reput")
    wait_for(lambda: progress_of(broker, Slot.REPUT_OFFSET) > end // 10, "reput to start", workers)
    workers.kill("first")
    dispatched_at_kill = progress_of(broker, Slot.REPUT_OFFSET)
    assert 0 < dispatched_at_kill < end, "the worker finished before it could be killed"
    assert progress_of(broker, Slot.REPUT_HOLDER_PID) == first.pid  # it died holding reput

    put_batch(broker, 30_000, 2_000)  # the broker goes on meanwhile
    total_end = broker.commit_log.max_offset
    workers.start("second", CAIRN_REPUT_ENSURE_S="1", **slow)  # beat starts reput
    wait_for(lambda: progress_of(broker, Slot.REPUT_OFFSET) == total_end, "the takeover", workers)

    assert progress_of(broker, Slot.ATTACH_COUNT) == 2
    for queue_id in range(4):
        assert bodies(broker, queue_id) == expected(32_000, queue_id)
    # Every key too: the successor must not chain onto index entries the dead worker left
    # past its last header write.
    missing = [k for k in range(32_000) if not broker.query_by_key("Orders", f"K{k}", 0, 2**62)]
    assert missing == [], f"{len(missing)} keys lost, e.g. {missing[:10]}"


def test_two_workers_never_both_hold_a_service(
    workers: Workers, broker: MessageStore, redis_db: str
) -> None:
    # Short leases and frequent beats: reput changes hands whenever a lease ends.
    fast = {
        "CAIRN_REPUT_LEASE_S": "0.3",
        "CAIRN_REPUT_ENSURE_S": "0.5",
        "CAIRN_REPUT_MAX_BYTES": "4096",
    }
    procs = {name: workers.start(name, **fast) for name in ("left", "right")}
    pids = {proc.pid for proc in procs.values()}
    holders: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            holders.add(progress_of(broker, Slot.REPUT_HOLDER_PID))
            stop.wait(0.001)

    def write(batches: int) -> None:
        nonlocal total
        for _ in range(batches):
            put_batch(broker, total, 500)
            total += 500
            stop.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    total = 0
    try:
        write(10)
        wait_for(lambda: progress_of(broker, Slot.REPUT_HOLDER_PID) in pids, "a holder", workers)
        # While one holds reput, reput tasks sent now are turned away with the holder's name.
        results = [client(redis_db).send_task("cairn.reput") for _ in range(6)]
        outcomes = [r.get(timeout=90) for r in results]
        # The holder shuts down gracefully mid-stream; the other takes over.
        holder = progress_of(broker, Slot.REPUT_HOLDER_PID)
        [name] = [n for n, p in procs.items() if p.pid == holder]
        procs[name].terminate()
        write(10)
        procs[name].wait(60)
        write(10)
        end = broker.commit_log.max_offset
        wait_for(lambda: progress_of(broker, Slot.REPUT_OFFSET) == end, "dispatch", workers)
    finally:
        stop.set()
        watcher.join()
    skipped = [o for o in outcomes if o["status"] == "skipped"]
    assert skipped, outcomes
    assert all(o["detail"]["reason"].split()[3] in {str(p) for p in pids} for o in skipped), skipped
    assert pids <= holders, "reput never changed hands; the test proves nothing"
    assert progress_of(broker, Slot.ATTACH_COUNT) >= 2
    # Two holders at once would have written the same ConsumeQueue slots twice or left gaps.
    for queue_id in range(4):
        assert bodies(broker, queue_id) == expected(total, queue_id)


def test_a_worker_rebuilds_damaged_derived_files_and_the_broker_follows(
    workers: Workers, store_dir: Path
) -> None:
    """Celery mode heals too: the reput holder's attach finds a ConsumeQueue directory gone
    and an IndexFile cut short, the rebuild runs on the worker (``cairn.index_build``), the
    broker refuses puts to the queue until the worker swapped the rebuilt one in."""
    import shutil

    from mqcore.store.results import RefusedPutResult

    with MessageStore(store_dir, CFG) as standalone:
        put_batch(standalone, 0, 4_000)
    shutil.rmtree(store_dir / "consumequeue" / "Orders" / "2")
    index = sorted((store_dir / "index").iterdir())
    os.truncate(index[0], 999)
    broker = MessageStore(store_dir, CFG, role=inline.store_role("celery")).open()
    try:
        assert broker.commit_log.queue_offsets[("Orders", 2)] == 1_000  # not 0
        workers.start("healer", CAIRN_REPUT_ENSURE_S="1")
        wait_for(
            lambda: (broker.follow_others(), ("Orders", 2) in broker.rebuilding_queues)[1],
            "the worker's start check",
            workers,
        )
        refused = broker.put_message(Message("Orders", b"x"), 2)
        assert isinstance(refused, RefusedPutResult) and "Orders/2" in refused.reason
        wait_for(
            lambda: (
                broker.follow_others(),
                not broker.rebuilding_queues and not broker.index_damage,
            )[1],
            "the rebuild",
            workers,
        )
        assert bodies(broker, 2) == expected(4_000, 2)
        assert broker.put_message(Message("Orders", b"x"), 2).queue_offset == 1_000
        wait_for(
            lambda: all(
                broker.query_by_key("Orders", f"K{k}", 0, 2**62) for k in range(0, 4_000, 37)
            ),
            "the rebuilt index",
            workers,
        )
    finally:
        broker.close()
