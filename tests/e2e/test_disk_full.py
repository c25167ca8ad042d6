"""A real broker (``manage.py runbroker``) with its store on a real 64 MiB tmpfs, filled up by
a fast REST producer and a Kafka producer (confluent-kafka).

What must hold (issue 17): the broker never dies (it used to die of SIGBUS within a second);
REST answers 503 ``SERVICE_NOT_AVAILABLE`` and Kafka ``KAFKA_STORAGE_ERROR`` with the disk
full; every acknowledged message is readable at its acknowledged queue and offset; a
restart (after SIGKILL) on the full disk starts and refuses puts; deleting a filler file
resumes puts without a restart. Then forced cleanup: it keeps segments a group has not
consumed (or younger than the retention), deletes expired ones the group has consumed, and
with ``CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED=true`` deletes young unconsumed ones too;
every deletion is in the log and the audit log.

The Django database lives outside the tmpfs (the audit log must be writable meanwhile).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from tests.conftest import free_port, wait_for_port
from tests.support.manage import (
    SHARED_SETTINGS,
    ApiClient,
    broker_env,
    create_token,
    manage,
    start_runbroker,
)
from tests.support.tmpfs import fill, mounted_tmpfs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DISK_BYTES = 64 << 20
SEGMENT = 2 << 20
REST_TOPIC = "fill-rest"
KAFKA_TOPIC = "fill-kafka"
QUEUES = 4
BATCH = 200
BODY = 2000
#: Taken at the start, given back to "free space" (usage then drops well under 90 %).
FILLER = 16 << 20


Acked = dict[tuple[str, int, int], str]  # (topic, queue, offset) -> body


class Broker:
    """One broker process over the tmpfs store, with its log."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, **settings: str) -> None:
        with self.log.open("ab") as out:
            self.proc = start_runbroker({**self.env, **settings}, out)
        wait_for_port(int(self.env["CAIRN_HTTP_PORT"]), 90, self.proc)
        wait_for_port(int(self.env["CAIRN_KAFKA_PORT"]), 30, self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "mnt", DISK_BYTES) as mounted:
        yield mounted


def _env(tmp_path: Path, disk: Path) -> dict[str, str]:
    return broker_env(
        tmp_path,
        free_port(),
        free_port(),
        drop=[name for name in SHARED_SETTINGS if name != "CAIRN_STORE_DIR"],
        CAIRN_STORE_DIR=str(disk / "store"),
        CAIRN_COMMITLOG_FILE_SIZE=str(SEGMENT),
        CAIRN_CQ_FILE_ENTRIES="20000",
        CAIRN_INDEX_HASH_SLOTS="5000",
        CAIRN_INDEX_MAX_ENTRIES="20000",
        CAIRN_CLEAN_FIRST_DELAY_MS="0",
    )


def _api(env: dict[str, str]) -> ApiClient:
    manage(env, "migrate", "--noinput", "-v", "0")
    token = create_token(env, "disk-bot", "admin")
    return ApiClient(f"http://127.0.0.1:{env['CAIRN_HTTP_PORT']}", token)


def _send(api: ApiClient, topic: str, first: int) -> tuple[list[dict[str, Any]] | None, Any]:
    """One REST batch; (results, None) or (None, the 503 problem)."""
    batch = [{"body": f"{topic} {i:08d} ".ljust(BODY, "x")} for i in range(first, first + BATCH)]
    try:
        return api.call("POST", f"/topics/{topic}/messages", {"messages": batch})["results"], None
    except urllib.error.HTTPError as exc:
        assert exc.code == 503, exc.read()[:500]
        assert exc.headers["Content-Type"] == "application/problem+json"
        assert exc.headers["Retry-After"] == "1"
        return None, json.loads(exc.read())


def _fill_with_rest(api: ApiClient, acked: Acked, first: int) -> tuple[int, dict[str, Any]]:
    """Send batches until the broker answers 503; returns the next number and the problem."""
    n = first
    while True:
        results, problem = _send(api, REST_TOPIC, n)
        if problem is not None:
            return n, problem
        assert results is not None
        for i, r in enumerate(results):
            acked[(REST_TOPIC, r["queue_id"], r["queue_offset"])] = (
                f"{REST_TOPIC} {n + i:08d} ".ljust(BODY, "x")
            )
        n += BATCH
        assert n < 200_000, "the disk never filled up"


