"""kill -9 at random moments of the operations that rewrite the store: ``manage.py
rebuildindex`` (online, broker running; offline with ``--queues``, broker stopped), config
writes (topic and group creates in a loop), and start-up recovery of a store big enough for
recovery to take a while. After every kill the ledger must hold; the moments come from
``random.Random(seed)`` and each one is in the failure message.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.base import BaseStore, verify_config
from tests.faults.conftest import Conclude
from tests.faults.harness import (
    Broker,
    BrokerDied,
    Fault,
    Ledger,
    Streamed,
    Verdict,
    copy_tree,
    create_kafka_topic,
    finish,
    holds_store_lock,
    produce_kafka,
    run_check,
    send_rest,
    verify,
)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

KILLS = 3
REBUILD_KILLS = 2
#: Small steps, so that a rebuild of the 1.3 MB base takes long enough to be cut anywhere.
OFFLINE_STEP = ["--step-bytes", "4096"]
ONLINE_STEP = ["--step-bytes", "16384"]
#: Intermediate read-backs query this many keys (every n-th); the last one queries all.
SAMPLED_KEYS = 100


def rebuild_args(*extra: str) -> list[str]:
    return ["manage.py", "rebuildindex", *extra]


def kill_after(
    rng: random.Random, args: list[str], env: dict[str, str], marker: str, span: float
) -> str:
    """Start ``args``, wait for ``marker`` in its output, kill it ``uniform(0, span)`` s later.
    Returns what happened (for the failure message)."""
    proc = Streamed(args, env)
    at = proc.wait_for(marker, 120)
    delay = rng.uniform(0, span)
    time.sleep(delay)
    if proc.kill():
        how = f"killed {delay:.3f} s after {marker!r}"
    else:
        how = f"it exited ({proc.proc.returncode}) before the kill: {proc.output()[-200:]!r}"
    if at is None:
        how += f" (never printed {marker!r})"
    return how


def kill_at_progress(
    rng: random.Random, args: list[str], env: dict[str, str], store: Path, marker: str
) -> str:
    """Start an online rebuild and kill it once its side build (``<store>/rebuild/job.json``:
    cursor between from_offset and target_end) has done a random fraction of the work; if
    no job file shows progress within 20 s of ``marker``, kill it then."""
    proc = Streamed(args, env)
    proc.wait_for(marker, 120)
    goal = rng.uniform(0.05, 0.95)
    deadline = time.monotonic() + 20
    done = 0.0
    while time.monotonic() < deadline and proc.proc.poll() is None:
        try:
            job = json.loads((store / "rebuild" / "job.json").read_text())
            span = job["target_end"] - job["from_offset"]
            done = (job["cursor"] - job["from_offset"]) / span if span > 0 else 1.0
        except (OSError, ValueError, KeyError):
            pass
        if done >= goal:
            break
        time.sleep(0.005)
    if proc.kill():
        return f"killed at {done:.0%} of the side build (aimed at {goal:.0%})"
    return f"it exited ({proc.proc.returncode}) before the kill: {proc.output()[-200:]!r}"


def measure(args: list[str], env: dict[str, str], marker: str) -> float:
    """Run ``args`` to the end: the seconds from ``marker`` to the exit."""
    proc = Streamed(args, env)
    code = proc.finish(300)
    at = proc.seen(marker)
    assert code == 0, f"{' '.join(args)} failed ({code}):\n{proc.output()[-2000:]}"
    return max(time.monotonic() - proc.started - (at or 0.0), 0.05)


# --- rebuildindex ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [pytest.param(1, id="seed=1")])
def test_rebuildindex_online_killed(
    seed: int, clean_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    """The broker keeps serving every key while a side build is killed at random points of
    its progress; a rebuild run to the end afterwards resumes and installs it."""
    rng = random.Random(seed)
    clean_base.copy(tmp_path / "run")
    broker = Broker(tmp_path / "run", clean_base.token)
    verdict = Verdict("rebuildindex-online-kill", seed)
    marker = "building the index beside it"
    args = rebuild_args(*ONLINE_STEP)
    with broker:
        broker.start()
        moments = []
        for k in range(REBUILD_KILLS):
            how = kill_at_progress(rng, args, broker.env, broker.store, marker)
            moments.append(how)
            after = verify(
                broker, clean_base.ledger, Fault(verdict.fault, seed), max_keys=SAMPLED_KEYS
            )
            verdict.absorb(after, f"kill {k} ({how})")
        verdict.description = "; ".join(moments)
        done = Streamed(args, broker.env)
        if done.finish(300) != 0:
            verdict.fail(f"rebuildindex after the kills failed:\n{done.output()[-600:]}")
        verdict.absorb(verify(broker, clean_base.ledger, Fault(verdict.fault, seed)), "rebuilt")
        if broker.stop() != 0:
            verdict.fail("the broker did not stop cleanly")
        try:
            broker.start()
            after = verify(
                broker, clean_base.ledger, Fault(verdict.fault, seed), max_keys=SAMPLED_KEYS
            )
            verdict.absorb(after, "restarted")
        except BrokerDied as died:
            verdict.fail(f"the broker did not start again: {died.what}")
        finish(broker, verdict)
    conclude(verdict, broker.log_tail(1500))


@pytest.mark.parametrize("seed", [pytest.param(1, id="seed=1")])
def test_rebuildindex_queues_offline_killed(
    seed: int, clean_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    """``rebuildindex --queues`` on a stopped store, killed at random moments: ``check`` never
    says OK for a half-built store, and the broker then serves every acknowledged message at
    its offset (the old files or the new ones, never a mix)."""
    rng = random.Random(seed)
    clean_base.copy(tmp_path / "run")
    broker = Broker(tmp_path / "run", clean_base.token)
    verdict = Verdict("rebuildindex-queues-offline-kill", seed)
    marker = "Rebuilding the ConsumeQueues"
    args = rebuild_args("--queues", *OFFLINE_STEP)
    with broker:
        span = measure(args, broker.env, marker)
        verdict.notes.append(f"an uninterrupted offline rebuild took {span:.2f} s after {marker!r}")
        moments = []
        for k in range(REBUILD_KILLS):
            how = kill_after(rng, args, broker.env, marker, span)
            moments.append(how)
            check = run_check(broker.store)
            phase = f"kill {k} ({how})"
            try:
                broker.start()
            except BrokerDied as died:
                verdict.fail(f"{phase}: the broker did not start: {died.what}")
                break
            last = k == REBUILD_KILLS - 1
            fault = Fault(verdict.fault, seed)
            after = verify(
                broker, clean_base.ledger, fault, max_keys=None if last else SAMPLED_KEYS
            )
            if check.ok and (after.lost or after.corrupted or after.unfindable):
                after.fail(
                    f"mqcore check said OK for the store the kill left, yet {len(after.lost)} "
                    f"messages are lost, {len(after.corrupted)} served corrupted, "
                    f"{len(after.unfindable)} not found by key"
                )
            verdict.absorb(after, phase)
            if not last and broker.stop() != 0:
                verdict.fail(f"{phase}: the broker did not stop cleanly")
        verdict.description = "; ".join(moments)
        finish(broker, verdict)
    conclude(verdict, broker.log_tail(1500))


# --- config writes ---------------------------------------------------------------------------


class Creator(threading.Thread):
    """Creates topics and groups in a loop (every create rewrites topics.json or
    subscriptionGroup.json) until the broker goes away; keeps what was acknowledged."""

    def __init__(self, broker: Broker, prefix: str) -> None:
        super().__init__(daemon=True)
        self.broker, self.prefix = broker, prefix
        self.topics: list[str] = []
        self.groups: list[str] = []
        self.refused: list[str] = []

    def run(self) -> None:
        for i in range(100_000):
            name = f"{self.prefix}x{i}"
            try:
                if i % 2 == 0:
                    body = {"name": name, "read_queue_nums": 1, "write_queue_nums": 1}
                    reply = self.broker.http.api("POST", "/topics", body)
                else:
                    reply = self.broker.http.api("POST", "/groups", {"name": name})
            except OSError:
                return
            if reply.status == 201:
                (self.topics if i % 2 == 0 else self.groups).append(name)
            elif len(self.refused) < 3:
                self.refused.append(f"{reply.status} {reply.text[:200]}")


@pytest.mark.parametrize("seed", [pytest.param(1, id="seed=1")])
def test_config_writes_killed(
    seed: int, clean_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    """SIGKILL while topics and groups are created in a loop, three times: every create that
    was acknowledged is there after the restart, no ``*.tmp`` is left, nothing else changed."""
    rng = random.Random(seed)
    clean_base.copy(tmp_path / "run")
    broker = Broker(tmp_path / "run", clean_base.token)
    verdict = Verdict("config-writes-kill", seed)
    topics: list[str] = []
    groups: list[str] = []
    moments = []
    with broker:
        broker.start()
        for k in range(KILLS):
            creator = Creator(broker, f"cw{k}")
            creator.start()
            delay = rng.uniform(0.2, 1.2)
            time.sleep(delay)
            broker.kill()
            creator.join(30)
            topics += creator.topics
            groups += creator.groups
            moments.append(
                f"kill {k} after {delay:.3f} s ({len(creator.topics)} topics, {len(creator.groups)} groups acknowledged)"
            )
            if creator.refused:
                verdict.notes.append(f"kill {k}: refused creates {creator.refused}")
            try:
                broker.start()
            except BrokerDied as died:
                verdict.fail(f"kill {k}: the broker did not start again: {died.what}")
                break
            leftovers = sorted(p.name for p in (broker.store / "config").glob("*.tmp"))
            if leftovers:
                verdict.fail(f"kill {k}: temporary files left after the restart: {leftovers}")
            for name in topics:
                if broker.http.api("GET", f"/topics/{name}").status != 200:
                    verdict.fail(f"kill {k}: topic {name}, acknowledged before a kill, is gone")
            for name in groups:
                if broker.http.api("GET", f"/groups/{name}").status != 200:
                    verdict.fail(f"kill {k}: group {name}, acknowledged before a kill, is gone")
        verdict.description = "; ".join(moments)
        fault = Fault(
            verdict.fault, seed, files=["config/topics.json", "config/subscriptionGroup.json"]
        )
        final = verify(broker, clean_base.ledger, fault)
        verify_config(broker, clean_base.config, final, fault)
        verdict.absorb(final, "after the kills")
        finish(broker, verdict)
    conclude(verdict, broker.log_tail(1500))


# --- start-up recovery ------------------------------------------------------------------------

RECOVERY_RECORDS = 8_000
RECOVERY_KEY_SPAN = 40
#: Async flush with a long thorough interval: the checkpoint stays behind, so recovery after
#: the SIGKILL checks and dispatches every record again (the slow path worth killing).
RECOVERY_SETTINGS = {
    "CAIRN_FLUSH": "async",
    "CAIRN_FLUSH_THOROUGH_INTERVAL_MS": "600000",
    "CAIRN_COMMITLOG_FILE_SIZE": str(1 << 20),
}


def recovered(broker: Broker, since: int) -> bool:
    """Whether the broker logged "recovered" after byte ``since`` of its log."""
    with broker.log_path.open("rb") as log:
        log.seek(since)
        return b"cairn.runtime: recovered" in log.read()


@pytest.mark.parametrize("seed", [pytest.param(1, id="seed=1")])
def test_startup_recovery_killed(
    seed: int, fault_template: tuple[Path, str], tmp_path: Path, conclude: Conclude
) -> None:
    """A crashed store of 8,000 Kafka records whose recovery re-dispatches everything; the broker
    is killed at random moments of that recovery (from taking the store lock to the
    "recovered" line), then started for good: every acknowledged record is there."""
    rng = random.Random(seed)
    template, token = fault_template
    copy_tree(template, tmp_path / "run")
    broker = Broker(tmp_path / "run", token, settings=RECOVERY_SETTINGS)
    verdict = Verdict("startup-recovery-kill", seed)
    ledger = Ledger()
    with broker:
        broker.start()
        create_kafka_topic(broker.bootstrap, "recover.t", 4)
        produce_kafka(
            broker.bootstrap, ledger, "recover.t", "rec", 0, RECOVERY_RECORDS,
            partitions=4, key_span=RECOVERY_KEY_SPAN,
        )  # fmt: skip
        reply = broker.http.api(
            "POST", "/topics", {"name": "recover-rest", "read_queue_nums": 2, "write_queue_nums": 2}
        )
        assert reply.status == 201, reply.text
        send_rest(broker.http, ledger, "recover-rest", "rr", 0, 200, queues=2)
        broker.kill()
        # How long recovery takes: from the store lock to the "recovered" line.
        since = broker.log_path.stat().st_size
        proc = broker.spawn()
        locked = _wait(lambda: holds_store_lock(proc.pid, broker.store), 60)
        done = _wait(lambda: recovered(broker, since), 120)
        broker.kill()
        span = max(done - locked, 0.05)
        verdict.notes.append(f"recovery took {span:.2f} s from the store lock to 'recovered'")
        moments = []
        for _ in range(KILLS):
            since = broker.log_path.stat().st_size
            pid = broker.spawn().pid
            _wait(lambda: holds_store_lock(pid, broker.store), 60)  # noqa: B023 (called here)
            delay = rng.uniform(0, span)
            time.sleep(delay)
            finished = recovered(broker, since)
            broker.kill()
            moments.append(
                f"killed {delay:.3f} s into recovery{' (it had finished)' if finished else ''}"
            )
        verdict.description = "; ".join(moments)
        try:
            broker.start(120)
            verdict.absorb(verify(broker, ledger, Fault(verdict.fault, seed)), "after the kills")
        except BrokerDied as died:
            verdict.fail(f"the broker did not start after the kills: {died.what}")
            verdict.lost = [a.label() for a in ledger.acks]
        finish(broker, verdict)
    verdict.acked = len(ledger)
    conclude(verdict, broker.log_tail(1500))


def _wait(condition: Callable[[], bool], timeout_s: float) -> float:
    """Poll ``condition`` every 5 ms; the monotonic time it became true (or the deadline)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(0.005)
    return deadline
