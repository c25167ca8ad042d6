"""X, X.bak and X.sum: every crash point of a write, and loading the newest intact copy."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mqcore.metadata.checked_file import (
    CheckedFile,
    LoadOutcome,
    inspect_file,
    remove_stale_temp_files,
)
from mqcore.metadata.integrity import read_sidecar, sidecar_path
from mqcore.metadata.jsonfile import dumps_fastjson
from tests.conftest import REPO

V = [dumps_fastjson({"v": n, "pad": "x" * n}) for n in range(6)]
STEPS = ["temp written", "backup made", "record staged", "record installed", "installed", "synced"]
INSTALLED = STEPS.index("installed") + 1  # steps done when X holds the new version


def identity(raw: Any) -> Any:
    return raw


def value(n: int) -> Any:
    return json.loads(V[n])


def load(path: Path, *, readonly: bool = False) -> LoadOutcome[Any]:
    return CheckedFile(path).load(identity, readonly=readonly)


def written(path: Path, *versions: int) -> CheckedFile:
    file = CheckedFile(path)
    for n in versions:
        file.write(V[n])
    return file


def bak(path: Path) -> Path:
    return Path(f"{path}.bak")


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


# -- writing --------------------------------------------------------------------------------------


def test_write_keeps_the_exact_text_the_previous_version_and_records_both(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    written(path, 0, 1)
    assert path.read_bytes() == V[1].encode()  # RocketMQ's bytes, nothing added
    assert bak(path).read_bytes() == V[0].encode()
    sidecar, damage = read_sidecar(path)
    assert damage is None and sidecar is not None
    assert [v.generation for v in sidecar.versions] == [2, 1]
    assert sidecar.find(V[1].encode()) == sidecar.newest
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "topics.json",
        "topics.json.bak",
        "topics.json.sum",
    ]


def test_the_step_list_is_the_documented_one(tmp_path: Path) -> None:
    assert list(CheckedFile(tmp_path / "t.json").write_steps(V[0])) == STEPS


def test_generations_continue_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    written(path, 0, 1, 2)
    file = CheckedFile(path)
    assert file.load(identity).generation == 3
    file.write(V[3])
    sidecar, _ = read_sidecar(path)
    assert sidecar is not None and [v.generation for v in sidecar.versions] == [4, 3]


def crash_after(path: Path, completed: int, text: str) -> None:
    """Run the first ``completed`` steps of a write of ``text``, then drop the process state
    as a kill would (a fresh CheckedFile is used afterwards)."""
    file = CheckedFile(path)
    file.load(identity)
    steps: Iterator[str] = file.write_steps(text)
    for _ in range(completed):
        next(steps)


@pytest.mark.parametrize("completed", range(len(STEPS) + 1))
def test_a_crash_after_any_step_loads_the_newest_committed_version_intact(
    tmp_path: Path, completed: int
) -> None:
    path = tmp_path / "topics.json"
    written(path, 0, 1, 2)  # X = V2 (generation 3), X.bak = V1 (generation 2)
    crash_after(path, completed, V[3])
    remove_stale_temp_files(tmp_path)
    outcome = load(path)
    expected = 3 if completed >= INSTALLED else 2
    assert outcome.status == "intact" and outcome.damage == []
    assert outcome.value == value(expected) and outcome.source == "topics.json"
    assert outcome.generation == expected + 1
    # Every copy on disk is one the record lists, whatever the crash point.
    found = inspect_file(path)
    assert found.main.version is not None and found.backup.version is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "topics.json",
        "topics.json.bak",
        "topics.json.sum",
    ]
    # The next write after the crash completes normally and keeps the previous version.
    again = CheckedFile(path)
    again.load(identity)
    again.write(V[4])
    assert load(path).value == value(4)
    assert bak(path).read_bytes() == V[expected].encode()


@pytest.mark.parametrize("completed", range(len(STEPS) + 1))
def test_a_crash_then_a_damaged_x_loads_the_newest_intact_other_copy(
    tmp_path: Path, completed: int
) -> None:
    path = tmp_path / "topics.json"
    written(path, 0, 1, 2)
    crash_after(path, completed, V[3])
    in_x = 3 if completed >= INSTALLED else 2
    # X.bak holds X's version from the moment the backup is made (step 2).
    in_bak = in_x - 1 if completed >= INSTALLED or completed < 2 else in_x
    assert load(path).status == "intact"  # the restart; then the disk damages X in place
    flip(path, len(path.read_bytes()) // 2)
    outcome = load(path)
    assert outcome.status == "recovered"
    assert (outcome.source, outcome.value) == ("topics.json.bak", value(in_bak))
    assert outcome.generation == in_bak + 1
    assert outcome.damage[0][0] == "topics.json"
    assert "does not match its checksum" in outcome.damage[0][1]
    assert outcome.set_aside == ("topics.json.corrupt",)


@pytest.mark.parametrize("completed", [2, 3, 4])
def test_a_restart_makes_a_backup_still_linked_to_x_a_copy_of_its_own(
    tmp_path: Path, completed: int
) -> None:
    path = tmp_path / "topics.json"
    written(path, 0, 1)
    crash_after(path, completed, V[2])
    assert os.path.samefile(path, bak(path))  # one inode: damage would hit both copies
    load(path, readonly=True)
    assert os.path.samefile(path, bak(path))  # a check changes nothing
    assert load(path).status == "intact"
    assert not os.path.samefile(path, bak(path))
    assert bak(path).read_bytes() == path.read_bytes() == V[1].encode()
    assert inspect_file(path).backup.version is not None


def test_write_failure_on_a_full_disk_leaves_x_intact(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        path = mount / "topics.json"
        file = written(path, 0, 1)
        with pytest.raises(OSError):
            file.write(dumps_fastjson({"v": 9, "pad": "y" * 200_000}))
        outcome = load(path)
        assert outcome.status == "intact" and outcome.value == value(1)
        for leftover in remove_stale_temp_files(mount):
            assert leftover.endswith(".tmp")
        file.write(V[2])  # space again once the temp file is gone
        assert load(path).value == value(2)
    finally:
        subprocess.run(["umount", str(mount)], check=True)


# -- loading ---------------------------------------------------------------------------------------


def two_versions(tmp_path: Path) -> Path:
    path = tmp_path / "topics.json"
    written(path, 0, 1)  # X = V1 (generation 2), X.bak = V0 (generation 1)
    return path


def digit_position(path: Path) -> int:
    return path.read_bytes().index(b'"v":') + 4


Damage = Callable[[Path], object]
DAMAGES: dict[str, Damage] = {
    "digit changed, still parses": lambda p: flip(p, digit_position(p)),
    "letter changed, still parses": lambda p: flip(p, p.read_bytes().index(b"x")),
    "brace flipped": lambda p: flip(p, 0),
    "last byte flipped": lambda p: flip(p, len(p.read_bytes()) - 1, 0x80),
    "cut in half": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "emptied": lambda p: p.write_bytes(b""),
    "deleted": lambda p: p.unlink(),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_x_falls_back_to_the_intact_backup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    path = two_versions(tmp_path)
    original = path.read_bytes() if path.exists() else b""
    DAMAGES[damage](path)
    outcome = load(path)
    assert outcome.status == "recovered"
    assert (outcome.source, outcome.value, outcome.generation) == ("topics.json.bak", value(0), 1)
    assert outcome.newest_generation == 2
    assert "1 change older" in outcome.describe()
    damaged = dict(outcome.damage)["topics.json"]
    if damage == "deleted":
        assert damaged == "missing" and outcome.set_aside == ()
    elif damage == "emptied":
        assert damaged == "empty" and not path.exists()
    else:
        assert outcome.set_aside == ("topics.json.corrupt",)
        assert Path(f"{path}.corrupt").read_bytes() != original
    if "still parses" in damage:
        assert "though it still parses" in damaged and outcome.damaged_value is not None
    assert not path.exists()  # out of the way: the next write cannot make it the backup
    file = CheckedFile(path)
    file.load(identity)
    file.write(V[2])
    assert bak(path).read_bytes() == V[0].encode()
    assert load(path).status == "intact"


def test_a_damaged_backup_beside_an_intact_x_is_reported_not_loaded(tmp_path: Path) -> None:
    path = two_versions(tmp_path)
    flip(bak(path), 3)
    outcome = load(path)
    assert outcome.status == "intact" and outcome.value == value(1)
    assert [label for label, _ in outcome.damage] == ["topics.json.bak"]


def test_both_damaged_loads_the_newest_that_parses_unverified(tmp_path: Path) -> None:
    path = two_versions(tmp_path)
    flip(path, digit_position(path))  # V1 becomes {"v":0,...}: parses
    flip(bak(path), 0)  # unparseable
    outcome = load(path)
    assert outcome.status == "recovered" and outcome.source == "topics.json"
    assert outcome.generation is None and "unverified" in outcome.describe()
    assert outcome.set_aside == ("topics.json.bak.corrupt",)


def test_nothing_usable_starts_empty_and_sets_everything_aside(tmp_path: Path) -> None:
    path = two_versions(tmp_path)
    path.write_bytes(b"{broken")
    bak(path).write_bytes(b"[also broken")
    outcome = load(path)
    assert outcome.status == "recovered" and outcome.value is None and outcome.source is None
    assert outcome.set_aside == ("topics.json.corrupt", "topics.json.bak.corrupt")
    assert "no copy could be loaded: started it empty" in outcome.describe()


def test_x_and_backup_deleted_with_the_record_left_is_a_recovery(tmp_path: Path) -> None:
    path = two_versions(tmp_path)
    path.unlink()
    bak(path).unlink()
    outcome = load(path)
    assert outcome.status == "recovered" and outcome.value is None
    assert dict(outcome.damage) == {"topics.json": "missing", "topics.json.bak": "missing"}


def test_nothing_at_all_is_a_fresh_start(tmp_path: Path) -> None:
    outcome = load(tmp_path / "topics.json")
    assert (outcome.status, outcome.value, outcome.damage) == ("fresh", None, [])


def test_a_damaged_record_loads_x_unverified_and_is_replaced(tmp_path: Path) -> None:
    path = two_versions(tmp_path)
    flip(Path(sidecar_path(path)), 20)
    file = CheckedFile(path)
    outcome = file.load(identity)
    assert outcome.status == "recovered" and outcome.value == value(1)
    assert outcome.source == "topics.json" and outcome.generation is None
    assert outcome.set_aside == ("topics.json.sum.corrupt",)
    assert "topics.json.sum" in dict(outcome.damage)
    file.write(V[2])
    after = load(path)
    assert after.status == "intact" and after.value == value(2)
    # The backup (the V1 that was loaded) is vouched for again.
    assert inspect_file(path).backup.version is not None


@pytest.mark.parametrize("damage", ["cut in half", "deleted", "brace flipped"])
def test_files_without_a_record_are_accepted_when_they_parse(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "topics.json"
    path.write_text(V[1])  # as RocketMQ writes it: X and X.bak, no record
    bak(path).write_text(V[0])
    assert load(path).status == "intact" and load(path).value == value(1)
    DAMAGES[damage](path)
    outcome = load(path)
    assert outcome.status == "recovered" and outcome.source == "topics.json.bak"
    assert outcome.generation is None and outcome.value == value(0)


def test_the_first_write_over_a_rocketmq_file_vouches_for_its_backup(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    path.write_text(V[1])
    file = CheckedFile(path)
    file.load(identity)
    file.write(V[2])
    found = inspect_file(path)
    assert found.main.version is not None and found.backup.version is not None
    assert found.backup.data == V[1].encode()


def test_readonly_load_changes_nothing(tmp_path: Path) -> None:
    path = two_versions(tmp_path)
    flip(path, 0)
    before = sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir())
    outcome = load(path, readonly=True)
    assert outcome.status == "recovered" and outcome.set_aside == ()
    assert sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir()) == before


def test_a_second_damage_does_not_overwrite_the_first_set_aside_copy(tmp_path: Path) -> None:
    path = two_versions(tmp_path)
    flip(path, 0)
    load(path)
    written(path, 3)
    flip(path, 0)
    assert load(path).set_aside == ("topics.json.corrupt.2",)
    assert Path(f"{path}.corrupt").exists()


def test_stale_temp_files_are_removed_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("topics.json.tmp", "topics.json.bak.tmp", "topics.json.sum.tmp", "keep.json"):
        (tmp_path / name).write_text("x")
    (tmp_path / "dir.tmp").mkdir()
    with caplog.at_level(logging.INFO, logger="mqcore.metadata.checked_file"):
        removed = remove_stale_temp_files(tmp_path)
    assert removed == ["topics.json.bak.tmp", "topics.json.sum.tmp", "topics.json.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.tmp", "keep.json"]
    assert len([r for r in caplog.records if "interrupted" in r.getMessage()]) == 3
    assert remove_stale_temp_files(tmp_path / "absent") == []


# -- kill -9 of a real writer ------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys
    from mqcore.metadata.checked_file import CheckedFile
    file = CheckedFile(sys.argv[1])
    file.load(lambda raw: raw)
    pad = "x" * 100_000
    n = 0
    while True:
        n += 1
        file.write('{"n":%d,"pad":"%s"}' % (n, pad))
        print(n, flush=True)
    """
)