def _produce_kafka(env: dict[str, str], acked: Acked, first: int, count: int) -> list[int]:
    """Produce ``count`` records one by one (no retries: a refusal comes back as it is);
    record the acked ones; return the error codes of the refused ones."""
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{env['CAIRN_KAFKA_PORT']}",
            "acks": "1",
            "retries": 0,
            "linger.ms": 0,
            "message.timeout.ms": 10_000,
            "enable.idempotence": False,
        }
    )
    errors: list[int] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err.code())
        else:
            acked[(KAFKA_TOPIC, msg.partition(), msg.offset())] = msg.value().decode()

    for i in range(first, first + count):
        value = f"{KAFKA_TOPIC} {i:08d} ".ljust(BODY, "k")
        producer.produce(KAFKA_TOPIC, value.encode(), partition=i % QUEUES, callback=delivered)
        producer.flush(15)
    return errors


def _assert_all_readable(api: ApiClient, acked: Acked) -> None:
    """Every acked message, at its acked queue and offset, through a REST pull."""
    by_queue: dict[tuple[str, int], dict[int, str]] = {}
    for (topic, queue_id, offset), body in acked.items():
        by_queue.setdefault((topic, queue_id), {})[offset] = body
    for (topic, queue_id), expected in sorted(by_queue.items()):
        offset, seen = min(expected), {}
        while offset <= max(expected):
            page = api.get(f"/topics/{topic}/messages", queue_id=queue_id, offset=offset, limit=256)
            assert page["status"] == "FOUND", (topic, queue_id, offset, page["status"])
            for m in page["messages"]:
                seen[m["queue_offset"]] = m["body"]
            offset = page["next_offset"]
        missing = [o for o, body in expected.items() if seen.get(o) != body]
        assert not missing, f"{topic}/{queue_id}: {len(missing)} acked messages not readable"


