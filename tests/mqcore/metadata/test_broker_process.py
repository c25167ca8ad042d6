"""Config files under a real ``manage.py runbroker``: SIGKILL while topics and groups are
created over REST, and a damaged ``topics.json`` found at start."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from mqcore.store.health import StoreHealth
from tests.conftest import REPO, free_port, wait_for_port
from tests.support.manage import (
    SHARED_SETTINGS,
    ApiClient,
    broker_env,
    create_token,
    manage,
    start_runbroker,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KILL_ROUNDS = 6


class Broker:
    """One data directory and the ``runbroker`` processes started over it."""

    def __init__(self, tmp_path: Path) -> None:
        port = free_port()
        self.env = broker_env(tmp_path, port, 0, drop=SHARED_SETTINGS)
        self.store = tmp_path / "store"
        self.log = tmp_path / "broker.log"
        manage(self.env, "migrate", "--noinput", "-v", "0")
        self.api = ApiClient(f"http://127.0.0.1:{port}", create_token(self.env, "bot", "admin"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = start_runbroker(self.env, out)
        wait_for_port(int(self.env["CAIRN_HTTP_PORT"]), 60, self.proc)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, self.log.read_text(errors="replace")[-4000:]

    def names(self, path: str, **params: Any) -> set[str]:
        page = self.api.get(path, limit=1000, **params)
        assert page["next"] is None
        return {row["name"] for row in page["results"]}

    def config_problems(self) -> list[dict[str, Any]]:
        health = StoreHealth(self.store, readonly=True).load()
        return [p.as_dict() for p in health.problems() if p.kind == "config_recovered"]

    def check(self) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "mqcore", "check", str(self.store), "--quiet"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


class Creator(threading.Thread):
    """Creates topics and groups over REST, one after the other, until the broker dies;
    remembers the names whose creation was acknowledged."""

    def __init__(self, api: ApiClient, round_no: int) -> None:
        super().__init__(daemon=True)
        self.api, self.round_no = api, round_no
        self.topics: list[str] = []
        self.groups: list[str] = []

    def run(self) -> None:
        n = 0
        while True:
            n += 1
            topic, group = f"t{self.round_no}-{n}", f"g{self.round_no}-{n}"
            try:
                self.api.call("POST", "/topics", {"name": topic, "read_queue_nums": 1 + n % 4})
                self.topics.append(topic)
                self.api.call("POST", "/groups", {"name": group})
                self.groups.append(group)
            except (urllib.error.URLError, OSError):
                return  # killed


def test_sigkill_during_config_writes_loses_no_acknowledged_topic_or_group(
    tmp_path: Path,
) -> None:
    broker = Broker(tmp_path)
    rng = random.Random(17)
    topics: set[str] = set()
    groups: set[str] = set()
    leftovers_seen = 0
    for round_no in range(KILL_ROUNDS):
        leftovers = sorted((broker.store / "config").glob("*.tmp"))
        leftovers_seen += len(leftovers)
        logged = broker.log.read_text(errors="replace") if broker.log.exists() else ""
        broker.start()
        try:
            # Everything acknowledged before the last kill is there, from X itself.
            assert topics <= broker.names("/topics", kind="normal")
            assert groups <= broker.names("/groups")
            assert broker.config_problems() == []
            # The temp files the kill left were removed, each with a log line.
            new_lines = broker.log.read_text(errors="replace")[len(logged) :]
            for leftover in leftovers:
                assert f"removed {leftover}, left by a config write" in new_lines
            if round_no == 0:  # a CommitLog, so that ``check`` sees a store
                broker.api.call("POST", "/topics", {"name": "data"})
                broker.api.call("POST", "/topics/data/messages", {"messages": [{"body": "x"}]})
                topics.add("data")
            creator = Creator(broker.api, round_no)
            creator.start()
            time.sleep(rng.uniform(0.3, 2.0))
        finally:
            broker.kill()
        creator.join(30)
        assert creator.topics, "no topic was created before the kill"
        topics |= set(creator.topics)
        groups |= set(creator.groups)
    broker.start()
    try:
        assert topics <= broker.names("/topics", kind="normal")
        assert groups <= broker.names("/groups")
        assert broker.config_problems() == []
    finally:
        broker.stop()
    report = broker.check()
    assert "defect: config" not in report
    print(
        f"{KILL_ROUNDS} kills, {len(topics)} topics and {len(groups)} groups acknowledged, "
        f"{leftovers_seen} temp files left by the kills and removed at start"
    )


def test_a_damaged_topics_json_is_recovered_with_its_newest_topic(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    broker.start()
    try:
        broker.api.call("POST", "/topics", {"name": "old", "read_queue_nums": 2})
        broker.api.call("POST", "/topics", {"name": "rb", "read_queue_nums": 4})
        sent = broker.api.call(
            "POST",
            "/topics/rb/messages",
            {"messages": [{"body": f"m{i}", "queue_id": i % 4} for i in range(200)]},
        )
    finally:
        broker.stop()
    path = broker.store / "config" / "topics.json"
    text = path.read_text()
    at = text.index('"readQueueNums":4')  # rb's: 4 → 5, the file still parses
    path.write_text(text[: at + 16] + "5" + text[at + 17 :])
    json.loads(path.read_text())
    assert (
        "defect: config: topics.json: topics.json does not match"
        in subprocess.run(
            [sys.executable, "-m", "mqcore", "check", str(broker.store), "--quiet"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    )

    broker.start()
    try:
        rb = broker.api.get("/topics/rb")
        assert (rb["read_queue_nums"], rb["message_count"]) == (4, 200)
        message = broker.api.get(f"/messages/{sent['results'][199]['msg_id']}")
        assert message["body"] == "m199"
        [problem] = broker.config_problems()
        assert problem["id"].startswith("config:topics.json:")
        assert "loaded topics.json.bak" in problem["summary"]
        assert "re-created from the store's data: 1 topic rb (4 queues)" in problem["summary"]
        assert problem["detail"]["set_aside"] == ["topics.json.corrupt"]
    finally:
        broker.stop()
    log = broker.log.read_text(errors="replace")
    assert "ERROR" in log and "config recovered (config:topics.json:" in log
    report = broker.check()
    assert "defect: config" not in report
    assert "note: config: topics.json.corrupt" in report
