"""A full disk under a fast producer: the store lives on a small tmpfs (a real mount, we are
root) with a ballast file; producers send until every write is refused. The broker must not
crash; writes are refused with REST 503 / Kafka KAFKA_STORAGE_ERROR and a reason; every
acknowledged message stays readable; a restart on the full disk comes up (read-only); and
once the ballast is deleted writes resume by themselves.

Phases of one run (each verifies the whole ledger so far):
full (broker running) -> restart on the full disk -> ballast freed, writes resume -> restart.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import Conclude
from tests.faults.harness import (
    Broker,
    BrokerDied,
    Fault,
    KafkaLoad,
    Ledger,
    RestLoad,
    Verdict,
    big_body,
    copy_tree,
    create_kafka_topic,
    finish,
    send_rest_batch,
    verify,
)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

DISK_MB = 16
BALLAST_MB = 4
#: 1 MiB segments: several roll before the disk fills; everything else as in the suite.
SETTINGS = {"CAIRN_COMMITLOG_FILE_SIZE": str(1 << 20)}
QUEUES = 4
REFUSED_FOR_S = 1.5  # the disk counts as full once every write was refused this long
FILL_CAP_S = 45.0
RESUME_WITHIN_S = 20.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A ``DISK_MB`` MiB tmpfs holding a ``BALLAST_MB`` MiB ballast file; unmounted after."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)], check=True
    )
    try:
        with (mount / "ballast").open("wb") as f:
            f.write(b"\xa5" * (BALLAST_MB << 20))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def disk_broker(template: tuple[Path, str], tmp_path: Path, disk: Path) -> Broker:
    path, token = template
    data = copy_tree(path, tmp_path / "data")
    return Broker(data, token, store_dir=disk / "store", settings=SETTINGS)


def wait_refused(broker: Broker, refused_since: Callable[[], float | None]) -> str:
    """Until writes have been refused for ``REFUSED_FOR_S`` (returns ''), the broker died or
    the cap passed (returns what happened)."""
    deadline = time.monotonic() + FILL_CAP_S
    while time.monotonic() < deadline:
        if not broker.alive():
            assert broker.proc is not None
            return f"the broker died while the disk filled (exit code {broker.proc.returncode})"
        since = refused_since()
        if since is not None and time.monotonic() - since > REFUSED_FOR_S:
            return ""
        time.sleep(0.05)
    return f"writes were still accepted after {FILL_CAP_S:.0f} s"


#: Key queries in the intermediate read-backs (every n-th key); the final one queries all.
SAMPLED_KEYS = 150


def phase(
    verdict: Verdict, broker: Broker, ledger: Ledger, name: str, *, full: bool, last: bool = False
) -> bool:
    """Verify the ledger on the running broker; a full disk must show in the health surface.
    False when the broker is gone (the rest of the run is moot)."""
    fault = Fault(verdict.fault, 0, expect_report=full)
    keys = None if last else SAMPLED_KEYS
    verdict.absorb(verify(broker, ledger, fault, settle_timeout_s=10, max_keys=keys), name)
    return broker.alive()


def restart(verdict: Verdict, broker: Broker, name: str) -> bool:
    code = broker.stop()
    if code != 0:
        verdict.fail(f"{name}: the broker exited with {code} on SIGTERM")
    try:
        broker.start()
    except BrokerDied as died:
        verdict.fail(f"{name}: the broker did not start: {died.what}")
        verdict.notes.append(died.log_tail[-1500:])
        return False
    return True


def test_disk_full_under_rest_producers(
    fault_template: tuple[Path, str], tmp_path: Path, small_disk: Path, conclude: Conclude
) -> None:
    broker = disk_broker(fault_template, tmp_path, small_disk)
    ledger = Ledger()
    verdict = Verdict(
        "disk-full-rest", 0, description=f"{DISK_MB} MiB tmpfs, REST batches of 50 x 2 KB"
    )
    with broker:
        broker.start()
        reply = broker.http.api(
            "POST",
            "/topics",
            {"name": "full", "read_queue_nums": QUEUES, "write_queue_nums": QUEUES},
        )
        assert reply.status == 201, reply.text
        loads = [
            RestLoad(broker.http, ledger, "full", f"p{i}", queues=QUEUES, body=big_body)
            for i in range(2)
        ]
        for load in loads:
            load.start()
        problem = wait_refused(
            broker,
            lambda: (
                min((x.refused_since or float("inf")) for x in loads)
                if all(x.refused_since for x in loads)
                else None
            ),
        )
        for load in loads:
            load.halt()
        statuses = {s: sum(x.statuses.get(s, 0) for x in loads) for s in (200, 503, 500)}
        verdict.notes.append(
            f"replies by status: {dict(sum((list(x.statuses.items()) for x in loads), []))}"
        )
        refusals = [r for x in loads for r in x.refusals]
        if problem:
            verdict.fail(problem)
        if not statuses[503]:
            verdict.fail(f"no write was refused with 503 (refusals: {refusals[:2]})")
        elif not any("disk" in r.lower() or "space" in r.lower() for r in refusals):
            verdict.fail(f"the 503 does not say the disk is full: {refusals[:1]}")
        if any(s >= 500 and s != 503 for x in loads for s in x.statuses):
            verdict.fail(f"other server errors than 503: {refusals[:2]}")
        alive = phase(verdict, broker, ledger, "full", full=True)
        if alive and restart(verdict, broker, "restart on the full disk"):
            phase(verdict, broker, ledger, "restarted full", full=True)
            reply = send_rest_batch(
                broker.http, ledger, "full", "probe", 0, 5, queues=QUEUES, body=big_body
            )
            if reply.status != 503:
                verdict.fail(f"restarted on a full disk, a write got {reply.status}, not 503")
            (small_disk / "ballast").unlink()
            resumed = resume(broker, ledger, verdict)
            if resumed:
                for n in range(0, 300, 50):
                    reply = send_rest_batch(
                        broker.http, ledger, "full", "after", n, 50, queues=QUEUES
                    )
                    if reply.status != 200:
                        verdict.fail(
                            f"after space was freed a write got {reply.status}: {reply.text[:200]}"
                        )
                        break
                phase(verdict, broker, ledger, "space freed", full=False)
                if restart(verdict, broker, "final restart"):
                    phase(verdict, broker, ledger, "final", full=False, last=True)
        finish(broker, verdict)
    verdict.acked = len(ledger)
    conclude(verdict, broker.log_tail(1500))


def resume(broker: Broker, ledger: Ledger, verdict: Verdict) -> bool:
    """After the ballast is gone, a write must succeed within ``RESUME_WITHIN_S``."""
    deadline = time.monotonic() + RESUME_WITHIN_S
    n = 0
    while time.monotonic() < deadline:
        reply = send_rest_batch(broker.http, ledger, "full", "resume", n, 1, queues=QUEUES)
        n += 1
        if reply.status == 200:
            verdict.notes.append(
                f"writes resumed {RESUME_WITHIN_S - (deadline - time.monotonic()):.1f} s after space was freed"
            )
            return True
        time.sleep(0.25)
    verdict.fail(
        f"writes did not resume within {RESUME_WITHIN_S:.0f} s of freeing {BALLAST_MB} MiB"
    )
    return False


def test_disk_full_under_a_kafka_producer(
    fault_template: tuple[Path, str], tmp_path: Path, small_disk: Path, conclude: Conclude
) -> None:
    broker = disk_broker(fault_template, tmp_path, small_disk)
    ledger = Ledger()
    verdict = Verdict(
        "disk-full-kafka", 0, description=f"{DISK_MB} MiB tmpfs, confluent-kafka, 2 KB records"
    )
    # No retries: each refused batch's delivery report carries the broker's own error code.
    conf = {"enable.idempotence": False, "retries": 0, "linger.ms": 2}
    with broker:
        broker.start()
        create_kafka_topic(broker.bootstrap, "full.k", QUEUES)
        load = KafkaLoad(
            broker.bootstrap, ledger, "full.k", "k", partitions=QUEUES, body=big_body, conf=conf
        )
        load.start()
        problem = wait_refused(broker, lambda: load.error_since)
        load.halt(10 if broker.alive() else 2)
        verdict.notes.append(
            f"delivery errors: {dict(load.errors)}; undelivered at flush {load.undelivered}"
        )
        if problem:
            verdict.fail(problem)
        if not load.errors.get("KAFKA_STORAGE_ERROR"):
            verdict.fail(
                f"no record was refused with KAFKA_STORAGE_ERROR (errors: {dict(load.errors)})"
            )
        alive = phase(verdict, broker, ledger, "full", full=True)
        if alive and restart(verdict, broker, "restart on the full disk"):
            phase(verdict, broker, ledger, "restarted full", full=True)
            (small_disk / "ballast").unlink()
            after = KafkaLoad(
                broker.bootstrap, ledger, "full.k", "after", partitions=QUEUES,
                conf={"message.timeout.ms": int(RESUME_WITHIN_S * 1000)}, limit=300,
            )  # fmt: skip
            after.start()
            after.join(RESUME_WITHIN_S + 30)
            if after.errors or after.undelivered or after.is_alive():
                verdict.fail(
                    f"after space was freed: delivery errors {dict(after.errors)}, "
                    f"{after.undelivered} undelivered"
                )
            phase(verdict, broker, ledger, "space freed", full=False)
            if restart(verdict, broker, "final restart"):
                phase(verdict, broker, ledger, "final", full=False, last=True)
        finish(broker, verdict)
    verdict.acked = len(ledger)
    conclude(verdict, broker.log_tail(1500))
