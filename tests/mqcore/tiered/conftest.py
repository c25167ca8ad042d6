"""Fixtures for tiered storage tests: both backends, and real records from a MessageStore."""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mqcore.clock import FakeClock
from mqcore.format.record import Valid, check_record
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.tiered import MemoryBackend, PosixBackend, SegmentBackend
from mqcore.tiered.s3 import S3Backend
from tests.support.redis_server import free_port, wait_for_port

T0 = 1_700_000_000_000
TOPIC = "orders"


@pytest.fixture(params=["memory", "posix"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> SegmentBackend:
    """The contract suite runs against every backend."""
    if request.param == "memory":
        return MemoryBackend()
    return PosixBackend(tmp_path / "tier", "DefaultCluster", "broker-a")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@dataclass(frozen=True)
class LocalRecord:
    """One message as the local store holds it: what the dispatcher would hand the tier."""

    queue_offset: int
    phys_offset: int
    record: bytes
    tags_code: int
    store_timestamp: int


@pytest.fixture
def local_records(tmp_path: Path, clock: FakeClock) -> Iterator[list[LocalRecord]]:
    """60 real records of queue ``orders``/1 (bodies of 1..3000 bytes, mixed tags), read
    back from a MessageStore's CommitLog and ConsumeQueue."""
    rng = random.Random(11)
    config = StoreConfig(commitlog_file_size=64 * 1024, consume_queue_file_entries=100)
    with MessageStore(tmp_path / "store", config, clock=clock).open() as store:
        for i in range(60):
            store.put_message(
                Message(
                    TOPIC,
                    rng.randbytes(rng.choice((1, 40, 200, 900, 3000))),
                    tags=rng.choice(("TagA", "TagB", None)),
                    keys=[f"id-{i}"],
                ),
                queue_id=1 if i % 4 else 2,  # queue 2 interleaves, so phys offsets have gaps
            )
            clock.advance(5)
        store.dispatch_until_caught_up()
        queue = store.queues.get(TOPIC, 1)
        assert queue is not None
        records = []
        for unit in queue.units(0, 1000):
            raw = store.commit_log.read(unit.phys_offset, unit.size)
            assert raw is not None
            checked = check_record(raw, 0, len(raw))
            assert isinstance(checked, Valid)
            records.append(
                LocalRecord(
                    unit.queue_offset,
                    unit.phys_offset,
                    raw,
                    unit.tags_code,
                    checked.store_timestamp,
                )
            )
        assert len(records) == 45
        yield records


# --- S3: one moto server (a real S3 API over HTTP) per session, a fresh bucket per test ---


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's standalone S3 server on a free loopback port (``moto[server]``, dev extra)."""
    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint


@contextmanager
def moto_server(workdir: Path) -> Iterator[str]:
    """Run ``python -m moto.server`` until the block ends; yield its endpoint URL."""
    port = free_port()
    with open(workdir / "moto.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, 60, proc)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def new_s3_backend(endpoint: str, **kwargs: Any) -> S3Backend:
    """An S3Backend over a new, empty bucket of ``endpoint`` (prefix ``tier/``)."""
    import boto3

    bucket = f"cairn-{uuid.uuid4().hex[:16]}"
    boto3.client("s3", **s3_client_args(endpoint)).create_bucket(Bucket=bucket)
    return S3Backend(
        bucket,
        "tier/",
        cluster="DefaultCluster",
        broker="broker-a",
        endpoint_url=endpoint,
        access_key_id="testing",
        secret_access_key="testing",
        **kwargs,
    )


def s3_client_args(endpoint: str) -> dict[str, Any]:
    """Arguments of a raw boto3 client for looking under the backend, in tests."""
    return {
        "endpoint_url": endpoint,
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }


@pytest.fixture
def s3_backend(s3_endpoint: str) -> S3Backend:
    return new_s3_backend(s3_endpoint)