def test_sigkill_during_writes_always_leaves_an_intact_newest_copy(tmp_path: Path) -> None:
    rng = random.Random(20240917)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for round_no in range(8):
        path = tmp_path / f"round{round_no}" / "consumerOffset.json"
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, env=env
        )
        assert proc.stdout is not None
        acknowledged = 0
        try:
            for _ in range(rng.randint(1, 25)):
                line = proc.stdout.readline()
                assert line, "the writer died on its own"
                acknowledged = int(line)
            time.sleep(rng.random() * 0.005)  # land the kill anywhere inside a write
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        remove_stale_temp_files(path.parent)
        outcome = load(path)
        assert outcome.status == "intact", outcome.describe()
        assert outcome.value["n"] >= acknowledged
        found = inspect_file(path)
        assert found.backup.data is None or found.backup.version is not None


def test_only_the_named_files_leftovers_when_another_process_may_write(tmp_path: Path) -> None:
    names = ["topics.json.tmp", "topics.json.bak.tmp", "topics.json.sum.tmp"]
    for name in [*names, "tieredStoreMetadata.json.tmp", "tieredStoreMetadata.json.bak.tmp"]:
        (tmp_path / name).write_text("x")
    assert remove_stale_temp_files(tmp_path, ["topics.json"]) == sorted(names)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "tieredStoreMetadata.json.bak.tmp",
        "tieredStoreMetadata.json.tmp",
    ]