def _eventually(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _writable(api: ApiClient) -> bool:
    guard = api.get("/status")["services"]["disk_guard"]["last_result"]["detail"]
    return bool(guard["writable"])


def test_a_full_disk_refuses_writes_never_crashes_and_resumes(tmp_path: Path, disk: Path) -> None:
    filler = fill(disk, leave_bytes=DISK_BYTES - FILLER)
    env = _env(tmp_path, disk)
    api = _api(env)
    broker = Broker(env, tmp_path / "broker.log")
    broker.start()
    acked: Acked = {}
    try:
        api.call("POST", "/topics", {"name": REST_TOPIC, "read_queue_nums": QUEUES})
        api.call("POST", "/topics", {"name": KAFKA_TOPIC, "read_queue_nums": QUEUES})
        assert not _produce_kafka(env, acked, 0, 20)

        # 1. Fill it over REST: 503 problem+json with the reason, the broker alive.
        n, problem = _fill_with_rest(api, acked, 0)
        assert broker.alive()
        assert problem["status"] == 503 and problem["code"] == "SERVICE_NOT_AVAILABLE"
        assert problem["detail"].startswith("disk full: "), problem
        assert len(acked) > 10_000
        # 2. Kafka: KAFKA_STORAGE_ERROR (56) per partition.
        errors = _produce_kafka(env, acked, 20, 8)
        assert errors and set(errors) == {KafkaError.KAFKA_STORAGE_ERROR}, errors
        # 3. Reads go on: every acked message where it was acked; the health says why.
        _assert_all_readable(api, acked)
        assert not _writable(api)
        detail = urllib.request.Request(
            f"{api.base}/healthz?detail=1", headers={"Authorization": f"Token {api.token}"}
        )
        with urllib.request.urlopen(detail, timeout=20) as response:
            assert json.loads(response.read())["store"]["writable"] is False

        # 4. SIGKILL, then a start on the full disk: it starts, refuses puts, serves reads.
        broker.kill()
        broker.start()
        _, problem = _send(api, REST_TOPIC, n)
        assert problem is not None and problem["detail"].startswith("disk full: ")
        assert _produce_kafka(env, acked, 40, 2) == [KafkaError.KAFKA_STORAGE_ERROR] * 2
        _assert_all_readable(api, acked)

        # 5. The operator frees space: puts resume within seconds, no restart.
        filler.unlink()
        _eventually(lambda: _writable(api), 15, "puts did not resume after space was freed")
        results, problem = _send(api, REST_TOPIC, n)
        assert problem is None and results is not None
        for i, r in enumerate(results):
            acked[(REST_TOPIC, r["queue_id"], r["queue_offset"])] = (
                f"{REST_TOPIC} {n + i:08d} ".ljust(BODY, "x")
            )
        assert not _produce_kafka(env, acked, 50, 8)
        _assert_all_readable(api, acked)
        assert broker.stop() == 0
    finally:
        if broker.alive():
            broker.kill()
    log = broker.text()
    assert "Bus error" not in log and "Traceback" not in log, log[-4000:]
    assert "puts refused: disk full" in log and "puts accepted again" in log


def _segments(disk: Path) -> list[str]:
    return sorted(p.name for p in (disk / "store" / "commitlog").iterdir())


def _commit(api: ApiClient, group: str, offsets: dict[int, int]) -> None:
    entries = [{"topic": REST_TOPIC, "queue_id": q, "offset": o} for q, o in offsets.items()]
    api.call("PUT", f"/groups/{group}/offsets", {"offsets": entries})


def test_forced_cleanup_keeps_what_a_group_needs_unless_the_operator_opts_in(
    tmp_path: Path, disk: Path
) -> None:
    env = _env(tmp_path, disk)
    api = _api(env)
    broker = Broker(env, tmp_path / "broker.log")
    # Everything older than ~2 s is "expired"; cleanup runs every second.
    short = {"CAIRN_FILE_RESERVED_HOURS": "0.0005", "CAIRN_CLEAN_INTERVAL_MS": "1000"}
    broker.start(CAIRN_FILE_RESERVED_HOURS="1000")
    acked: Acked = {}
    try:
        api.call("POST", "/topics", {"name": REST_TOPIC, "read_queue_nums": QUEUES})
        api.call("POST", "/groups", {"name": "billing"})
        _commit(api, "billing", dict.fromkeys(range(QUEUES), 0))  # subscribed, read nothing
        n, _ = _fill_with_rest(api, acked, 0)
        full = _segments(disk)
        # 1. Over the force ratio, nothing younger than the retention goes by default.
        time.sleep(3)
        assert _segments(disk) == full
        assert "forced cleanup keeps CommitLog segment" in broker.text()
        assert "it is younger than the retention" in broker.text()
        assert broker.stop() == 0

        # 2. Now everything is past a 2 s retention, but billing has read nothing: kept.
        broker.start(**short)
        time.sleep(4)
        assert _segments(disk) == full
        assert "holds messages not consumed yet: group billing has not consumed" in broker.text()
        _assert_all_readable(api, acked)
        # billing consumes the first half: the segments wholly below it go, no more.
        half = {q: max(o for t, qq, o in acked if qq == q) // 2 for q in range(QUEUES)}
        _commit(api, "billing", half)
        _eventually(lambda: len(_segments(disk)) < len(full), 20, "consumed segments stayed")
        time.sleep(3)
        left = _segments(disk)
        assert left == full[len(full) - len(left) :]  # from the front, no holes
        kept = {k: v for k, v in acked.items() if k[2] >= half[k[1]]}
        _assert_all_readable(api, kept)  # nothing billing still needs was deleted
        audit = api.get("/audit", action="store.segment.delete", limit=1000)["results"]
        deleted = {row["target"] for row in audit}
        assert deleted == set(full) - set(left)
        assert {row["new_value"]["reason"] for row in audit} == {"expired"}
        assert all(row["username"] == "cleanup" for row in audit)
        assert broker.stop() == 0

        # 3. Opted in: forced cleanup deletes young, unconsumed segments too (never the last).
        broker.start(CAIRN_FILE_RESERVED_HOURS="1000")
        n, _ = _fill_with_rest(api, acked, n)  # full again, all young
        before = _segments(disk)
        time.sleep(2)
        assert _segments(disk) == before
        assert broker.stop() == 0
        broker.start(CAIRN_FILE_RESERVED_HOURS="1000", CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED="true")
        _eventually(lambda: _writable(api), 30, "forced cleanup did not free the disk")
        after = _segments(disk)
        assert len(after) < len(before) and after[-1] == before[-1]
        audit = api.get("/audit", action="store.segment.delete", limit=1000)["results"]
        forced = [row for row in audit if row["new_value"]["reason"] == "forced"]
        assert {row["target"] for row in forced} == set(before) - set(after)
        assert all(
            row["old_value"]["end_offset"] > row["old_value"]["first_offset"] for row in forced
        )
        assert "deleted CommitLog segment" in broker.text() and ": forced" in broker.text()
        results, problem = _send(api, REST_TOPIC, n)
        assert problem is None and results
        assert broker.stop() == 0
    finally:
        if broker.alive():
            broker.kill()
    assert "Bus error" not in broker.text() and "Traceback" not in broker.text()
