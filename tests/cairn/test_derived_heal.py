"""Derived files heal themselves in a real broker process (``manage.py runbroker``).

The store is damaged while the broker is stopped (a ConsumeQueue directory deleted, a
ConsumeQueue file and an IndexFile cut short, bytes flipped in another ConsumeQueue file and
in an IndexFile), the broker restarts, is killed with SIGKILL while it rebuilds, restarts
again and finishes. Meanwhile the damaged queues refuse REST puts with a 503 that names the
reason; afterwards they take puts at the next offsets, and every acknowledged message is at
its queue offset and found by key, and ``python -m mqcore check`` is clean.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from tests.conftest import free_port, wait_for_port
from tests.support.manage import (
    SHARED_SETTINGS,
    ApiClient,
    broker_env,
    create_token,
    manage,
    start_runbroker,
)
from tests.support.store_oracle import Oracle, run_cli

pytestmark = pytest.mark.slow

TOPIC = "orders"
QUEUES = 4
CONFIG = StoreConfig(
    commitlog_file_size=256 * 1024,
    consume_queue_file_entries=500,
    index_hash_slots=997,
    index_max_entries=3000,
)
GEOMETRY = {
    "CAIRN_COMMITLOG_FILE_SIZE": str(CONFIG.commitlog_file_size),
    "CAIRN_CQ_FILE_ENTRIES": "500",
    "CAIRN_INDEX_HASH_SLOTS": "997",
    "CAIRN_INDEX_MAX_ENTRIES": "3000",
    # A small rebuild step, so that the kill below lands mid-rebuild.
    "CAIRN_INDEX_STEP_BYTES": str(32 * 1024),
}


def start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = start_runbroker(env, out)
    wait_for_port(int(env["CAIRN_HTTP_PORT"]), 90, proc)
    return proc


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text(errors="replace")[-4000:]


def send(api: ApiClient, queue_id: int, bodies: list[str]) -> list[dict[str, Any]]:
    batch = [{"body": b, "keys": [b.replace(" ", "-")], "queue_id": queue_id} for b in bodies]
    results: list[dict[str, Any]] = api.call(
        "POST", f"/topics/{TOPIC}/messages", {"messages": batch}
    )["results"]
    return results


def refusal(api: ApiClient, queue_id: int) -> str | None:
    """The 503's message when a put to ``queue_id`` is refused; None once it is accepted."""
    try:
        send(api, queue_id, [f"probe {queue_id} {time.monotonic_ns()}"])
    except urllib.error.HTTPError as exc:
        assert exc.code == 503, exc.read()
        return str(json.loads(exc.read()))
    return None


def flip(path: Path, pos: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ mask]))


def damage(store: Path) -> None:
    queues = store / "consumequeue" / TOPIC
    shutil.rmtree(queues / "1")
    os.truncate(sorted((queues / "2").iterdir())[1], 555)
    flip(sorted((queues / "3").iterdir())[0], 20 * 123 + 19, 0x04)  # a tag code
    index = sorted((store / "index").iterdir())
    os.truncate(index[1], 4096)
    flip(index[3], 40 + 4 * 17 + 3, 0x01)  # a slot


def test_damaged_derived_files_heal_through_a_kill(tmp_path: Path) -> None:
    port = free_port()
    env = broker_env(tmp_path, port, 0, drop=SHARED_SETTINGS, **GEOMETRY)
    manage(env, "migrate", "--noinput", "-v", "0")
    token = create_token(env, "heal-bot", "operator")
    api = ApiClient(f"http://127.0.0.1:{port}", token)
    log = tmp_path / "broker.log"
    store_dir = tmp_path / "store"
    acked: list[tuple[int, int, str]] = []  # (queue_id, queue_offset, body) acked over REST

    proc = start(env, log)
    try:
        api.call(
            "POST",
            "/topics",
            {"name": TOPIC, "read_queue_nums": QUEUES, "write_queue_nums": QUEUES},
        )
        for q in range(QUEUES):
            for r in send(api, q, [f"rest {q} {i}" for i in range(20)]):
                acked.append((r["queue_id"], r["queue_offset"], f"rest {q} {r['queue_offset']}"))
    finally:
        stop(proc, log)
    oracle = Oracle()
    with MessageStore(store_dir, CONFIG) as store:  # more data, faster than over HTTP
        for first in range(0, 24_000, 100):
            batch = [
                Message(TOPIC, b"bulk %d" % i, keys=[f"bulk-{i}"])
                for i in range(first, first + 100)
            ]
            oracle.put_batch(store, batch, first // 100 % QUEUES)
    damage(store_dir)

    proc = start(env, log)
    try:
        reason = refusal(api, 1)
        assert reason is not None and "being rebuilt" in reason and "orders/1" in reason
        deadline = time.monotonic() + 60
        while '"cursor"' not in (store_dir / "rebuild" / "queues.json").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-rebuild
        proc.wait()

    proc = start(env, log)
    try:
        deadline = time.monotonic() + 120
        while any(refusal(api, q) is not None for q in (1, 2, 3)):
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(0.2)
        for q in range(QUEUES):
            for r in send(api, q, [f"after {q} {i}" for i in range(10)]):
                acked.append((r["queue_id"], r["queue_offset"], ""))
        status = api.call("GET", "/status")
    finally:
        stop(proc, log)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text
    # Started, killed, started again from the beginning at the next start, then installed.
    assert text.count("rebuilding ConsumeQueue(s)") == 2, text[-4000:]
    assert "ConsumeQueue rebuild of" in text and "index rebuild of" in text
    assert status is not None

    done = run_cli("check", store_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with MessageStore(store_dir, CONFIG) as store:
        assert store.rebuilding_queues == {} and store.index_damage == ""
        kinds = {p.id.split(":")[1] for p in store.health.problems() if p.kind == "derived_rebuilt"}
        assert kinds == {"consumequeue", "index"}
        for e in oracle.messages:  # the bulk: at its queue offset, and by key
            got = store.get_messages("g", TOPIC, e.queue_id, e.queue_offset, 1)
            assert got.messages and got.messages[0].body == e.body, e
        for (topic, key), expected in oracle.by_key().items():
            hits = store.query_by_key(topic, key, 0, 2**62)
            assert [m.phys_offset for m in hits] == [x.phys_offset for x in expected], key
        for queue_id, queue_offset, body in acked:
            got = store.get_messages("g", TOPIC, queue_id, queue_offset, 1)
            assert got.messages and got.messages[0].queue_offset == queue_offset
            if body:
                assert got.messages[0].body == body.encode()
        # The queues restarted where they were: no offset given twice, none skipped.
        for q in range(QUEUES):
            offsets = sorted(o for qid, o, _ in acked if qid == q)
            assert len(set(offsets)) == len(offsets)
