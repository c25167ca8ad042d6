"""StoreHealth: problems kept until acknowledged (across restarts and processes), conditions
in memory, a damaged file set aside and reported."""

from __future__ import annotations

import json
from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.store.health import FILE_NAME, StoreHealth


def test_a_fresh_store_is_ok(tmp_path: Path) -> None:
    health = StoreHealth(tmp_path).load()
    assert health.status == "ok"
    assert health.as_dict() == {"status": "ok", "problems": [], "conditions": []}
    assert not (tmp_path / FILE_NAME).exists()


def test_a_problem_stays_until_acknowledged_and_survives_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(1_000)
    health = StoreHealth(tmp_path, clock).load()
    health.report("quarantine", "q:1", "bad record", {"offset": 1})
    assert health.status == "degraded"

    again = StoreHealth(tmp_path, clock).load()
    assert [p.id for p in again.problems()] == ["q:1"]
    assert again.problems()[0].detail == {"offset": 1}

    clock.advance(5)
    done = again.acknowledge(None, "alice")
    assert [(p.id, p.acknowledged_by, p.acknowledged_ms) for p in done] == [("q:1", "alice", 1005)]
    assert again.status == "ok"

    third = StoreHealth(tmp_path, clock).load()
    assert third.status == "ok"
    assert [p.id for p in third.problems(include_acknowledged=True)] == ["q:1"]
    assert third.as_dict(include_acknowledged=True)["acknowledged"][0]["acknowledged"] is True


def test_reporting_the_same_fact_twice_keeps_one_entry(tmp_path: Path) -> None:
    health = StoreHealth(tmp_path).load()
    first = health.report("quarantine", "q:1", "bad record")
    health.acknowledge(["q:1"], "bob")
    second = health.report("quarantine", "q:1", "bad record, again")
    assert second is first and second.acknowledged
    assert health.status == "ok"


def test_acknowledging_one_leaves_the_others(tmp_path: Path) -> None:
    health = StoreHealth(tmp_path).load()
    health.report("quarantine", "q:1", "one")
    health.report("config_recovered", "c:topics", "two")
    assert [p.id for p in health.acknowledge(["c:topics", "nope"], "carol")] == ["c:topics"]
    assert [p.id for p in health.problems()] == ["q:1"]


def test_another_process_reports_are_seen(tmp_path: Path) -> None:
    broker = StoreHealth(tmp_path).load()
    worker = StoreHealth(tmp_path).load()
    worker.report("quarantine", "q:9", "seen by the worker")
    assert [p.id for p in broker.problems()] == ["q:9"]


def test_conditions_are_in_memory_and_clear(tmp_path: Path) -> None:
    clock = FakeClock(10)
    health = StoreHealth(tmp_path, clock).load()
    health.set_condition("rebuild", "rebuild:cq", "rebuilding", progress=0.25)
    clock.advance(3)
    condition = health.set_condition("rebuild", "rebuild:cq", "rebuilding", progress=0.5)
    assert (condition.since_ms, condition.progress) == (10, 0.5)
    assert health.status == "degraded"
    assert StoreHealth(tmp_path).load().status == "ok"
    assert health.clear_condition("rebuild:cq")
    assert not health.clear_condition("rebuild:cq")
    assert health.status == "ok"


def test_a_damaged_file_is_set_aside_and_reported(tmp_path: Path) -> None:
    StoreHealth(tmp_path).load().report("quarantine", "q:1", "one")
    path = tmp_path / FILE_NAME
    path.write_bytes(path.read_bytes()[:20])
    health = StoreHealth(tmp_path).load()
    assert (tmp_path / (FILE_NAME + ".corrupt")).exists()
    assert [p.kind for p in health.problems()] == ["health_file_damaged"]
    assert health.status == "degraded"


def test_readonly_never_writes(tmp_path: Path) -> None:
    health = StoreHealth(tmp_path, readonly=True).load()
    health.report("quarantine", "q:1", "one")
    assert health.status == "degraded"
    assert not (tmp_path / FILE_NAME).exists()


def test_the_file_is_plain_json(tmp_path: Path) -> None:
    StoreHealth(tmp_path).load().report("quarantine", "q:1", "one", {"length": 7})
    raw = json.loads((tmp_path / FILE_NAME).read_text())
    assert raw["version"] == 1
    assert raw["problems"][0]["detail"] == {"length": 7}
