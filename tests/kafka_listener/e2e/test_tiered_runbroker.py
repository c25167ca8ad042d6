"""Tiered storage end to end: ``manage.py runbroker`` with ``CAIRN_TIERED_BACKEND=posix``
uploads a queue that rolled several small CommitLog files; a restart with cleanup set to
delete at once removes every local CommitLog file but the last (and the ConsumeQueue files
below it); the queue is still consumed from offset 0 through REST pull and through a Kafka
client with identical bodies, keys and headers, and a REST key query still finds the first
message, all served by the tier.

Two phases because cleanup must not race the upload: phase 1 produces and waits until the
tier reports lag 0 (``GET /api/v1/tiered``); phase 2 restarts with
``CAIRN_FILE_RESERVED_HOURS=0`` and every hour a delete hour, and reads once the local files
are gone.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port, wait_for_port
from tests.support.manage import (
    SHARED_SETTINGS,
    ApiClient,
    broker_env,
    create_token,
    manage,
    start_runbroker,
)

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOPIC = "tiered-orders"
COUNT = 240
#: 32 KiB CommitLog files, 64-entry ConsumeQueue files: COUNT messages fill about 8 of each.
SMALL_FILES = {"CAIRN_COMMITLOG_FILE_SIZE": str(32 * 1024), "CAIRN_CQ_FILE_ENTRIES": "64"}
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


def eventually(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)
    return got


@contextmanager
def running(env: dict[str, str], log: Path) -> Iterator[None]:
    """``manage.py runbroker`` until the block ends (SIGTERM, clean exit expected)."""
    with log.open("ab") as out:
        proc = start_runbroker(env, out)
        try:
            wait_for_port(int(env["CAIRN_HTTP_PORT"]), 60, proc)
            if env["CAIRN_KAFKA_PORT"] != "0":
                wait_for_port(int(env["CAIRN_KAFKA_PORT"]), 30, proc)
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
    assert code == 0, log.read_text(errors="replace")[-4000:]


def produced(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """Message i: key, value (binary, 100-400 bytes), headers."""
    value = f"order {i}|".encode() + bytes((i * 7 + n) % 256 for n in range(100 + i % 300))
    return f"order-{i}".encode(), value, [("origin", b"kafka"), ("n", str(i).encode())]


def test_consumed_from_offset_zero_after_local_cleanup(tmp_path: Path) -> None:
    http_port, kafka_port = free_port(), free_port()
    env = broker_env(
        tmp_path,
        http_port,
        kafka_port,
        drop=SHARED_SETTINGS,
        CAIRN_TIERED_BACKEND="posix",
        CAIRN_TIERED_GROUP_COMMIT_COUNT="32",
        CAIRN_TIERED_GROUP_COMMIT_TIMEOUT_MS="0",
        CAIRN_DELETE_WHEN="99",  # phase 1: no scheduled deletion
        **SMALL_FILES,
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    token = create_token(env, "tier-bot", "viewer")
    rest = ApiClient(f"http://127.0.0.1:{http_port}", token)
    bootstrap = f"127.0.0.1:{kafka_port}"
    store = tmp_path / "store"
    log = tmp_path / "broker.log"

    # Phase 1: produce through Kafka, wait until the tier holds everything.
    with running(env, log):
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        for i in range(COUNT):
            key, value, headers = produced(i)
            producer.send(TOPIC, key=key, value=value, headers=headers, partition=0)
        producer.flush(30)
        producer.close()

        def caught_up() -> Any:
            rows = rest.get("/tiered", topic=TOPIC)["queues"]
            return rows if rows and rows[0]["commit_offset"] == COUNT else None

        (row,) = eventually(caught_up, 60, "the tier holds every message")
        assert row["lag"] == 0 and row["tier_min_offset"] == 0 and row["size_bytes"] > 0
    commit_logs = sorted((store / "commitlog").iterdir())
    assert len(commit_logs) >= 4, commit_logs  # several segments rolled

    # Phase 2: cleanup deletes at once; read everything back from the tier.
    env.update(
        CAIRN_FILE_RESERVED_HOURS="0",
        CAIRN_DELETE_WHEN=EVERY_HOUR,
        CAIRN_CLEAN_FIRST_DELAY_MS="0",
        CAIRN_CLEAN_INTERVAL_MS="200",
    )
    queue_dir = store / "consumequeue" / TOPIC / "0"
    with running(env, log):
        eventually(
            lambda: (
                len(list((store / "commitlog").iterdir())) == 1
                and min(int(p.name) for p in queue_dir.iterdir()) > 0
            ),
            60,
            "cleanup deleted all but the last CommitLog file and the ConsumeQueue files below",
        )
        assert not (store / "commitlog" / commit_logs[0].name).exists()
        local_first_cq = min(int(p.name) for p in queue_dir.iterdir()) // 20
        assert local_first_cq > 0  # offset 0 is no longer in the local ConsumeQueue

        # REST pull from offset 0
        pulled: list[dict[str, Any]] = []
        offset = 0
        while offset < COUNT:
            page = rest.get(
                f"/topics/{TOPIC}/messages",
                queue_id=0,
                offset=offset,
                limit=32,
                body_encoding="base64",
            )
            assert page["status"] == "FOUND", page
            assert page["min_offset"] == 0
            pulled += page["messages"]
            offset = page["next_offset"]
        assert [m["queue_offset"] for m in pulled] == list(range(COUNT))
        for i, m in enumerate(pulled):
            key, value, headers = produced(i)
            assert base64.b64decode(m["body"]) == value
            assert m["keys"] == [key.decode()]
            assert {k: m["properties"][k] for k, _ in headers} == {
                k: v.decode() for k, v in headers
            }

        # A Kafka client from the earliest offset
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records: list[Any] = []
        deadline = time.monotonic() + 60
        while len(records) < COUNT and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=300).values():
                records += batch
        consumer.close()
        assert [r.offset for r in records] == list(range(COUNT))
        for r in records:
            key, value, headers = produced(r.offset)
            assert (r.key, r.value) == (key, value)
            assert [(k, v) for k, v in r.headers if k in ("origin", "n")] == headers

        # Key query: the first message's segment is gone locally; the tier key index has it
        found = rest.get(f"/topics/{TOPIC}/messages", key="order-0")["messages"]
        assert [(m["queue_offset"], m["archived"]) for m in found] == [(0, False)]
        assert found[0]["msg_id"] == pulled[0]["msg_id"]
        detail = rest.get(f"/topics/{TOPIC}")["queues"][0]
        assert detail["min_offset"] == 0 and detail["tier"]["commit_offset"] == COUNT
