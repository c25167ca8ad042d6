"""SIGKILL of ``manage.py runbroker`` while it uploads to a POSIX tier, three times at
different moments while a producer sends over REST; then a clean restart lets the upload
finish. The tier must hold every message the local store holds exactly once: same count,
same offsets, the same record bytes, and backend segments no longer than the saved progress
(nothing duplicated past a commit)."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mqcore.store import MessageStore, StoreConfig
from mqcore.tiered import PosixBackend, SegmentId, SegmentType
from mqcore.tiered.storage import TieredStorage
from tests.conftest import free_port, wait_for_port
from tests.support.manage import (
    SHARED_SETTINGS,
    ApiClient,
    broker_env,
    create_token,
    manage,
    start_runbroker,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOPIC = "tier-kill"
QUEUES = 2
BATCH = 10
#: Between two batches: the backlog stays a few seconds of uploads (the test's run time).
PAUSE_S = 0.05
FILE_SIZE = 256 * 1024


class Api(ApiClient):
    def tier_rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.get("/tiered", topic=TOPIC)["queues"]
        return rows


class Producer(threading.Thread):
    """Sends batches over REST (paced) until stopped or the broker goes away; counts the
    acknowledged ones."""

    def __init__(self, api: Api, start_at: int) -> None:
        super().__init__(daemon=True)
        self.api, self.n, self.acked = api, start_at, 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            batch = [
                {
                    "body": f"message {i} " + "x" * (i % 200),
                    "keys": [f"k{i}"],
                    "properties": {"n": str(i)},
                    "queue_id": i % QUEUES,
                }
                for i in range(self.n, self.n + BATCH)
            ]
            try:
                self.api.call("POST", f"/topics/{TOPIC}/messages", {"messages": batch})
            except (urllib.error.URLError, OSError):
                return  # killed
            self.n += BATCH
            self.acked += BATCH
            self.halt.wait(PAUSE_S)


def start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = start_runbroker(env, out)
    wait_for_port(int(env["CAIRN_HTTP_PORT"]), 60, proc)
    return proc


def committed(api: Api) -> int:
    return sum(r["commit_offset"] for r in api.tier_rows())


def test_sigkill_mid_upload_leaves_a_complete_tier_without_duplicates(tmp_path: Path) -> None:
    port = free_port()
    env = broker_env(
        tmp_path,
        port,
        0,
        drop=SHARED_SETTINGS,
        CAIRN_TIERED_BACKEND="posix",
        # Small groups (a timeout of 0 would upload every message on its own: too slow).
        CAIRN_TIERED_GROUP_COMMIT_COUNT="32",
        CAIRN_TIERED_GROUP_COMMIT_BYTES=str(16 * 1024),
        CAIRN_TIERED_GROUP_COMMIT_TIMEOUT_MS="300",
        CAIRN_COMMITLOG_FILE_SIZE=str(FILE_SIZE),
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    token = create_token(env, "kill-bot", "operator")
    api = Api(f"http://127.0.0.1:{port}", token)
    log = tmp_path / "broker.log"
    rng = random.Random(3)
    acked, sent, progress = 0, 0, [0]

    for round_ in range(3):
        proc = start(env, log)
        try:
            if round_ == 0:
                api.call("POST", "/topics", {"name": TOPIC, "read_queue_nums": QUEUES})
            producer = Producer(api, sent)
            producer.start()
            # Kill while uploading: once this run committed something and messages wait.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                rows = api.tier_rows()
                done = sum(r["commit_offset"] for r in rows)
                if done > progress[-1] and any(r["lag"] > 0 for r in rows):
                    break
                time.sleep(0.02)
            else:
                raise AssertionError(f"round {round_}: no upload within 60 s")
            time.sleep(rng.uniform(0, 0.3) * (round_ + 1))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        producer.halt.set()
        producer.join(15)
        acked += producer.acked
        sent = producer.n + BATCH  # a batch in flight may have been stored: never reuse its keys
        progress.append(sum(p.commit_offset for p in tier_queues(tmp_path) if p is not None))
    assert progress == sorted(set(progress)), progress  # each run uploaded something

    proc = start(env, log)
    try:
        deadline = time.monotonic() + 120
        while True:
            rows = api.tier_rows()
            if len(rows) == QUEUES and all(r["lag"] == 0 for r in rows):
                break
            if time.monotonic() > deadline:
                services = api.call("GET", "/status")["services"]
                raise AssertionError((rows, services.get("tiered_upload")))
            time.sleep(0.1)
        total = committed(api)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text(errors="replace")[-4000:]
    assert total >= acked > progress[-1]  # every acked message, and uploads were cut short

    store_dir = tmp_path / "store"
    with MessageStore(
        store_dir, StoreConfig(commitlog_file_size=FILE_SIZE), readonly=True
    ) as store:
        backend = PosixBackend(tmp_path / "tiered", "DefaultCluster", "broker-a")
        tier = TieredStorage(backend, store_dir, readonly=True)
        held = 0
        for queue_id in range(QUEUES):
            local = local_records(store, queue_id)
            flat = tier.flat_file(TOPIC, queue_id)
            assert flat is not None
            assert (flat.min_offset, flat.commit_offset) == (0, len(local))
            entries = flat.entries(0, len(local) + 10, 1 << 30)
            assert [unit.queue_offset for unit, _ in entries] == list(range(len(local)))
            assert [raw for _, raw in entries] == local  # byte for byte, once each
            held += len(entries)
            saved = tier.metadata.get(TOPIC, queue_id)
            assert saved is not None
            for kind, table in (
                (SegmentType.COMMIT_LOG, saved.commit_log_segments),
                (SegmentType.CONSUME_QUEUE, saved.consume_queue_segments),
            ):
                on_disk = backend.list_segments(TOPIC, queue_id, kind)
                assert on_disk == sorted(table)
                for base in on_disk:
                    assert backend.size(SegmentId(TOPIC, queue_id, kind, base)) == table[base].size
        assert held == total


def tier_queues(root: Path) -> list[Any]:
    """Each queue's saved progress, read from the metadata file (the broker is dead)."""
    backend = PosixBackend(root / "tiered", "DefaultCluster", "broker-a")
    tier = TieredStorage(backend, root / "store", readonly=True)
    return [tier.metadata.get(topic, queue_id) for topic, queue_id in tier.queues()]


def local_records(store: MessageStore, queue_id: int) -> list[bytes]:
    queue = store.queues.get(TOPIC, queue_id)
    assert queue is not None
    out: list[bytes] = []
    offset = 0
    while units := queue.units(offset, 1000):
        for unit in units:
            raw = store.commit_log.read(unit.phys_offset, unit.size)
            assert raw is not None, unit
            out.append(raw)
        offset = units[-1].queue_offset + 1
    return out
